"""A scripted agent that meets our server the way a model does: through tool descriptions and results only.

It knows nothing of ``_meta``, headers or our constants. It finds the tool whose description says to call
it before any other, calls it, reads the handle from the result's text, finds the argument that carries
the handle (the property every other tool has and whose description names that first tool), and passes
the handle on every call. What to call is decided by a scripted `Model` (the oracle, the naive agent),
which reads the task's ground truth, as the runner's scripted agents do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp import Client

from mcp_resili.agents.model import (
    AssistantMessage,
    Model,
    ModelRequest,
    ToolDefinition,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)
from mcp_resili.tasks.model import Task


@dataclass
class HandlePlay:
    """What one episode played through handles looked like."""

    handle: str
    start_text: str
    calls: list[tuple[str, dict[str, Any], bool]] = field(default_factory=list)
    finished: str | None = None


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


def find_start_tool(tools: list[types.Tool]) -> types.Tool:
    """The tool whose description says to call it before any other tool."""
    found = [t for t in tools if "before any other tool" in (t.description or "")]
    assert len(found) == 1, [t.name for t in tools]
    return found[0]


def find_handle_argument(tools: list[types.Tool], start: types.Tool) -> str:
    """The argument every other tool requires whose description names the first tool."""
    candidates: set[str] | None = None
    for tool in tools:
        if tool.name == start.name:
            continue
        properties = tool.input_schema.get("properties") or {}
        named = {
            name
            for name, prop in properties.items()
            if start.name in str(prop.get("description", ""))
            and name in (tool.input_schema.get("required") or [])
        }
        candidates = named if candidates is None else candidates & named
    assert candidates is not None and len(candidates) == 1, candidates
    return candidates.pop()


def read_handle(text: str, argument: str) -> str:
    match = re.search(rf"^{re.escape(argument)}: (\S+)$", text, re.MULTILINE)
    assert match is not None, text
    return match.group(1)


async def play_with_handle(
    client: Client,
    model: Model,
    task: Task,
    *,
    start_arguments: dict[str, Any] | None = None,
    max_turns: int = 30,
) -> HandlePlay:
    """Play one episode of ``task`` with ``model`` through the handle the server mints."""
    tools = (await client.list_tools()).tools
    start = find_start_tool(tools)
    argument = find_handle_argument(tools, start)
    started = await client.call_tool(start.name, start_arguments or {})
    assert started.is_error is not True, text_of(started)
    start_text = text_of(started)
    play = HandlePlay(handle=read_handle(start_text, argument), start_text=start_text)
    # What the model is offered: the tools as they take its work (the handle is the agent's plumbing).
    definitions = tuple(
        ToolDefinition(
            tool.name,
            tool.description or "",
            {
                **tool.input_schema,
                "properties": {k: v for k, v in tool.input_schema["properties"].items() if k != argument},
            },
        )
        for tool in tools
        if tool.name != start.name
    )
    messages: list[Any] = [UserMessage(start_text)]
    for _ in range(max_turns):
        response = await model.generate(
            ModelRequest(messages=tuple(messages), tools=definitions, task=task, max_turns=max_turns)
        )
        if not response.tool_calls:
            break
        messages.append(AssistantMessage(response.text, response.tool_calls))
        results = []
        for call in response.tool_calls:
            result = await client.call_tool(call.name, {**call.arguments, argument: play.handle})
            play.calls.append((call.name, dict(call.arguments), bool(result.is_error)))
            results.append(
                ToolResult(
                    call.id,
                    call.name,
                    text_of(result),
                    bool(result.is_error),
                    result.structured_content if not result.is_error else None,
                )
            )
            if call.name == "finish" and not result.is_error:
                play.finished = str(call.arguments.get("status"))
        messages.append(ToolResultsMessage(tuple(results)))
        if play.finished is not None:
            break
    return play
