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
from mcp_resili.store import EpisodeRow, Store, StoredRows

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
