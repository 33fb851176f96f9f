"""FastMCP's own client (4.x, 2026-07-28), driven directly by the oracle's policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from framework_policy import GroundTruthPolicy, Step, ToolView
from frameworks import (
    RELIABILITYBENCH,
    RESILIBENCH,
    Episode,
    assert_scores_as_the_runner,
    require,
    stdio_argv,
)
from servers import child_env, running_http_server

from mcp_resili.registry.loader import get_suite

require("fastmcp")

from fastmcp import Client  # noqa: E402
from fastmcp.client.transports import StdioTransport  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def play(client: Client[Any], episode: Episode) -> list[Step]:
    task = get_suite(episode.suite).task(episode.task)
    policy = GroundTruthPolicy(task, start_arguments=episode.start_arguments)
    steps: list[Step] = []
    async with client:
        tools = [ToolView(t.name, t.description or "", t.input_schema) for t in await client.list_tools()]
        while (action := await policy.next(tools, steps)).name is not None:
            result = await client.call_tool(action.name, action.arguments, raise_on_error=False)
            text = "\n".join(getattr(block, "text", "") for block in result.content)
            steps.append(Step(action.name, action.arguments, text, result.is_error))
    return steps


async def test_fastmcp_completes_a_resilibench_task_over_stdio_and_scores_as_the_runner(
    tmp_path: Path,
) -> None:
    argv = stdio_argv(RESILIBENCH, tmp_path / "traces")
    steps = await play(
        Client(StdioTransport(command=argv[0], args=argv[1:], env=child_env()), timeout=60), RESILIBENCH
    )
    assert steps[-1].name == "finish" and not steps[-1].is_error
    await assert_scores_as_the_runner(RESILIBENCH, tmp_path / "traces", tmp_path / "r.db")


async def test_fastmcp_over_http_plays_by_handle_and_copes_with_protocol_faults(tmp_path: Path) -> None:
    args = RELIABILITYBENCH.serve_args(tmp_path / "traces", pinned=True)
    async with running_http_server(*args, workdir=tmp_path) as server:
        steps = await play(Client(server.url, timeout=60), RELIABILITYBENCH)
    assert steps[0].name == "start_episode"  # 2026-07-28 over HTTP: handle mode
    score = await assert_scores_as_the_runner(RELIABILITYBENCH, tmp_path / "traces", tmp_path / "r.db")
    assert score.components["coping_elicitation_request_met"] == 1
