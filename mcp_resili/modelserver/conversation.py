"""A Chat Completions or Messages request read back into our conversation (`ModelRequest`).

The reverse of `mcp_resili.client.providers`: messages, tool calls and tool results come back as
`UserMessage`, `AssistantMessage` and `ToolResultsMessage`. A tool result is an error when the API
flags it (Anthropic's ``is_error``) or when its text is an error line as our MCP server writes it
(``Error CODE: ...``; Chat Completions has no flag), or an object holding only such a line under
``error`` (as pydantic-ai wraps a failed call); a result that is a JSON object is also its
structured content, which scripted agents read. Requests the real APIs refuse are refused the same
way (`RequestError`, answered 400): a tool result that answers no call, a call left unanswered, a
function name the API does not allow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_resili.agents.model import (
    AssistantMessage,
    Message,
    Reflection,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)
from mcp_resili.client.providers.names import ToolNameMap
from mcp_resili.client.providers.openai import INVALID_ARGUMENTS_KEY, parse_arguments
from mcp_resili.errors import error_path, shown_value
from mcp_resili.modelapi.formats import Api

#: The function names both APIs accept (docs/llm.md; `mcp_resili.client.providers.names`).
FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: The text of a failed tool call as our MCP server (and our runner) writes it.
ERROR_TEXT = re.compile(r"^Error [A-Za-z0-9_.-]+:")
#: The reflection request our runner sends after a failed trial (`client.agent.reflection_prompt`).
REFLECTION_REQUEST = "Your attempt is over and it failed"
#: How our runner appends Reflexion's memory to the first prompt (`client.agent.with_memory`).
_MEMORY_HEAD = (
    "You have attempted this same task before and failed. Your reflections on those attempts, oldest first:\n"
)
_MEMORY_TAIL = "\nUse them to succeed this time."
_MEMORY_ITEM = re.compile(r"^\d+\. \(after attempt (\d+)\) ", re.MULTILINE)


class RequestError(ValueError):
    """A request the API refuses (HTTP 400); ``param`` names the field when there is one."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Conversation:
    """What a request says, in our terms (tool names still as the API carries them)."""

    api: Api
    model: str
    stream: bool
    include_usage: bool
    #: The output budget the request sets (None: none).
    max_output: int | None
    system: str
    tools: tuple[ToolDefinition, ...]
    messages: tuple[Message, ...]
    #: The texts the task is recognised by: the system text and every user text.
    texts: tuple[str, ...]


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class _OpenAIFunction(_Lenient):
    name: str
    arguments: str | None = None


class _OpenAIToolCall(_Lenient):
    id: str
    type: str = "function"
    function: _OpenAIFunction


class _OpenAIMessage(_Lenient):
    role: str
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[_OpenAIToolCall] | None = None
    tool_call_id: str | None = None


class _OpenAIFunctionDef(_Lenient):
    name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)


class _OpenAITool(_Lenient):
    type: str = "function"
    function: _OpenAIFunctionDef


class _StreamOptions(_Lenient):
    include_usage: bool = False


class _OpenAIRequest(_Lenient):
    model: str
    messages: list[_OpenAIMessage] = Field(min_length=1)
    tools: list[_OpenAITool] | None = None
    stream: bool | None = False
    stream_options: _StreamOptions | None = None
    n: int | None = 1
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)


class _AnthropicMessage(_Lenient):
    role: str
    content: str | list[dict[str, Any]]


class _AnthropicRequest(_Lenient):
    model: str
    max_tokens: int = Field(ge=1)
    messages: list[_AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    stream: bool | None = False


def _validated(model: type[_Lenient], body: object) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = error_path(tuple(first["loc"]))
        text = first["msg"].replace("Input should be", "expected")
        if first["type"] not in ("missing", "extra_forbidden"):
            text += f" (got {shown_value(first['input'])})"
        raise RequestError(f"{where}: {text}" if where else text, where or None) from None


def _check_name(name: str, where: str) -> None:
    if not FUNCTION_NAME.match(name):
        raise RequestError(
            f"Invalid '{where}': string does not match pattern. Expected a string that matches the "
            "pattern '^[a-zA-Z0-9_-]{1,64}$'.",
            where,
        )


def _text_of(content: str | list[dict[str, Any]] | None) -> str:
    """The text of message content (text parts joined; images and the like are not read)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(
        str(part.get("text", "")) for part in content if part.get("type") in ("text", "input_text")
    )


def _result(call_id: str, name: str, text: str, flagged: bool) -> ToolResult:
    is_error = flagged or bool(ERROR_TEXT.match(text))
    structured: dict[str, Any] | None = None
    if not is_error and text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        structured = value if isinstance(value, dict) else None
        # A harness that wraps a failed call as an object holding only its error line (pydantic-ai
        # sends {"error": "Error CODE: ..."}) reports an error, as a model reading it would take it.
        wrapped = structured.get("error") if structured is not None and len(structured) == 1 else None
        if isinstance(wrapped, str) and ERROR_TEXT.match(wrapped):
            is_error, structured = True, None
    return ToolResult(call_id, name, text, is_error, structured)


def read_openai(body: object) -> Conversation:
    """A Chat Completions request (`RequestError` for one the API refuses)."""
    request: _OpenAIRequest = _validated(_OpenAIRequest, body)
    if request.n not in (None, 1):
        raise RequestError("n: a scripted model answers one choice only (n must be 1)", "n")
    tools = []
    for position, tool in enumerate(request.tools or ()):
        _check_name(tool.function.name, f"tools[{position}].function.name")
        tools.append(
            ToolDefinition(tool.function.name, tool.function.description or "", tool.function.parameters)
        )
    system: list[str] = []
    texts: list[str] = []
    messages: list[Message] = []
    pending: dict[str, str] = {}  # call id -> function name, of the last assistant turn
    results: list[ToolResult] = []
    for position, message in enumerate(request.messages):
        if message.role != "tool" and results:
            messages.append(ToolResultsMessage(tuple(results)))
            results = []
        if message.role != "tool" and pending:
            raise RequestError(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to "
                f"each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                f"{', '.join(pending)}",
                f"messages.[{position}].role",
            )
        if message.role in ("system", "developer"):
            system.append(_text_of(message.content))
        elif message.role == "user":
            text = _text_of(message.content)
            texts.append(text)
            messages.append(UserMessage(text))
        elif message.role == "assistant":
            calls = []
            for call in message.tool_calls or ():
                _check_name(call.function.name, f"messages[{position}].tool_calls.function.name")
                calls.append(ToolCall(call.id, call.function.name, parse_arguments(call.function.arguments)))
            pending = {c.id: c.name for c in calls}
            messages.append(AssistantMessage(_text_of(message.content), tuple(calls)))
        elif message.role == "tool":
            call_id = message.tool_call_id or ""
            if call_id not in pending:
                raise RequestError(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceding "
                    f"message with 'tool_calls' (no call {call_id!r} awaits a result).",
                    f"messages.[{position}].role",
                )
            results.append(_result(call_id, pending.pop(call_id), _text_of(message.content), False))
        else:
            raise RequestError(
                f"Invalid value: '{message.role}'. Supported values are: 'system', 'developer', 'user', "
                "'assistant' and 'tool'.",
                f"messages[{position}].role",
            )
    if results:
        messages.append(ToolResultsMessage(tuple(results)))
    limit = request.max_completion_tokens or request.max_tokens
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    return Conversation(
        "openai",
        request.model,
        bool(request.stream),
        include_usage,
        limit,
        "\n\n".join(system),
        tuple(tools),
        tuple(messages),
        ("\n\n".join(system), *texts),
    )


def read_anthropic(body: object) -> Conversation:
    """A Messages API request (`RequestError` for one the API refuses)."""
    request: _AnthropicRequest = _validated(_AnthropicRequest, body)
    tools = []
    for position, tool in enumerate(request.tools or ()):
        name = tool.get("name")
        if "input_schema" not in tool and "type" in tool:
            continue  # a server tool (web search...): nothing a scripted agent calls
        if not isinstance(name, str):
            raise RequestError(f"tools.{position}.name: Field required", f"tools.{position}.name")
        if not isinstance(tool.get("input_schema"), dict):
            raise RequestError(
                f"tools.{position}.input_schema: Field required", f"tools.{position}.input_schema"
            )
        _check_name(name, f"tools.{position}.name")
        tools.append(ToolDefinition(name, str(tool.get("description") or ""), dict(tool["input_schema"])))
    system = request.system if isinstance(request.system, str) else _text_of(request.system)
    texts: list[str] = []
    messages: list[Message] = []
    pending: dict[str, str] = {}
    for position, message in enumerate(request.messages):
        blocks = (
            [{"type": "text", "text": message.content}]
            if isinstance(message.content, str)
            else message.content
        )
        if message.role == "assistant":
            if pending:
                raise _unanswered(position, pending)
            messages.append(_assistant_turn(blocks, position, pending))
        elif message.role == "user":
            answered = [b for b in blocks if b.get("type") == "tool_result"]
            results = [_anthropic_result(b, position, pending) for b in answered]
            if pending:
                raise _unanswered(position, pending)
            if results:
                messages.append(ToolResultsMessage(tuple(results)))
            text = _text_of([b for b in blocks if b.get("type") == "text"])
            if text or not results:
                texts.append(text)
                messages.append(UserMessage(text))
        else:
            raise RequestError(
                f"messages.{position}.role: Input should be 'user' or 'assistant'",
                f"messages.{position}.role",
            )
    return Conversation(
        "anthropic",
        request.model,
        bool(request.stream),
        False,
        request.max_tokens,
        system,
        tuple(tools),
        tuple(messages),
        (system, *texts),
    )


def _assistant_turn(blocks: list[dict[str, Any]], position: int, pending: dict[str, str]) -> AssistantMessage:
    calls = []
    for block in blocks:
        if block.get("type") != "tool_use":
            continue
        name, call_id, arguments = block.get("name"), block.get("id"), block.get("input")
        if not isinstance(name, str) or not isinstance(call_id, str):
            raise RequestError(
                f"messages.{position}.content: tool_use needs an id and a name", f"messages.{position}"
            )
        _check_name(name, f"messages.{position}.content.name")
        value = arguments if isinstance(arguments, dict) else {INVALID_ARGUMENTS_KEY: json.dumps(arguments)}
        calls.append(ToolCall(call_id, name, value))
        pending[call_id] = name
    return AssistantMessage(_text_of([b for b in blocks if b.get("type") == "text"]), tuple(calls))


def _anthropic_result(block: dict[str, Any], position: int, pending: dict[str, str]) -> ToolResult:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or call_id not in pending:
        raise RequestError(
            f"messages.{position}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
            f"{call_id}. Each `tool_result` block must have a corresponding `tool_use` block in the "
            "previous message.",
            f"messages.{position}.content",
        )
    content = block.get("content")
    text = _text_of(content if isinstance(content, str | list) else None)
    return _result(call_id, pending.pop(call_id), text, block.get("is_error") is True)


def _unanswered(position: int, pending: dict[str, str]) -> RequestError:
    return RequestError(
        f"messages.{position}: `tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{', '.join(pending)}. Each `tool_use` block must have a corresponding `tool_result` block in the "
        "next message.",
        f"messages.{position}",
    )


def read_memory(prompt: str) -> tuple[Reflection, ...]:
    """The reflections our runner appended to a Reflexion trial's first prompt, oldest first."""
    head = prompt.find(_MEMORY_HEAD)
    if head < 0:
        return ()
    block = prompt[head + len(_MEMORY_HEAD) :]
    block = block[: block.rfind(_MEMORY_TAIL)] if _MEMORY_TAIL in block else block
    starts = list(_MEMORY_ITEM.finditer(block))
    return tuple(
        Reflection(
            int(match.group(1)) - 1, block[match.end() : nxt.start() if nxt else len(block)].rstrip("\n")
        )
        for match, nxt in zip(starts, [*starts[1:], None], strict=True)
    )


def asks_for_reflection(messages: Sequence[Message]) -> bool:
    """Whether the conversation ends with our runner's request for a reflection."""
    last = messages[-1] if messages else None
    return isinstance(last, UserMessage) and REFLECTION_REQUEST in last.text


def _loose(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


class NameBridge:
    """The request's function names and the MCP tool names they stand for, both ways.

    A name maps to the MCP tool whose provider name (`ToolNameMap`) it is; else to the one it equals
    once case and separators are ignored (a harness with its own mapping, e.g. ``.`` to ``__``);
    else to itself. An MCP name the request does not offer gets its `ToolNameMap` name.
    """

    def __init__(self, offered: Iterable[str], known: Iterable[str]) -> None:
        mcp_names = sorted(set(known))
        standard = ToolNameMap.build(mcp_names)
        exact = {standard.provider_name(n): n for n in mcp_names}
        loose: dict[str, str | None] = {}
        for name in mcp_names:
            key = _loose(name)
            loose[key] = name if key not in loose else None  # two tools alike: no loose match
        self._to_mcp: dict[str, str] = {}
        for name in offered:
            self._to_mcp[name] = exact.get(name) or loose.get(_loose(name)) or name
        self._to_provider = {mcp: provider for provider, mcp in self._to_mcp.items()}
        self._standard = standard

    def mcp(self, provider_name: str) -> str:
        """The MCP tool ``provider_name`` stands for."""
        return self._to_mcp.get(provider_name, provider_name)

    def provider(self, mcp_name: str) -> str:
        """The function name the client knows ``mcp_name`` by."""
        return self._to_provider.get(mcp_name) or self._standard.provider_name(mcp_name)


def with_mcp_names(
    conversation: Conversation, bridge: NameBridge
) -> tuple[tuple[ToolDefinition, ...], tuple[Message, ...]]:
    """The conversation's tools and messages with MCP tool names."""
    tools = tuple(
        ToolDefinition(bridge.mcp(t.name), t.description, t.input_schema) for t in conversation.tools
    )
    messages: list[Message] = []
    for message in conversation.messages:
        if isinstance(message, AssistantMessage):
            calls = tuple(ToolCall(c.id, bridge.mcp(c.name), c.arguments) for c in message.tool_calls)
            messages.append(AssistantMessage(message.text, calls))
        elif isinstance(message, ToolResultsMessage):
            results = tuple(
                ToolResult(r.call_id, bridge.mcp(r.name), r.text, r.is_error, r.structured)
                for r in message.results
            )
            messages.append(ToolResultsMessage(results))
        else:
            messages.append(message)
    return tools, tuple(messages)
