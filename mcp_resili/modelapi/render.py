"""A model's answer in each API's exact form: a whole JSON body, or the SSE events of a stream.

`Answer` is the neutral form (text, tool calls with their arguments as JSON text, why it stopped,
token usage). The scripted model server renders every answer through here, and the fault gateway its
empty completions, so both speak the same bytes the real APIs do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from mcp_resili.modelapi.formats import OPENAI_DONE, Api, anthropic_event, openai_event

Stop = Literal["end", "tool_calls", "max_tokens"]
_OPENAI_FINISH: dict[str, str] = {"end": "stop", "tool_calls": "tool_calls", "max_tokens": "length"}
_ANTHROPIC_STOP: dict[str, str] = {"end": "end_turn", "tool_calls": "tool_use", "max_tokens": "max_tokens"}
#: Characters of tool-call arguments per stream event (a call's arguments always take two events or
#: more, as a real model's do, so a stream can be cut in the middle of one).
ARGUMENT_PIECE = 24
#: A stream's text pieces: a word with the spaces after it.
_WORD = re.compile(r"\S+\s*|\s+")


@dataclass(frozen=True)
class WireToolCall:
    """A tool call as the API carries it: its function name and its arguments as JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Answer:
    """One model answer, before it takes an API's form."""

    id: str
    model: str
    text: str = ""
    tool_calls: tuple[WireToolCall, ...] = ()
    stop: Stop = "end"
    input_tokens: int = 0
    output_tokens: int = 0
    #: The ``created`` timestamp of OpenAI answers (fixed: an answer is a function of its request).
    created: int = 0


def render(api: Api, answer: Answer) -> dict[str, Any]:
    """The whole (non-streamed) answer body of ``api``."""
    return openai_body(answer) if api == "openai" else anthropic_body(answer)


def render_stream(api: Api, answer: Answer, *, include_usage: bool = False) -> Iterator[bytes]:
    """The SSE events of ``api`` streaming ``answer``."""
    if api == "openai":
        return openai_chunks(answer, include_usage=include_usage)
    return anthropic_events(answer)


def openai_body(answer: Answer) -> dict[str, Any]:
    """A ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None, "refusal": None}
    if answer.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in answer.tool_calls
        ]
    return {
        "id": answer.id,
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": _OPENAI_FINISH[answer.stop]}
        ],
        "usage": _openai_usage(answer),
        "system_fingerprint": None,
    }


def _openai_usage(answer: Answer) -> dict[str, int]:
    return {
        "prompt_tokens": answer.input_tokens,
        "completion_tokens": answer.output_tokens,
        "total_tokens": answer.input_tokens + answer.output_tokens,
    }


def pieces(text: str, size: int = ARGUMENT_PIECE) -> list[str]:
    """``text`` in pieces of ``size`` characters; at least two when it has two characters or more."""
    if len(text) < 2:
        return [text]
    size = min(size, (len(text) + 1) // 2)
    return [text[i : i + size] for i in range(0, len(text), size)]


def words(text: str) -> list[str]:
    """``text`` as stream pieces: each word with the spaces after it."""
    return _WORD.findall(text)


def openai_chunks(answer: Answer, *, include_usage: bool = False) -> Iterator[bytes]:
    """The ``chat.completion.chunk`` events, then ``[DONE]``."""
    head: dict[str, Any] = {
        "id": answer.id,
        "object": "chat.completion.chunk",
        "created": answer.created,
        "model": answer.model,
        "system_fingerprint": None,
    }
    if include_usage:
        head["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return openai_event({**head, "choices": [choice]})

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for piece in words(answer.text):
        yield chunk({"content": piece})
    for index, call in enumerate(answer.tool_calls):
        start = {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        yield chunk({"tool_calls": [start]})
        for piece in pieces(call.arguments):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, _OPENAI_FINISH[answer.stop])
    if include_usage:
        yield openai_event({**head, "choices": [], "usage": _openai_usage(answer)})
    yield OPENAI_DONE


def _input_object(arguments: str) -> Any:
    """A tool call's ``input``: the arguments' JSON object (the text itself when it is none)."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return arguments
    return value


def anthropic_body(answer: Answer) -> dict[str, Any]:
    """A ``message`` object."""
    content: list[dict[str, Any]] = [{"type": "text", "text": answer.text}] if answer.text else []
    content += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": _input_object(c.arguments)}
        for c in answer.tool_calls
    ]
    return {
        "id": answer.id,
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": _ANTHROPIC_STOP[answer.stop],
        "stop_sequence": None,
        "usage": _anthropic_usage(answer.input_tokens, answer.output_tokens),
    }


def _anthropic_usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def anthropic_events(answer: Answer) -> Iterator[bytes]:
    """``message_start`` ... ``message_stop``, one content block per text and tool call."""
    start: dict[str, Any] = {
        "id": answer.id,
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _anthropic_usage(answer.input_tokens, 1),
    }
    yield anthropic_event({"type": "message_start", "message": start})
    yield anthropic_event({"type": "ping"})
    index = 0
    if answer.text:
        yield anthropic_event(
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
        )
        for piece in words(answer.text):
            delta = {"type": "text_delta", "text": piece}
            yield anthropic_event({"type": "content_block_delta", "index": index, "delta": delta})
        yield anthropic_event({"type": "content_block_stop", "index": index})
        index += 1
    for call in answer.tool_calls:
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        yield anthropic_event({"type": "content_block_start", "index": index, "content_block": block})
        for piece in pieces(call.arguments):
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield anthropic_event({"type": "content_block_delta", "index": index, "delta": delta})
        yield anthropic_event({"type": "content_block_stop", "index": index})
        index += 1
    yield anthropic_event(
        {
            "type": "message_delta",
            "delta": {"stop_reason": _ANTHROPIC_STOP[answer.stop], "stop_sequence": None},
            "usage": {"output_tokens": answer.output_tokens},
        }
    )
    yield anthropic_event({"type": "message_stop"})
