import sqlite3

import pytest

from mcp_resili.cli import main
from mcp_resili.store import EpisodeRow, Store, StoreError
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


def write_schema_1_database(path):
    """A results database as the first schema wrote it: run r1 with one episode, 'old'."""
    db = sqlite3.connect(path)
    with db:
        db.executescript(_MIGRATIONS[0])
        db.execute("PRAGMA user_version = 1")
        db.execute("INSERT INTO runs VALUES ('r1', '2026-01-01', 'tiny', 0, '{}')")
        db.execute(
            "INSERT INTO episodes VALUES ('r1', 'old', 'openai:x', 'none', 'baseline', 't', 0, 'completed',"
            " 'full', 1.0, NULL, '{}', 5, 1)"
        )
    db.close()


def test_a_database_from_before_costs_is_migrated_and_keeps_its_episodes(tmp_path):
    path = tmp_path / "old.db"
    write_schema_1_database(path)
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


@pytest.mark.parametrize("command", ["report", "export"])
def test_a_file_that_is_not_a_database_is_one_line_exit_2_and_left_untouched(tmp_path, capsys, command):
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    before = path.read_bytes()
    assert main([command, "--db", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a usable mcp-resili results database" in err
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]  # no -wal or -shm left behind


def test_another_programs_sqlite_database_is_refused_and_not_migrated(tmp_path, capsys):
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    assert main(["report", "--db", str(path)]) == 2
    assert "another program (tables: users)" in capsys.readouterr().err
    with sqlite3.connect(path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert tables == ["users"]


def test_a_missing_database_or_a_folder_is_one_line_exit_2(tmp_path, capsys):
    assert main(["report", "--db", str(tmp_path / "missing.db")]) == 2
    assert "no results database" in capsys.readouterr().err
    with pytest.raises(StoreError, match=r"cannot open results database|not a usable"):
        Store(tmp_path)


@pytest.mark.parametrize("command", ["report", "export"])
def test_reading_an_older_database_leaves_it_as_its_writer_left_it(tmp_path, capsys, command):
    """A report used to migrate it in place (and switch it to WAL): the mcp-resili that wrote it then
    refused it as "written by a newer mcp-resili". Now the upgrade happens in a copy in memory."""
    path = tmp_path / "old.db"
    write_schema_1_database(path)
    before = path.read_bytes()
    assert main([command, "--db", str(path)]) == 0
    assert "old" in capsys.readouterr().out or command == "report"
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]


@pytest.mark.parametrize("command", ["report", "export"])
def test_an_empty_file_is_not_turned_into_a_database(tmp_path, capsys, command):
    path = tmp_path / "empty.db"
    path.touch()
    assert main([command, "--db", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no mcp-resili results" in err
    assert path.read_bytes() == b""
