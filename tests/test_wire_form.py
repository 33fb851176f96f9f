"""A 2026-era ``tools/call`` is answered in wire form by our innermost middleware, skipping the SDK's
re-validation of the result: the answers must be exactly the SDK handler path's, byte for byte.

Each case plays the same runs twice, once as served and once with that middleware passing every
request on to the SDK's path, and compares every ``tools/call`` answer the client received (as JSON
text in key order, so order and types count too), over suites and fault plans that change results:
each benchmark's own (ResiliBench's failure model and discovery tools, ToolMaze's implicit and explicit
perturbations, ReliabilityBench's chaos), and protocol faults (whose layer wraps the middleware) on the
tiny suite.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp.server.context import CallNext

from mcp_resili.client.inprocess import InProcessDispatcher
from mcp_resili.client.plan import RunConfig
from mcp_resili.client.runner import execute
from mcp_resili.server.app import ResiliServer

CASES = [
    pytest.param("resilibench", ("resilibench",), ("scripted:oracle", "scripted:naive"), id="resilibench"),
    pytest.param(
        "toolmaze", ("toolmaze:P1", "toolmaze:P3", "toolmaze:P4"), ("scripted:oracle",), id="toolmaze"
    ),
    pytest.param(
        "reliabilitybench", ("lambda=0.3",), ("scripted:oracle", "scripted:naive"), id="reliabilitybench"
    ),
    # Protocol faults are the framework's own: on the tiny suite (tests/tiny_suite), over its own plan.
    pytest.param(
        "tiny", ("protocol:heavy+tiny",), ("scripted:oracle", "scripted:naive"), id="protocol-faults"
    ),
]


async def answers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, config: RunConfig, *, wire_form: bool
) -> list[str]:
    """Every ``tools/call`` answer of the run as JSON text (key order kept), sorted (episodes interleave)."""
    seen: list[str] = []
    original = InProcessDispatcher.send_raw_request

    async def recording(
        self: InProcessDispatcher, method: str, params: Any, opts: Any = None, *, well_formed: bool = False
    ) -> dict[str, Any]:
        # On the SDK's path every request is checked and answered by the SDK: none skips the checks.
        raw = await original(self, method, params, opts, well_formed=well_formed and wire_form)
        if method == "tools/call":
            # An elicitation's or sampling request's state token is random by design.
            seen.append(json.dumps({**raw, "requestState": "-"} if "requestState" in raw else raw))
        return raw

    async def sdk_path(self: ResiliServer, ctx: Any, call_next: CallNext) -> Any:
        return await call_next(ctx)

    with monkeypatch.context() as patch:
        patch.setattr(InProcessDispatcher, "send_raw_request", recording)
        if not wire_form:
            patch.setattr(ResiliServer, "answer_tools_call", sdk_path)
        result = await execute(config)
    assert result.rows
    return sorted(seen)


@pytest.mark.anyio
@pytest.mark.parametrize(("suite", "faults", "models"), CASES)
async def test_answers_in_wire_form_are_the_sdk_paths_answers(monkeypatch, tmp_path, suite, faults, models):
    def config(name: str) -> RunConfig:
        return RunConfig(
            suite=suite,
            models=models,
            faults=faults,
            trials=2,
            limit=6,
            time_scale=0.0,
            db=tmp_path / f"{name}.db",
        )

    fast = await answers(monkeypatch, tmp_path, config("fast"), wire_form=True)
    sdk = await answers(monkeypatch, tmp_path, config("sdk"), wire_form=False)
    assert len(fast) > 20
    assert fast == sdk
    # The cases reach results of every shape: structured, error, and the finish tool's.
    decoded = [json.loads(a) for a in fast]
    assert any("structuredContent" in a for a in decoded)
    assert any(a["isError"] for a in decoded)
    complete = [a for a in decoded if a["resultType"] == "complete"]
    assert complete and all("io.modelcontextprotocol/serverInfo" in a["_meta"] for a in complete)
