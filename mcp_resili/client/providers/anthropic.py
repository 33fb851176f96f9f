"""``anthropic:MODEL``: the Messages API with tools, through the official SDK (imported only when used)."""

from __future__ import annotations

from typing import Any

from mcp_resili.agents.model import (
    AssistantMessage,
    ContextWindowExceededError,
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


def to_anthropic_messages(messages: tuple[Message, ...], names: ToolNameMap) -> list[dict[str, Any]]:
    """Our conversation in Messages API form (tool results travel in a user turn)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            blocks: list[dict[str, Any]] = []
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": names.provider_name(c.name), "input": c.arguments}
                for c in message.tool_calls
            )
            # The API rejects an empty assistant turn; an empty reply is still a turn the model took.
            out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": "(empty)"}]})
        elif isinstance(message, ToolResultsMessage):
            out.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": r.call_id,
                            "content": r.text,
                            "is_error": r.is_error,
                        }
                        for r in message.results
                    ],
                }
            )
    return out


class AnthropicModel:
    """A Claude model behind the `Model` interface."""

    def __init__(self, model: str, options: ProviderOptions) -> None:
        import anthropic as sdk

        self._model = model
        self._options = options
        self._endpoint = SDKEndpoint(sdk, sdk.AsyncAnthropic, "anthropic", options)
        self._tools_json = ToolsJSON(_tool)

    @property
    def name(self) -> str:
        """The spec this model answers to."""
        return f"anthropic:{self._model}"

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._endpoint.aclose()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One Messages API call (with retries); tool names are mapped both ways."""
        names = name_map(request.tools)
        kwargs: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._options.max_output_tokens,
            "messages": to_anthropic_messages(request.messages, names),
        }
        if request.system:
            kwargs["system"] = request.system
        if self._options.temperature is not None:
            kwargs["temperature"] = self._options.temperature
        body = encode_body(kwargs, self._tools_json(request.tools, names) if request.tools else None)
        reply = await with_retries(
            lambda: self._endpoint.post("/v1/messages", body),
            policy=self._options.retry,
            sleeper=self._options.sleeper,
            what=self.name,
        )
        if reply.get("stop_reason") == "model_context_window_exceeded":
            raise ContextWindowExceededError(f"{self.name}: model_context_window_exceeded")
        return parse_answer(_response, reply, names, model=self.name, what="a Messages API message")


def _tool(tool: ToolDefinition, names: ToolNameMap) -> dict[str, Any]:
    return {
        "name": names.provider_name(tool.name),
        "description": tool.description,
        "input_schema": tool.input_schema,
    }


def _response(reply: dict[str, Any], names: ToolNameMap) -> ModelResponse:
    """A Messages API message as our `ModelResponse` (cache reads and writes count as input)."""
    content = reply["content"]  # an answer without it is not a message (an infrastructure error)
    if not isinstance(content, list):
        raise TypeError(f"content is {type(content).__name__}, not a list of blocks")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if block["type"] == "text":
            texts.append(block["text"])
        elif block["type"] == "tool_use":
            arguments = block.get("input")
            calls.append(
                ToolCall(
                    block["id"],
                    names.mcp_name(block["name"]),
                    dict(arguments) if isinstance(arguments, dict) else {},
                )
            )
    usage = reply.get("usage") or {}
    cache_read = int(usage.get("cache_read_input_tokens") or 0)
    cache_write = int(usage.get("cache_creation_input_tokens") or 0)
    return ModelResponse(
        text="".join(texts),
        tool_calls=tuple(calls),
        stop_reason=str(reply.get("stop_reason")),
        input_tokens=int(usage.get("input_tokens") or 0) + cache_read + cache_write,
        output_tokens=int(usage.get("output_tokens") or 0),
        extra={"cache_read_input_tokens": cache_read, "cache_creation_input_tokens": cache_write},
    )
