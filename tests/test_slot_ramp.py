"""The run's slots open over a ramp, not all at once; which episodes play and their results do not change.

Runs play the tiny suite (tests/tiny_suite), found by name through its entry point.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from mcp_resili.cli import main
from mcp_resili.client import executor
from mcp_resili.client.executor import SLOT_OPENING_INTERVAL, initially_open, open_slots, opening_delay
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.trace import Trace


def test_opening_delays_worked_out_by_hand() -> None:
    default = RunConfig()
    assert [opening_delay(default, s, 4) for s in range(4)] == [0, 0.004, 0.008, 0.012]
    ramp = RunConfig(ramp_up=2.0)
    assert [opening_delay(ramp, s, 5) for s in range(5)] == [0, 0.4, 0.8, 1.2, 1.6]
    assert [opening_delay(RunConfig(ramp_up=0), s, 3) for s in range(3)] == [0, 0, 0]
    assert opening_delay(ramp, 0, 1) == 0
    # One slot is open from the start under a ramp; all of them with none, or with only one slot.
    assert [initially_open(c, 4) for c in (default, ramp, RunConfig(ramp_up=0))] == [1, 1, 4]
    assert initially_open(ramp, 1) == 1


def test_the_default_interval_is_the_one_run_help_states(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert f"one slot every {SLOT_OPENING_INTERVAL * 1000:g} ms" in " ".join(capsys.readouterr().out.split())


@pytest.mark.anyio
async def test_open_slots_opens_each_slot_after_waiting_for_its_own_time() -> None:
    steps: list[tuple[str, float]] = []

    async def sleep_until(deadline: float) -> None:
        steps.append(("wait", deadline))

    before = anyio.current_time()
    await open_slots(RunConfig(ramp_up=1.0), 5, lambda: steps.append(("open", 0.0)), sleep_until)
    assert [kind for kind, _ in steps] == ["wait", "open"] * 4  # slot 0 was open already
    deadlines = [at for kind, at in steps if kind == "wait"]
    # 1 s over 5 slots: slots 1-4 open 0.2, 0.4, 0.6 and 0.8 s after the start.
    assert deadlines[0] >= before + 0.2
    assert [round(at - deadlines[0], 9) for at in deadlines] == [0, 0.2, 0.4, 0.6]


class InFlight:
    """Counts the work items a module's ``play_item`` has in flight, and the most at once."""

    def __init__(self, play_item: Any) -> None:
        self.play_item = play_item
        self.now = self.peak = 0

    @classmethod
    def counting(cls, module: Any, monkeypatch: pytest.MonkeyPatch) -> InFlight:
        counter = cls(module.play_item)
        monkeypatch.setattr(module, "play_item", counter.play)
        return counter

    async def play(self, session: Any, item: Any) -> Any:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await self.play_item(session, item)
        finally:
            self.now -= 1


def _played(rows) -> list[tuple[str, str, int, str, str, str]]:
    """What each episode did and scored: its calls with their faults, its label and components."""
    out = []
    for row in rows:
        calls = [
            (c.tool, json.dumps(c.fault.model_dump() if c.fault else None))
            for c in Trace.from_lines(row.trace.splitlines()).tool_calls
        ]
        out.append((row.model, row.task_id, row.trial, row.label, json.dumps(row.score), json.dumps(calls)))
    return sorted(out)


@pytest.mark.anyio
async def test_a_run_finishes_on_its_open_slot_when_the_rest_would_open_an_hour_later(tmp_path, monkeypatch):
    episodes = InFlight.counting(executor, monkeypatch)
    base = dict(suite="tiny", trials=2, limit=4, seed=3, concurrency=4)
    # Slot 1 would open after 900 s: the run ends when its work is done, on slot 0 alone.
    slow = await execute(RunConfig(db=tmp_path / "slow.db", ramp_up=3600, **base))
    assert episodes.peak == 1 and len(slow.rows) == 16
    at_once = await execute(RunConfig(db=tmp_path / "at_once.db", ramp_up=0, **base))
    default = await execute(RunConfig(db=tmp_path / "default.db", **base))
    assert _played(slow.rows) == _played(at_once.rows) == _played(default.rows)
    assert any(fault != "null" for *_, calls in _played(slow.rows) for _, fault in json.loads(calls))


def test_resume_may_change_the_ramp(tmp_path, capsys) -> None:
    db = tmp_path / "r.db"
    argv = ["run", "--suite", "tiny", "--limit", "2", "--trials", "1", "--db", str(db), "--ramp-up", "0"]
    assert main([*argv, "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    assert main(["run", "--resume", run_id, "--db", str(db), "--ramp-up", "0.5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["resumed"] == 4  # 2 tasks × the 2 default models


@pytest.mark.anyio
async def test_a_ray_worker_opens_its_share_of_the_slots_over_the_ramp_too(monkeypatch) -> None:
    from mcp_resili.client.executor import WorkItem
    from mcp_resili.client.limits import LimitSpec
    from mcp_resili.client.plan import RunPlan
    from mcp_resili.integrations.ray import worker as ray_worker
    from mcp_resili.registry.loader import get_suite

    episodes = InFlight.counting(ray_worker, monkeypatch)
    config = RunConfig(suite="tiny", trials=1, limit=3, models=("scripted:oracle",), ramp_up=3600)
    plan = RunPlan.resolve(config, get_suite(config.suite))
    items = [WorkItem((p,)) for p in plan.episodes()]
    # No Ray here: the actor class is plain Python, and Ray only calls its methods.
    worker = ray_worker.EpisodeWorker(plan.config, "run-1", LimitSpec(), None, concurrency=3)
    try:
        results = await worker.play_batch(items)
    finally:
        await worker.close()
    assert episodes.peak == 1 and [r.outcome for r in results] == ["played"] * 3
