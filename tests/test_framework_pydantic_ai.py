"""pydantic-ai (its MCP toolset on FastMCP's client, 2026-07-28) with a `FunctionModel` playing the oracle."""

from __future__ import annotations

import json
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

require("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.mcp import MCPToolset  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def history(messages: list[ModelMessage]) -> list[Step]:
    """The calls and results so far, as pydantic-ai keeps them."""
    calls: dict[str, ToolCallPart] = {}
    steps = []
    for message in messages:
        for part in message.parts:
            if isinstance(message, ModelResponse) and isinstance(part, ToolCallPart):
                calls[part.tool_call_id] = part
            elif isinstance(part, ToolReturnPart | RetryPromptPart) and part.tool_call_id in calls:
                call = calls[part.tool_call_id]
                content = part.content
                text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
                failed = isinstance(part, RetryPromptPart) or part.outcome == "failed"
                steps.append(Step(call.tool_name, call.args_as_dict(), text, failed))
    return steps


def scripted(policy: GroundTruthPolicy) -> FunctionModel:
    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tools = [ToolView(t.name, t.description or "", t.parameters_json_schema) for t in info.function_tools]
        action = await policy.next(tools, history(messages))
        if action.name is None:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(action.name, action.arguments)])

    return FunctionModel(respond)


async def play(toolset: MCPToolset[Any], episode: Episode) -> None:
    task = get_suite(episode.suite).task(episode.task)
    policy = GroundTruthPolicy(task, start_arguments=episode.start_arguments)
    agent = Agent(scripted(policy), toolsets=[toolset])
    result = await agent.run("Do the task.")
    assert result.output == "done"


async def test_pydantic_ai_completes_a_resilibench_task_over_stdio_and_scores_as_the_runner(
    tmp_path: Path,
) -> None:
    from fastmcp.client.transports import StdioTransport

    argv = stdio_argv(RESILIBENCH, tmp_path / "traces")
    transport = StdioTransport(command=argv[0], args=argv[1:], env=child_env())
    await play(MCPToolset(transport, tool_error_behavior="failed", init_timeout=60), RESILIBENCH)
    score = await assert_scores_as_the_runner(RESILIBENCH, tmp_path / "traces", tmp_path / "r.db")
    assert score.components["faults_injected"] > 0


async def test_pydantic_ai_over_http_starts_its_episode_by_handle_and_copes_with_protocol_faults(
    tmp_path: Path,
) -> None:
    args = RELIABILITYBENCH.serve_args(tmp_path / "traces", pinned=True)
    async with running_http_server(*args, workdir=tmp_path) as server:
        await play(MCPToolset(server.url, tool_error_behavior="failed", init_timeout=60), RELIABILITYBENCH)
    score = await assert_scores_as_the_runner(RELIABILITYBENCH, tmp_path / "traces", tmp_path / "r.db")
    assert score.components["coping_faults"] >= 1
    assert score.components["coping_elicitation_request_met"] == 1
    assert score.components["coping_relisted"] is True  # FastMCP's client lists the tools again each run step
