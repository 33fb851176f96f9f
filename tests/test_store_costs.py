import sqlite3

from mcp_resili.store import EpisodeRow, Store
from mcp_resili.store.sqlite import _MIGRATIONS


def row(episode_id, cost):
    return EpisodeRow(
        run_id="r1",
        episode_id=episode_id,
        model="openai:x",
        faults="none",
        variant="baseline",
        task_id="t",
        trial=0,
        termination="completed",
        label="full",
        value=1.0,
        score=None,
        trace="{}\n",
        input_tokens=10,
        output_tokens=2,
        cost_usd=cost,
    )


def test_a_database_from_before_costs_is_migrated_and_keeps_its_episodes(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(_MIGRATIONS[0])
        db.execute("PRAGMA user_version = 1")
        db.execute("INSERT INTO runs VALUES ('r1', '2026-01-01', 'resilibench', 0, '{}')")
        db.execute(
            "INSERT INTO episodes VALUES ('r1', 'old', 'openai:x', 'none', 'baseline', 't', 0, 'completed',"
            " 'full', 1.0, NULL, '{}', 5, 1)"
        )
    store = Store(path)
    try:
        store.add_episode(row("new", 0.25))
        by_id = {r.episode_id: r for r in store.episodes("r1")}
        assert store.episode_ids("r1") == {"old", "new"}
        assert store.run_config("r1") == {} and store.run_config("nope") is None
    finally:
        store.close()
    assert by_id["old"].cost_usd is None and by_id["old"].input_tokens == 5
    assert by_id["new"].cost_usd == 0.25
