"""``openai:MODEL``: Chat Completions through the official SDK (imported only when used).

Chat Completions is the API every OpenAI-compatible server speaks (vLLM, Ollama, llama.cpp, LM Studio),
so ``--base-url`` points the same provider at any of them.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_resili.agents.model import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolDefinition,
    ToolResultsMessage,
    UserMessage,
)
from mcp_resili.client.providers.names import ToolNameMap
from mcp_resili.client.providers.options import ProviderOptions, SDKEndpoint, name_map
from mcp_resili.client.providers.retry import with_retries
from mcp_resili.client.providers.wire import ToolsJSON, encode_body, parse_answer

#: Where a tool call's unparseable ``arguments`` string is kept, so the agent's mistake stays visible.
INVALID_ARGUMENTS_KEY = "mcp-resili/invalid_arguments"


def to_openai_messages(
    messages: tuple[Message, ...], names: ToolNameMap, system: str | None = None
) -> list[dict[str, Any]]:
    """Our conversation in Chat Completions form (one ``tool`` message per result)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": names.provider_name(c.name),
                            "arguments": json.dumps(c.arguments, sort_keys=True),
                        },
                    }
                    for c in message.tool_calls
                ]
            out.append(entry)
        elif isinstance(message, ToolResultsMessage):
            out.extend(
                {"role": "tool", "tool_call_id": r.call_id, "content": r.text} for r in message.results
            )
    return out


def _function_tool(tool: ToolDefinition, names: ToolNameMap) -> dict[str, Any]:
    # No `strict`: raw MCP schemas rarely meet strict mode's restrictions.
    return {
        "type": "function",
        "function": {
            "name": names.provider_name(tool.name),
            "description": tool.description,
            "parameters": tool.input_schema,
        },
    }


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """A tool call's JSON arguments; anything that is not a JSON object is kept under a marker key.

    The marker makes the MCP server reject the call as invalid input, which the agent then sees,
    rather than the harness guessing what the model meant.
    """
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {INVALID_ARGUMENTS_KEY: raw}
    return value if isinstance(value, dict) else {INVALID_ARGUMENTS_KEY: raw}


class OpenAIModel:
    """An OpenAI (or OpenAI-compatible) chat model behind the `Model` interface."""

    def __init__(self, model: str, options: ProviderOptions) -> None:
        import openai as sdk

        self._model = model
        self._options = options
        self._endpoint = SDKEndpoint(sdk, sdk.AsyncOpenAI, "openai", options)
        self._tools_json = ToolsJSON(_function_tool)

    @property
    def name(self) -> str:
        """The spec this model answers to."""
        return f"openai:{self._model}"

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._endpoint.aclose()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One Chat Completions call (with retries); tool names are mapped both ways."""
        names = name_map(request.tools)
        kwargs: dict[str, Any] = {
            "model": self._model,
            "messages": to_openai_messages(request.messages, names, request.system),
        }
        # OpenAI's own API wants max_completion_tokens; compatible servers mostly know only max_tokens.
        budget_key = "max_tokens" if self._options.base_url else "max_completion_tokens"
        kwargs[budget_key] = self._options.max_output_tokens
        if self._options.temperature is not None:
            kwargs["temperature"] = self._options.temperature
        body = encode_body(kwargs, self._tools_json(request.tools, names) if request.tools else None)
        reply = await with_retries(
            lambda: self._endpoint.post("/chat/completions", body),
            policy=self._options.retry,
            sleeper=self._options.sleeper,
            what=self.name,
        )
        return parse_answer(_response, reply, names, model=self.name, what="a Chat Completion")


def _response(reply: dict[str, Any], names: ToolNameMap) -> ModelResponse:
    """A Chat Completion's first choice as our `ModelResponse`."""
    choices = reply["choices"]  # an answer without it is not a completion (an infrastructure error)
    if not isinstance(choices, list):
        raise TypeError(f"choices is {type(choices).__name__}, not a list")
    if not choices:
        return ModelResponse(text="", stop_reason="empty")
    choice = choices[0]
    message = choice.get("message") or {}
    calls = tuple(
        ToolCall(
            call.get("id"),
            names.mcp_name(call["function"]["name"]),
            parse_arguments(call["function"].get("arguments")),
        )
        for call in (message.get("tool_calls") or ())
        if call.get("type", "function") == "function"
    )
    usage = reply.get("usage") or {}
    return ModelResponse(
        text=message.get("content") or "",
        tool_calls=calls,
        stop_reason=str(choice.get("finish_reason")),
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
    )
