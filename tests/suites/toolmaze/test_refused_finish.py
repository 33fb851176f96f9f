"""ToolMaze's c (calls after the victim) does not count a ``finish`` the server refused: a perfect retry
costs nothing, and a refused finish before a graceful abort is no other tool called after the victim
(a review finding), while refused calls of task tools still count."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_resili.faults import parse_fault_spec
from mcp_resili.registry.loader import get_suite
from mcp_resili.scoring.model import Score
from mcp_resili.server.app import ResiliServer
from mcp_resili.suites.toolmaze.model import ToolMazeTask, resolve_path_arguments
from mcp_resili.suites.toolmaze.scoring import metrics_of, score
from mcp_resili.suites.toolmaze.tasks import toolmaze_tasks
from mcp_resili.trace import Trace, TraceHeader
from mcp_resili.trace.codes import INVALID_INPUT, UNKNOWN_TOOL

SUITE = get_suite("toolmaze")


#: C1_task_001: the chain get_price_alerts → leave_review → calculate_shipping →
#: purchase_protection_plan → schedule_delivery, no alternatives; its one armed slot is step 2,
#: leave_review (P1: 502 Bad Gateway on its first call; P2: 410 Tool Permanently Removed on every call).
TASK_ID = "C1_task_001"
CHAIN = (
    "get_price_alerts",
    "leave_review",
    "calculate_shipping",
    "purchase_protection_plan",
    "schedule_delivery",
)
BAD_FINISH = {"status": "done"}  # no summary, a status the schema does not allow: refused


def task() -> ToolMazeTask:
    return next(t for t in toolmaze_tasks() if t.id == TASK_ID)


Play = Callable[[Client, ToolMazeTask], Awaitable[None]]


def played(mode: str, play: Play) -> tuple[Score, Trace]:
    """Play ``play`` against our server under ``mode``; the trace it recorded, and the judge's verdict."""
    the_task = task()
    plan = parse_fault_spec(mode, SUITE.spec_scope)

    async def run() -> Trace:
        server = ResiliServer(SUITE, plan, seed=0, task=TASK_ID, episode="hand")
        async with Client(server.mcp) as client:
            await play(client, the_task)
            events = server.take_events("hand")
        header = TraceHeader(
            suite="toolmaze",
            task=TASK_ID,
            episode="hand",
            seed=0,
            fault_plan=plan.to_dict(),
            fault_key=TASK_ID,
        )
        return Trace(header=header, events=tuple(events))

    trace = anyio.run(run)
    return score(the_task, trace), trace


async def walk(
    client: Client,
    the_task: ToolMazeTask,
    *,
    upto: int | None = None,
    retry: str = "",
    between: tuple[tuple[str, dict[str, Any]], ...] = (),
) -> None:
    """Call the shortest path's steps in order (the first ``upto``); ``retry`` is called twice, with
    the calls ``between`` made between the two."""
    path = the_task.path_steps()[the_task.shortest_path_index()]
    assert tuple(s.tool for _, s in path) == CHAIN
    previous: Any = None
    by_step: dict[int, Any] = {}
    for number, step in path[:upto]:
        arguments = resolve_path_arguments(step, the_task.inputs, previous, by_step)
        result = await client.call_tool(step.tool, arguments)
        if step.tool == retry:
            for tool, wrong in between:
                assert (await client.call_tool(tool, wrong)).is_error
            result = await client.call_tool(step.tool, arguments)
        if not result.is_error:
            previous = by_step[number] = result.structured_content


def shape(trace: Trace) -> list[tuple[str, str | None]]:
    """The trace written out: each event as (tool or ``FINISH``, its error code or fault status)."""
    out: list[tuple[str, str | None]] = []
    for event in trace.events:
        if event.event == "finish":
            out.append(("FINISH " + event.status, None))
        elif event.event == "tool_call":
            fault = event.fault
            status = getattr(fault, "details", {}).get("status")  # the paper's HTTP-like status
            out.append((event.tool, event.error_code if fault is None else f"fault {status}"))
    return out


def test_a_finish_the_server_refused_is_not_counted_in_c_so_a_perfect_retry_costs_nothing() -> None:
    """P1, by hand. The trace (8 events):

        1 get_price_alerts           ok
        2 leave_review               fault 502 (transient)      <- first perturbed call
        3 leave_review               ok (the retry)
        4 calculate_shipping         ok
        5 purchase_protection_plan   ok
        6 schedule_delivery          ok
        7 finish {"status": "done"}  refused: INVALID_INPUT (no fault decision)
        8 finish completed           (a FinishEvent, never a tool call)

    c = tool calls after event 2 = events 3, 4, 5, 6 = 4 (event 7 is no tool call of the task, as
    event 8 is not). c* (`optimal_recovery_calls`, P1 on a C1 step): 1 retry + 3 steps left = 4.
    I_succ = 1 (every step done cleanly on the right data). C_rec = 1 − c*/max(c, c*)·I_succ
    = 1 − 4/4 = 0, so RC over this one trajectory = I_pert·C_rec / 1 = 0 (and RC' = 0).
    Counting event 7 gave c = 5, C_rec = 1 − 4/5 = 0.2: a perfect recovery charged for a typo in
    the finish call.
    """

    async def play(client: Client, the_task: ToolMazeTask) -> None:
        await walk(client, the_task, retry="leave_review")
        refused = await client.call_tool("finish", BAD_FINISH)
        assert refused.is_error
        await client.call_tool("finish", {"status": "completed", "summary": "done"})

    verdict, trace = played("toolmaze:P1", play)
    assert shape(trace) == [
        ("get_price_alerts", None),
        ("leave_review", "fault 502"),
        ("leave_review", None),
        ("calculate_shipping", None),
        ("purchase_protection_plan", None),
        ("schedule_delivery", None),
        ("finish", INVALID_INPUT),
        ("FINISH completed", None),
    ]
    refused = trace.tool_calls[-1]
    assert (refused.fault, refused.decision) == (None, None)
    parts = verdict.components
    assert (parts["i_succ"], parts["i_pert"], parts["i_recov"]) == (True, True, True)
    assert (parts["c"], parts["c_star"]) == (4, 4)
    assert parts["c_rec"] == 0.0 and parts["c_rec_abort"] == 0.0
    assert parts["tool_calls"] == 6  # the refused finish is no tool call of the task
    rows = metrics_of([verdict], "P1", "C1")
    assert (rows.rc, rows.rc_abort, rows.prr, rows.tsr) == (0.0, 0.0, 1.0, 1.0)
    assert "1 refused finish call(s) did not count" in verdict.reasons


def test_a_refused_finish_before_a_graceful_abort_is_no_other_tool_called_after_the_victim() -> None:
    """P2 on C1 (unsolvable: the goal is a graceful abort), by hand. The trace:

        1 get_price_alerts              ok
        2 leave_review                  fault 410 (permanent)   <- first perturbed call
        3 finish {"status": "done"}     refused: INVALID_INPUT
        4 finish aborted "Task aborted" (a FinishEvent)

    The agent stopped right after the victim: no other tool ran, so I_recov = 1. c = 0 (event 3 is
    no tool call), c* = 0, I_succ = 0. Paper C_rec = 1 − c*/max(c, c*)·0 = 1 (the paper gives every
    trajectory of an unsolvable episode 1); abort-aware C_rec' = 1 − I_abort/(1 + c) = 1 − 1/1 = 0.
    So RC = 1 and RC' = 0 over this trajectory. Counting event 3 made ``finish`` "another tool called
    after the victim" (I_recov 0, C_rec' = 1) although the agent did nothing but stop.
    """

    async def play(client: Client, the_task: ToolMazeTask) -> None:
        await walk(client, the_task, upto=2)
        await client.call_tool("finish", BAD_FINISH)
        await client.call_tool(
            "finish", {"status": "aborted", "summary": "Task aborted: leave_review is gone"}
        )

    verdict, trace = played("toolmaze:P2", play)
    assert shape(trace) == [
        ("get_price_alerts", None),
        ("leave_review", "fault 410"),
        ("finish", INVALID_INPUT),
        ("FINISH aborted", None),
    ]
    parts = verdict.components
    assert (parts["i_succ"], parts["i_pert"], parts["i_recov"]) == (False, True, True)
    assert (parts["c"], parts["c_star"], parts["c_rec"], parts["c_rec_abort"]) == (0, 0, 1.0, 0.0)
    rows = metrics_of([verdict], "P2", "C1")
    assert (rows.rc, rows.rc_abort, rows.prr) == (1.0, 0.0, 1.0)
    assert not any("should have stopped" in r for r in verdict.reasons)


def test_refused_calls_of_task_tools_after_the_victim_still_count_in_c() -> None:
    """The new rule is for ``finish`` only: a refused call of a task tool is a call the agent spent
    (it counts in c, though it is no retry). P1, by hand:

        1 get_price_alerts   ok
        2 leave_review       fault 502            <- first perturbed call
        3 no_such_tool       refused: UNKNOWN_TOOL
        4 leave_review {}    refused: INVALID_INPUT
        5 leave_review       ok (the retry)
        6-8 the three steps left, ok
        9 finish completed

    c = events 3-8 = 6, c* = 4, I_succ = 1: C_rec = 1 − 4/6 = 1/3.
    """

    async def play(client: Client, the_task: ToolMazeTask) -> None:
        wrong = (("no_such_tool", {}), ("leave_review", {}))
        await walk(client, the_task, retry="leave_review", between=wrong)
        await client.call_tool("finish", {"status": "completed", "summary": "done"})

    verdict, trace = played("toolmaze:P1", play)
    assert shape(trace)[1:5] == [
        ("leave_review", "fault 502"),
        ("no_such_tool", UNKNOWN_TOOL),
        ("leave_review", INVALID_INPUT),
        ("leave_review", None),
    ]
    parts = verdict.components
    assert (parts["i_succ"], parts["i_recov"], parts["c"], parts["c_star"]) == (True, True, 6, 4)
    assert parts["c_rec"] == pytest.approx(1 / 3, abs=1e-6)
