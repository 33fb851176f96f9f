"""``run --llm-faults`` with the built-in loop: its model calls through the fault gateway, the ledger joined.

Scripted agents are played by the model server through the real ``openai`` SDK; a hosted model's
calls go to its upstream (here our model server on a loopback port, standing in for a real API).
The runner's loop is then the harness: an injected fault it gives up on is its failure (scored), a
failure nobody injected an infrastructure error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.model_server import serve
from harness_support import FlakyUpstream, decisions, end_of, first_tasks, trace_of

from mcp_resili.client.plan import RunConfig
from mcp_resili.client.runner import RunResult, execute, local_executor
from mcp_resili.harness import session_factory
from mcp_resili.modelserver import ModelServer
from mcp_resili.registry.loader import get_suite
from mcp_resili.trace import ModelFaultEvent, ModelTurnEvent

pytestmark = pytest.mark.anyio


async def no_wait(seconds: float) -> None:
    """The retry policy's sleeper: tests never wait on a backoff."""


async def run_builtin(tmp_path: Path, **options: Any) -> RunResult:
    settings: dict[str, Any] = {
        "suite": "resilibench",
        "models": ("scripted:oracle",),
        "faults": ("resilibench",),
        "trials": 1,
        "tasks": first_tasks(1),
        "time_scale": 0.0,
        "db": tmp_path / f"{len(list(tmp_path.iterdir()))}.db",
    }
    settings.update(options)
    executor = local_executor(model_options={"sleeper": no_wait}, session_factory=session_factory)
    return await execute(RunConfig(**settings), executor=executor)


def rules(tmp_path: Path, text: str) -> str:
    path = tmp_path / "llm.toml"
    path.write_text(text)
    return str(path)


async def test_a_scripted_agent_behind_the_gateway_meets_each_fault_before_the_turn_it_made(tmp_path):
    spec = rules(
        tmp_path,
        '[[rules]]\ncalls = [1]\nfault = { type = "rate_limit", retry_after = 0.0 }\n'
        '[[rules]]\ncalls = [3]\nfault = { type = "tool_arguments", mode = "truncated" }\n',
    )
    (row,) = (await run_builtin(tmp_path, llm_faults=spec)).rows
    trace = trace_of(row)
    assert trace.header.model_fault_plan is not None and len(trace.header.model_fault_plan["rules"]) == 2
    kinds = [e.event for e in trace.events]
    # Call 0 was refused (429), call 1 answered: both before the first turn, which call 1 made.
    assert kinds[:3] == ["model_fault", "model_fault", "model_turn"]
    calls = [e for e in trace.events if isinstance(e, ModelFaultEvent)]
    turns = [e for e in trace.events if isinstance(e, ModelTurnEvent)]
    assert len(calls) == len(turns) + 1  # one retry, every other call a turn
    assert decisions(row)[:3] == [(0, "rate_limit", 429), (1, None, 200), (2, "tool_arguments", 200)]
    components = row.score["components"]
    assert components["llm_faults"] == 2 and components["llm_survived"] == 2
    assert (row.termination, row.label) == ("completed", "full")
    assert row.input_tokens > 0  # the model server's usage, read by the loop as from any API


async def test_an_injected_fault_the_loop_gives_up_on_is_its_scored_failure(tmp_path):
    spec = rules(tmp_path, '[[rules]]\ncalls = [2]\nfault = { type = "content_filter" }\n')
    (row,) = (await run_builtin(tmp_path, llm_faults=spec)).rows
    assert row.termination == "harness_failure" and row.label is not None
    assert "content_filter" in end_of(row).detail and "gave up" in end_of(row).detail
    assert row.score["components"]["llm_failed_after"] == "content_filter"


async def test_a_failure_nobody_injected_stays_an_infrastructure_error(tmp_path):
    suite = get_suite("resilibench")
    upstream = FlakyUpstream(ModelServer({suite.name: suite}).app, {n: 503 for n in range(2, 20)})
    async with serve(upstream) as url:
        (row,) = (
            await run_builtin(
                tmp_path, models=("openai:scripted:oracle",), base_url=f"{url}/v1", llm_faults="none"
            )
        ).rows
    assert row.termination == "infrastructure_error" and row.label is None
    assert upstream.calls >= 3 and all(status == 503 for _, _, status in decisions(row)[1:])


async def test_the_same_seed_replays_the_same_ledger_and_scores(tmp_path):
    first = await run_builtin(tmp_path, llm_faults="llm:heavy", tasks=first_tasks(3), seed=11)
    again = await run_builtin(tmp_path, llm_faults="llm:heavy", tasks=first_tasks(3), seed=11)

    def seen(result: RunResult) -> list[Any]:
        return sorted((r.task_id, r.label, r.value, r.termination, decisions(r)) for r in result.rows)

    assert seen(first) == seen(again)
    assert sum(r.score["components"]["llm_faults"] for r in first.rows) >= 1
