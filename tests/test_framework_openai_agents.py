"""openai-agents (MCPServerStdio / MCPServerStreamableHttp on the SDK's ClientSession, handshake era) with a
custom `Model` playing the oracle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from framework_policy import GroundTruthPolicy, Step, ToolView, is_error_text
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

require("agents")

from agents import Agent, FunctionTool, Runner, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

pytestmark = pytest.mark.anyio
set_tracing_disabled(True)  # offline: nothing is exported


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    items = output if isinstance(output, list) else [output]
    return "\n".join(str(item.get("text", "")) for item in items if isinstance(item, dict))


def history(items: str | list[Any]) -> list[Step]:
    """The calls and results so far, from the Responses-format input openai-agents builds."""
    if isinstance(items, str):
        return []
    calls: dict[str, dict[str, Any]] = {}
    steps = []
    for item in items:
        entry = item if isinstance(item, dict) else item.model_dump()
        if entry.get("type") == "function_call":
            calls[entry["call_id"]] = entry
        elif entry.get("type") == "function_call_output" and entry.get("call_id") in calls:
            call = calls[entry["call_id"]]
            text = output_text(entry.get("output"))
            steps.append(Step(call["name"], json.loads(call["arguments"] or "{}"), text, is_error_text(text)))
    return steps


class ScriptedModel(Model):
    """The oracle's policy behind openai-agents' model interface."""

    def __init__(self, policy: GroundTruthPolicy) -> None:
        self.policy = policy
        self.turn = 0

    async def get_response(
        self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        views = [
            ToolView(t.name, t.description, t.params_json_schema)
            for t in tools
            if isinstance(t, FunctionTool)
        ]
        action = await self.policy.next(views, history(input))
        self.turn += 1
        if action.name is None:
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            output: Any = ResponseOutputMessage(
                id=f"m{self.turn}", type="message", role="assistant", status="completed", content=[text]
            )
        else:
            output = ResponseFunctionToolCall(
                id=f"f{self.turn}",
                call_id=f"call_{self.turn}",
                type="function_call",
                name=action.name,
                arguments=json.dumps(action.arguments),
            )
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model answers whole turns only")


async def play(server: MCPServer, episode: Episode) -> None:
    task = get_suite(episode.suite).task(episode.task)
    policy = GroundTruthPolicy(task, start_arguments=episode.start_arguments)
    async with server:
        agent = Agent(name="oracle", model=ScriptedModel(policy), mcp_servers=[server])
        result = await Runner.run(agent, "Do the task.", max_turns=100)
    assert result.final_output == "done"


async def test_openai_agents_completes_a_resilibench_task_over_stdio_and_scores_as_the_runner(
    tmp_path: Path,
) -> None:
    argv = stdio_argv(RESILIBENCH, tmp_path / "traces")
    params = {"command": argv[0], "args": argv[1:], "env": child_env()}
    await play(MCPServerStdio(params=params, client_session_timeout_seconds=60), RESILIBENCH)  # type: ignore[arg-type]
    await assert_scores_as_the_runner(RESILIBENCH, tmp_path / "traces", tmp_path / "r.db")


async def test_openai_agents_over_http_plays_a_handshake_session_and_copes_with_protocol_faults(
    tmp_path: Path,
) -> None:
    args = RELIABILITYBENCH.serve_args(tmp_path / "traces", pinned=True)
    async with running_http_server(*args, workdir=tmp_path) as server:
        http = MCPServerStreamableHttp(
            params={"url": server.url, "timeout": 60}, client_session_timeout_seconds=60
        )
        await play(http, RELIABILITYBENCH)
    score = await assert_scores_as_the_runner(RELIABILITYBENCH, tmp_path / "traces", tmp_path / "r.db")
    assert score.components["coping_elicitation_request_met"] == 1
