"""ToolMaze verdicts on trajectories played by hand, whose right answer follows from the judge's rules.

Each case is a review finding: the number the judge gave was wrong (see the module docstring of
`mcp_resili.suites.toolmaze.scoring` for the rules quoted below).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_resili.faults import parse_fault_spec
from mcp_resili.faults.base import BasePlan
from mcp_resili.faults.protocol import ProtocolFaults
from mcp_resili.registry.loader import get_suite
from mcp_resili.scoring.model import Score
from mcp_resili.server.app import ResiliServer
from mcp_resili.suites.toolmaze.model import PathStep, ToolMazeTask, resolve_path_arguments
from mcp_resili.suites.toolmaze.scoring import aggregate, score, taint
from mcp_resili.suites.toolmaze.tasks import toolmaze_tasks
from mcp_resili.trace import Trace, TraceHeader

SUITE = get_suite("toolmaze")


class Hand:
    """Calls a task's tools by hand, passing each step the data its producers returned."""

    def __init__(self, client: Client, task: ToolMazeTask) -> None:
        self.client, self.task = client, task
        self.previous: Any = None
        self.by_step: dict[int, Any] = {}
        self.sent: dict[int, dict[str, Any]] = {}

    async def step(self, number: int, step: PathStep, *, again: bool = False) -> None:
        """Call ``step`` (``again``: with the arguments it was called with before)."""
        arguments = (
            self.sent[number]
            if again
            else resolve_path_arguments(step, self.task.inputs, self.previous, self.by_step)
        )
        self.sent[number] = arguments
        result = await self.client.call_tool(step.tool, arguments)
        if not result.is_error:
            self.previous = self.by_step[number] = result.structured_content

    async def call(self, tool: str, arguments: dict[str, Any]) -> None:
        await self.client.call_tool(tool, arguments)


Script = Callable[[Hand], Awaitable[None]]


def judged(task: ToolMazeTask, plan: BasePlan, script: Script) -> tuple[Score, Trace]:
    async def play() -> Trace:
        server = ResiliServer(SUITE, plan, seed=0, task=task.id, episode="hand")
        async with Client(server.mcp) as client:
            await script(Hand(client, task))
            events = server.take_events("hand")
        header = TraceHeader(
            suite="toolmaze",
            task=task.id,
            episode="hand",
            seed=0,
            fault_plan=plan.to_dict(),
            fault_key=task.id,
        )
        return Trace(header=header, events=tuple(events))

    trace = anyio.run(play)
    return score(task, trace), trace


def c1_task(p3_kind: str | None = None) -> ToolMazeTask:
    return next(
        t for t in toolmaze_tasks() if t.level == "C1" and (p3_kind is None or t.perturbations.p3 == p3_kind)
    )


def shortest(task: ToolMazeTask) -> list[tuple[int, PathStep]]:
    return task.path_steps()[task.shortest_path_index()]


def test_a_clean_redo_after_using_a_corrupted_record_succeeds_and_only_the_misuse_is_tainted() -> None:
    """P3: the agent passes the corrupted record on once, then retries the victim (clean now) and
    redoes every later step on clean data. "I_succ: some valid path was completed by clean calls on
    the right data": 1. I_recov: the corruption was propagated once: 0. The redo carries the task's
    subject and figures the corruption never changed; they are no evidence of corrupted data.
    """
    task = c1_task("fact_contradiction")
    path = shortest(task)
    victim = task.perturbations.slots[0].tools[0]
    at = [s.tool for _, s in path].index(victim)

    async def propagate_then_redo(hand: Hand) -> None:
        for number, step in path[: at + 2]:  # up to the victim, then one step on its corrupted record
            await hand.step(number, step)
        hand.previous = hand.by_step.get(path[at - 1][0]) if at else None
        await hand.step(*path[at], again=True)  # the transient corruption is spent: clean now
        for number, step in path[at + 1 :]:
            await hand.step(number, step)
        await hand.call("finish", {"status": "completed", "summary": "done"})

    verdict, trace = judged(task, parse_fault_spec("toolmaze:P3", SUITE.spec_scope), propagate_then_redo)
    consumers, _ = taint(trace.tool_calls, task.inputs)
    assert [trace.tool_calls[i].tool for i in sorted(consumers)] == [path[at + 1][1].tool]
    assert (verdict.components["i_succ"], verdict.components["i_recov"]) == (True, False)
    assert any("propagated into" in r for r in verdict.reasons)


def test_protocol_faults_on_top_of_p1_judge_recovery_by_the_p1_rules() -> None:
    """``protocol:light+toolmaze:P1`` with no protocol fault able to fire: the same retry trajectory
    must get the same verdict as under ``toolmaze:P1`` (it was judged by the permanent rules: c* = 0).
    """
    task = c1_task()
    victim = task.perturbations.slots[0].tools[0]

    async def retry_the_victim(hand: Hand) -> None:
        for number, step in shortest(task):
            await hand.step(number, step)
            if step.tool == victim:
                await hand.step(number, step, again=True)
        await hand.call("finish", {"status": "completed", "summary": "done"})

    p1 = parse_fault_spec("toolmaze:P1", SUITE.spec_scope)
    light = parse_fault_spec("protocol:light+toolmaze:P1", SUITE.spec_scope)
    assert isinstance(light, ProtocolFaults)
    silent = light.model_copy(
        update={"rules": tuple(r.model_copy(update={"probability": 0.0}) for r in light.rules)}
    )
    alone, _ = judged(task, p1, retry_the_victim)
    layered, _ = judged(task, silent, retry_the_victim)
    assert layered.components["mode"] == "P1+protocol:light"
    keys = ("i_succ", "i_pert", "i_recov", "c", "c_star", "c_rec")
    assert {k: layered.components[k] for k in keys} == {k: alone.components[k] for k in keys}
    assert alone.components["i_recov"] is True and alone.components["c_rec"] == 0.0


def test_a_call_the_server_refused_is_no_retry() -> None:
    """P1: after the transient fault, a call to the victim with ``{}`` is refused (INVALID_INPUT, the
    tool never ran), then the agent aborts: it never retried, so I_recov is 0. A real retry after
    the refused call still counts.
    """
    task = c1_task()
    victim = task.perturbations.slots[0].tools[0]

    def script(really_retry: bool) -> Script:
        async def play(hand: Hand) -> None:
            for number, step in shortest(task):
                await hand.step(number, step)
                if step.tool == victim:
                    await hand.call(victim, {})
                    if not really_retry:
                        break
                    await hand.step(number, step, again=True)
            status = "completed" if really_retry else "aborted"
            await hand.call(
                "finish", {"status": status, "summary": "Task aborted" if not really_retry else "done"}
            )

        return play

    refused_only, trace = judged(task, parse_fault_spec("toolmaze:P1", SUITE.spec_scope), script(False))
    assert [c.error_code for c in trace.tool_calls if c.tool == victim][1] == "INVALID_INPUT"
    assert refused_only.components["i_recov"] is False
    assert any("no retry" in r for r in refused_only.reasons)
    retried, _ = judged(task, parse_fault_spec("toolmaze:P1", SUITE.spec_scope), script(True))
    assert retried.components["i_recov"] is True


def test_a_perturbation_mode_whose_runs_never_met_their_fault_shows_no_recovery_in_the_composite() -> None:
    """An agent that finishes at once in every mode meets no fault: PRR is undefined everywhere.

    By hand: NP TSR 0, RC 0, composite (0 + 1 − 0)/2 = 1/2. P1 the same but its PRR term counts as 0
    (it used to take NP's formula, 1/2, so doing nothing beat trying and failing, which scores 0):
    composite (0 + 0 + 1 − 0)/3 = 1/3. Over the modes: TSR 0, RC 0, PRR term mean(0) = 0 → 1/3.
    """

    def idle(mode: str) -> Score:
        components = {"mode": mode, "level": "C1", "i_succ": False, "i_pert": False, "i_recov": False}
        return Score(
            suite="toolmaze", task="t", label="failure", value=0.0, components={**components, "c_rec": 0.0}
        )

    rows = {(m.mode, m.level): m for m in aggregate([idle("NP"), idle("P1")])}
    assert rows["NP", "all"].composite == pytest.approx(1 / 2)
    assert rows["P1", "all"].prr is None and rows["P1", "all"].composite == pytest.approx(1 / 3)
    assert rows["all", "all"].prr is None and rows["all", "all"].composite == pytest.approx(1 / 3)


def test_the_server_tells_a_connecting_agent_nothing_about_faults_or_alternatives() -> None:
    """The no-hint condition must hold for an outside agent too, which reads the server's instructions."""

    async def instructions(mode: str) -> str:
        server = ResiliServer(SUITE, parse_fault_spec(mode, SUITE.spec_scope), seed=0)
        async with Client(server.mcp, mode="legacy") as client:
            return client.instructions or ""

    for mode in ("none", "toolmaze:P2"):
        text = anyio.run(instructions, mode).lower()
        assert "toolmaze" in text
        assert not any(word in text for word in ("fail", "fault", "alternative", "error"))


def test_a_step_done_after_finish_does_not_complete_the_task() -> None:
    """``finish`` completed with the last step missing, then that step: the agent declared the task
    over, so the path is not completed (I_succ 0) and the reasons say a call after finish did not count.
    """
    task = c1_task()
    path = shortest(task)

    async def finish_early(hand: Hand) -> None:
        for number, step in path[:-1]:
            await hand.step(number, step)
        await hand.call("finish", {"status": "completed", "summary": "all done"})
        await hand.step(*path[-1])

    early, trace = judged(task, parse_fault_spec("none", SUITE.spec_scope), finish_early)
    assert trace.tool_calls[-1].tool == path[-1][1].tool and not trace.tool_calls[-1].is_error  # it ran
    assert early.components["i_succ"] is False and early.components["tool_calls"] == len(path) - 1
    assert "1 call(s) after finish did not count" in early.reasons


def test_over_server_a_trajectory_that_met_no_fault_keeps_the_mode_our_server_played(tmp_path) -> None:
    """Against our server (`run --server`) the runner's header said only "external": a trajectory that
    met no fault (all of NP, a P2 agent that stops before its victim) was mode "other" and fell out
    of its mode's TSR and RC. The plan our server played now rides in the header.
    """
    import shlex

    from servers import serve_command

    from mcp_resili.client.runner import RunConfig, execute
    from mcp_resili.trace import trace_lines

    async def over_server(faults: str) -> list[str]:
        command = shlex.join(serve_command("--suite", "toolmaze", "--faults", faults))
        result = await execute(
            RunConfig(
                db=tmp_path / f"{faults}.db",
                suite="toolmaze",
                models=("scripted:oracle",),
                trials=1,
                limit=2,
                server=command,
            )
        )
        for row in result.rows:
            assert Trace.from_lines(trace_lines(row.trace)).header.fault_plan["kind"] == "external"
        return [str((row.score or {})["components"]["mode"]) for row in result.rows]

    assert anyio.run(over_server, "none") == ["NP", "NP"]  # was ["other", "other"]
