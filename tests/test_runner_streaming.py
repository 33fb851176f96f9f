"""The runner streams finished episodes to the store and keeps none: memory does not grow with the run."""

import gc
import weakref

import pytest
from tiny_suite import suite as tiny_suite

from mcp_resili.client import runner
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.registry.loader import get_suite
from mcp_resili.report import summarize
from mcp_resili.report.summary import rate_by_task
from mcp_resili.store import EpisodeRow, Store, StoredRows, StoreError

pytestmark = pytest.mark.anyio


def alive(refs: list[weakref.ref[EpisodeRow]]) -> int:
    gc.collect()
    return sum(1 for ref in refs if ref() is not None)


async def test_finished_episodes_are_handed_to_the_store_and_not_kept(tmp_path, monkeypatch):
    # A small write queue: the rows that may wait for the disk are few, whatever the run's size.
    monkeypatch.setattr(runner, "WRITE_QUEUE", 4)
    monkeypatch.setattr(runner, "WRITE_BATCH", 4)
    refs: list[weakref.ref[EpisodeRow]] = []
    most_alive = 0

    def on_episode(row: EpisodeRow) -> None:
        nonlocal most_alive
        refs.append(weakref.ref(row))
        if len(refs) % 20 == 0:
            most_alive = max(most_alive, alive(refs))

    # The tiny suite: 2 agents x 6 tasks (its default variant) x 14 trials.
    config = RunConfig(suite="tiny", db=tmp_path / "r.db", trials=14, concurrency=8)
    result = await execute(config, suite=tiny_suite(), on_episode=on_episode)
    assert len(refs) == result.episodes == 168
    # Queue (4) + the batch being written (4) + episodes in flight (8) + the one being delivered.
    assert 0 < most_alive <= 4 + 4 + 8 + 1
    assert alive(refs) == 0  # the result holds counts, not rows
    store = Store(tmp_path / "r.db", read_only=True)
    try:
        stored = store.episodes(result.run_id)
    finally:
        store.close()
    assert len(stored) == 168
    assert list(result.iter_rows()) == stored
    assert result.infrastructure_errors == sum(1 for r in stored if r.label is None)
    light = list(result.iter_rows(traces=False))
    assert [r.episode_id for r in light] == [r.episode_id for r in stored]
    assert {r.trace for r in light} == {""} and all(r.trace for r in stored)
    assert [r.score for r in light] == [r.score for r in stored]


async def test_summaries_read_from_the_store_match_a_count_by_hand(tmp_path):
    # ResiliBench: its bound columns are summary columns (the tiny suite has none).
    suite = get_suite("resilibench")
    config = RunConfig(db=tmp_path / "r.db", trials=2, limit=12, variants=("baseline", "cot"))
    result = await execute(config)
    rows = StoredRows(tmp_path / "r.db", result.run_id)
    assert len(rows) == 2 * 12 * 2 * 2
    summaries = summarize(rows, (), None, suite.summary_columns)
    everything = result.rows
    assert len(summaries) == 4  # two models x two variants
    for summary in summaries:
        members = [r for r in everything if (r.model, r.variant) == (summary.model, summary.variant)]
        scored = [r for r in members if r.label is not None]
        assert summary.episodes == len(members) == 24
        assert summary.scored == len(scored)
        for level in ("full", "partial", "failure"):
            assert summary.levels[level].count == sum(1 for r in scored if r.label == level)
            # The interval too, clustered by task, exactly as from the rows in memory.
            assert summary.levels[level] == rate_by_task((r.task_id, r.label == level) for r in scored)
        assert summary.tasks == len({r.task_id for r in scored}) == 12
        assert summary.mean_value == pytest.approx(sum(r.value or 0.0 for r in scored) / len(scored))
        for column in suite.summary_columns:
            assert summary.columns[column.key] == column.of(scored)
        assert summary.input_tokens == sum(r.input_tokens for r in members)
    # Some column is known and the agents differ: the comparison above compared something.
    assert any(v is not None for s in summaries for v in s.columns.values())
    assert len({s.levels["full"].count for s in summaries}) > 1
    # Indexing the sequence reads the store too.
    assert rows[0].episode_id == everything[0].episode_id and rows[-1].episode_id == everything[-1].episode_id


def count_passes(monkeypatch) -> list[int]:
    """From now on, ``[n]``: how many passes over stored rows were begun."""
    passes = [0]
    iter_episodes = Store.iter_episodes

    def counted(self, *args, **kwargs):
        passes[0] += 1
        return iter_episodes(self, *args, **kwargs)

    monkeypatch.setattr(Store, "iter_episodes", counted)
    return passes


def test_fault_specs_are_asked_of_the_store_and_a_one_spec_run_takes_no_pass(tmp_path, monkeypatch):
    from tiny_suite.synthetic import write_synthetic_run

    from mcp_resili.report.degradation import degradation
    from mcp_resili.report.robustness import robustness
    from mcp_resili.store import fault_specs

    db = tmp_path / "r.db"
    write_synthetic_run(db, 40, run_id="two", faults=("none", "resilibench"))
    write_synthetic_run(db, 30, run_id="one", seed=1, faults=("resilibench",))
    two = StoredRows(db, "two")
    assert fault_specs(two) == {r.faults for r in two} == {"none", "resilibench"}
    assert fault_specs(list(two)) == {"none", "resilibench"}
    passes = count_passes(monkeypatch)
    one = StoredRows(db, "one")
    assert fault_specs(one) == {"resilibench"}
    # Neither section applies to a single fault spec, and neither reads a row to find that out.
    assert degradation(one) is None and robustness(one) is None
    assert passes == [0]
    assert degradation(two) is not None  # two specs: the rows are read
    assert passes[0] > 0


def test_a_score_component_is_asked_of_the_store_exactly(tmp_path, monkeypatch):
    from dataclasses import replace

    from tiny_suite.synthetic import synthetic_rows, write_synthetic_run

    from mcp_resili.report.coping import coping_data
    from mcp_resili.report.model_coping import model_coping_data
    from mcp_resili.store import may_have_score_component

    db = tmp_path / "r.db"
    write_synthetic_run(db, 12, run_id="plain")
    plain = StoredRows(db, "plain")
    assert not plain.any_score_component("coping_faults")
    assert may_have_score_component(list(plain), "coping_faults")  # rows in memory: their pass decides
    passes = count_passes(monkeypatch)
    assert coping_data(plain) == {} and model_coping_data(plain) == {}
    assert passes == [0]
    # A component that is there, even as null, is found; a key elsewhere in the score is not.
    null = list(synthetic_rows("null", 3))
    null[1] = replace(null[1], score={**null[1].score, "components": {"coping_faults": None}})
    elsewhere = list(synthetic_rows("elsewhere", 3))
    elsewhere[1] = replace(elsewhere[1], score={**elsewhere[1].score, "coping_faults": 1})
    store = Store(db)
    try:
        for run_id, rows in (("null", null), ("elsewhere", elsewhere)):
            store.add_run(run_id, "2026-01-01T00:00:00", "tiny", 0, {})
            store.add_episodes(rows)
    finally:
        store.close()
    assert StoredRows(db, "null").any_score_component("coping_faults")
    assert not StoredRows(db, "null").any_score_component("llm_faults")
    assert not StoredRows(db, "elsewhere").any_score_component("coping_faults")
    assert coping_data(StoredRows(db, "elsewhere")) == coping_data(elsewhere) == {}
    # A score SQLite cannot read: the store does not claim to know, and the pass over the rows names it.
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(db)) as raw, raw:
        raw.execute(
            "UPDATE episodes SET score = '{not json' WHERE rowid = "
            "(SELECT MIN(rowid) FROM episodes WHERE run_id = 'plain')"
        )
    assert StoredRows(db, "plain").any_score_component("coping_faults")
    with pytest.raises(StoreError, match="damaged"):
        coping_data(StoredRows(db, "plain"))


async def test_runs_collect_young_objects_less_often_and_restore_the_collector_after(tmp_path):
    import anyio

    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []

    def on_episode(row: EpisodeRow) -> None:
        seen.append(gc.get_threshold())

    async def one(name: str) -> None:
        config = RunConfig(suite="tiny", db=tmp_path / f"{name}.db", trials=2, concurrency=2)
        await execute(config, suite=tiny_suite(), on_episode=on_episode)

    async with anyio.create_task_group() as group:  # two runs overlapping in one process
        group.start_soon(one, "a")
        group.start_soon(one, "b")
    assert len(seen) == 2 * 24
    assert {threshold[0] for threshold in seen} == {max(before[0], runner.YOUNG_COLLECTION)}
    assert gc.get_threshold() == before
    assert not gc.get_freeze_count()
