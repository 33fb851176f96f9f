"""How stream and content faults change an upstream's answer, event by event or as a whole body.

A streamed answer is handled one SSE event at a time (`StreamTamper.on_event`), so nothing waits for
the whole answer: only ``tool_arguments`` holds back one tool call's argument events, to send them
changed as one event when the call's arguments end. A whole answer is one JSON body (`tamper_body`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jiter

from mcp_resili.faults.model_api import MalformedEvent, MaxTokens, ModelFaultBase, StreamCut, ToolArguments
from mcp_resili.modelapi.formats import (
    OPENAI_DONE,
    Api,
    SseEvent,
    anthropic_event,
    dumps,
    openai_event,
    parse_event,
)


@dataclass(frozen=True)
class Cut:
    """Send ``partial``, then close the connection: the answer ends mid-way."""

    partial: bytes


@dataclass(frozen=True)
class Finish:
    """The answer is complete as sent: stop reading the upstream."""


Action = bytes | Cut | Finish

#: What a malformed event looks like in each API: a ``data:`` line whose JSON stops short.
MALFORMED: dict[str, bytes] = {
    "openai": b'data: {"id":"chatcmpl-malformed","object":"chat.completion.chunk","choices":[{"del\n\n',
    "anthropic": b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"ty\n\n',
}


def truncated(arguments: str) -> str:
    """Arguments cut in half (an empty text stays empty)."""
    return arguments[: len(arguments) // 2]


def invalid(arguments: str) -> str:
    """Arguments that are not JSON: a comma before the closing brace (a common model slip)."""
    cut = arguments.rstrip()
    return f"{cut[:-1]},}}" if cut.endswith("}") else f"{cut},"


def changed_arguments(fault: ToolArguments, arguments: str) -> str:
    """The arguments text ``fault`` delivers instead of ``arguments``."""
    return truncated(arguments) if fault.mode == "truncated" else invalid(arguments)


def _is_terminal(api: Api, event: SseEvent) -> bool:
    return event.data.strip() == "[DONE]" if api == "openai" else event.name == "message_stop"


def _openai_delta(data: Any) -> dict[str, Any] | None:
    if not isinstance(data, dict):
        return None
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    delta = choices[0].get("delta")
    return delta if isinstance(delta, dict) else None


def _carries_arguments(api: Api, event: SseEvent) -> bool:
    data = event.json()
    if api == "anthropic":
        delta = data.get("delta") if isinstance(data, dict) else None
        return (
            isinstance(delta, dict)
            and delta.get("type") == "input_json_delta"
            and bool(delta.get("partial_json"))
        )
    delta = _openai_delta(data)
    calls = delta.get("tool_calls") if delta is not None else None
    return isinstance(calls, list) and any(
        isinstance(c, dict) and isinstance(c.get("function"), dict) and c["function"].get("arguments")
        for c in calls
    )


class StreamTamper:
    """Passes events on unchanged; subclasses change some (see `stream_tamper`)."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def on_event(self, raw: bytes) -> list[Action]:
        """What to send for one upstream event."""
        return [raw]

    def on_end(self, rest: bytes) -> list[Action]:
        """What to send when the upstream's stream ends (``rest``: bytes after its last whole event)."""
        return [rest] if rest else []


class CutStream(StreamTamper):
    """`StreamCut`: half an event, then the connection closes."""

    def __init__(self, api: Api, fault: StreamCut) -> None:
        super().__init__(api)
        self.fault = fault
        self.seen = 0
        self.arguments_seen = False

    def on_event(self, raw: bytes) -> list[Action]:
        """Cut at the chosen event (always before the stream's own end)."""
        event = parse_event(raw)
        if self.fault.at == "mid_event":
            due = self.seen == self.fault.after_events
        else:
            due = self.arguments_seen
            self.arguments_seen = self.arguments_seen or _carries_arguments(self.api, event)
        self.seen += 1
        if due or _is_terminal(self.api, event):
            return [Cut(raw[: max(1, len(raw) // 2)])]
        return [raw]


class MalformedStream(StreamTamper):
    """`MalformedEvent`: one event that is no JSON, then the stream goes on."""

    def __init__(self, api: Api, fault: MalformedEvent) -> None:
        super().__init__(api)
        self.fault = fault
        self.seen = 0
        self.done = False

    def on_event(self, raw: bytes) -> list[Action]:
        """Put the malformed event before the chosen one (at the latest before the stream's end)."""
        due = not self.done and (
            self.seen == self.fault.after_events or _is_terminal(self.api, parse_event(raw))
        )
        self.seen += 1
        if due:
            self.done = True
            return [MALFORMED[self.api], raw]
        return [raw]


@dataclass
class _HeldCall:
    arguments: str = ""
    template: dict[str, Any] = field(default_factory=dict)


class ArgumentsStream(StreamTamper):
    """`ToolArguments`: each tool call's argument events held back, then sent changed as one event."""

    def __init__(self, api: Api, fault: ToolArguments) -> None:
        super().__init__(api)
        self.fault = fault
        self.held: dict[int, _HeldCall] = {}

    def on_event(self, raw: bytes) -> list[Action]:
        """Hold argument pieces; release a call's arguments when its arguments end."""
        event = parse_event(raw)
        data = event.json()
        if self.api == "anthropic":
            return self._anthropic(raw, data)
        return self._openai(raw, data)

    def _anthropic(self, raw: bytes, data: Any) -> list[Action]:
        if not isinstance(data, dict):
            return [raw]
        index = data.get("index")
        delta = data.get("delta")
        if (
            data.get("type") == "content_block_delta"
            and isinstance(delta, dict)
            and isinstance(index, int)
            and delta.get("type") == "input_json_delta"
        ):
            held = self.held.setdefault(index, _HeldCall(template=data))
            held.arguments += str(delta.get("partial_json", ""))
            return []
        if data.get("type") == "content_block_stop" and isinstance(index, int) and index in self.held:
            held = self.held.pop(index)
            text = changed_arguments(self.fault, held.arguments)
            delta = {"type": "input_json_delta", "partial_json": text}
            return [anthropic_event({**held.template, "delta": delta}), raw]
        return [raw]

    def _openai(self, raw: bytes, data: Any) -> list[Action]:
        delta = _openai_delta(data)
        calls = delta.get("tool_calls") if delta is not None else None
        out: list[Action] = []
        if isinstance(data, dict) and delta is not None and isinstance(calls, list):
            kept: list[dict[str, Any]] = []
            for call in calls:
                if not isinstance(call, dict) or not isinstance(call.get("index"), int):
                    kept.append(call)
                    continue
                out += self._release(other_than=call["index"])
                function = call.get("function")
                pieces = function.get("arguments") if isinstance(function, dict) else None
                if isinstance(pieces, str) and pieces:
                    held = self.held.setdefault(call["index"], _HeldCall(template=data))
                    held.arguments += pieces
                    call = {**call, "function": {**function, "arguments": ""}}  # type: ignore[dict-item]
                    if set(call) <= {"index", "function"} and set(call["function"]) <= {"arguments"}:
                        continue  # nothing but argument pieces: held back whole
                kept.append(call)
            others = {k: v for k, v in delta.items() if k != "tool_calls"}
            if not kept and not others and data["choices"][0].get("finish_reason") is None:
                return out
            choice = {**data["choices"][0], "delta": {**others, **({"tool_calls": kept} if kept else {})}}
            return [*out, openai_event({**data, "choices": [choice]})]
        return [*self._release(other_than=None), raw]

    def _release(self, other_than: int | None) -> list[Action]:
        """Send the held arguments of every call but ``other_than`` (whose pieces keep coming)."""
        out: list[Action] = []
        for index in sorted(i for i in self.held if i != other_than):
            held = self.held.pop(index)
            text = changed_arguments(self.fault, held.arguments)
            piece = {"index": index, "function": {"arguments": text}}
            choice = {**held.template["choices"][0], "delta": {"tool_calls": [piece]}, "finish_reason": None}
            out.append(openai_event({**held.template, "choices": [choice]}))
        return out

    def on_end(self, rest: bytes) -> list[Action]:
        """A stream that ended while a call's arguments were held: send them."""
        released = self._release(other_than=None) if self.api == "openai" else []
        return [*released, *super().on_end(rest)]


class LengthStream(StreamTamper):
    """`MaxTokens`: the answer ends after ``keep_chars`` characters, as a model out of tokens."""

    def __init__(self, api: Api, fault: MaxTokens) -> None:
        super().__init__(api)
        self.left = fault.keep_chars
        self.sent_events = 0
        self.open_block: int | None = None

    def on_event(self, raw: bytes) -> list[Action]:
        """Pass events while the budget lasts; at its end, cut the piece and stop as out of tokens."""
        data = parse_event(raw).json()
        self.sent_events += 1
        if self.api == "anthropic":
            return self._anthropic(raw, data)
        return self._openai(raw, data)

    def _spend(self, text: str) -> tuple[str, bool]:
        """The part of ``text`` the budget allows, and whether the budget ran out on it."""
        kept = text[: self.left]
        self.left -= len(kept)
        return kept, len(kept) < len(text) or (self.left == 0 and bool(text))

    def _openai(self, raw: bytes, data: Any) -> list[Action]:
        delta = _openai_delta(data)
        if not isinstance(data, dict) or delta is None:
            return [raw]
        choice = dict(data["choices"][0])
        if choice.get("finish_reason") is not None:
            return [openai_event({**data, "choices": [{**choice, "finish_reason": "length"}]})]
        changed = dict(delta)
        out_of_budget = False
        if isinstance(delta.get("content"), str):
            changed["content"], out_of_budget = self._spend(delta["content"])
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            kept_calls = []
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                if (
                    out_of_budget
                    or not isinstance(function, dict)
                    or not isinstance(function.get("arguments"), str)
                ):
                    kept_calls.append(call)
                    continue
                arguments, out_of_budget = self._spend(function["arguments"])
                kept_calls.append({**call, "function": {**function, "arguments": arguments}})
            changed["tool_calls"] = kept_calls
        if not out_of_budget:
            return [raw]
        cut = openai_event({**data, "choices": [{**choice, "delta": changed}]})
        end = {**choice, "delta": {}, "finish_reason": "length"}
        return [cut, openai_event({**data, "choices": [end]}), OPENAI_DONE, Finish()]

    def _anthropic(self, raw: bytes, data: Any) -> list[Action]:
        if not isinstance(data, dict):
            return [raw]
        kind = data.get("type")
        if kind == "content_block_start" and isinstance(data.get("index"), int):
            self.open_block = data["index"]
        if kind == "message_delta" and isinstance(data.get("delta"), dict):
            return [anthropic_event({**data, "delta": {**data["delta"], "stop_reason": "max_tokens"}})]
        delta = data.get("delta")
        if kind != "content_block_delta" or not isinstance(delta, dict):
            return [raw]
        key = "text" if delta.get("type") == "text_delta" else "partial_json"
        if not isinstance(delta.get(key), str):
            return [raw]
        kept, out_of_budget = self._spend(delta[key])
        if not out_of_budget:
            return [raw]
        out: list[Action] = [anthropic_event({**data, "delta": {**delta, key: kept}})]
        if self.open_block is not None:
            out.append(anthropic_event({"type": "content_block_stop", "index": self.open_block}))
        stop = {"stop_reason": "max_tokens", "stop_sequence": None}
        out.append(
            anthropic_event(
                {"type": "message_delta", "delta": stop, "usage": {"output_tokens": self.sent_events}}
            )
        )
        return [*out, anthropic_event({"type": "message_stop"}), Finish()]


def stream_tamper(api: Api, fault: ModelFaultBase | None) -> StreamTamper | None:
    """The tamper for a streamed answer under ``fault`` (None: bytes pass as they come)."""
    if isinstance(fault, StreamCut):
        return CutStream(api, fault)
    if isinstance(fault, MalformedEvent):
        return MalformedStream(api, fault)
    if isinstance(fault, ToolArguments):
        return ArgumentsStream(api, fault)
    if isinstance(fault, MaxTokens):
        return LengthStream(api, fault)
    return None


# --- whole answers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BodyCut:
    """Send ``partial`` under the whole body's ``Content-Length``, then close: an answer cut mid-way."""

    partial: bytes
    length: int


def cut_body(api: Api, fault: StreamCut, body: bytes) -> BodyCut:
    """Where a whole answer is cut: mid-body, or inside the first tool call's arguments."""
    position = len(body) // 2
    if fault.at == "mid_tool_call":
        marker = body.find(b'"arguments"' if api == "openai" else b'"input"')
        if marker >= 0:
            position = min(len(body) - 1, marker + len(b'"arguments":"{') + 2)
    return BodyCut(body[: max(1, position)], len(body))


def malformed_body(body: bytes) -> bytes:
    """A whole answer that is not JSON: its first half."""
    return body[: len(body) // 2]


def _partial_object(text: str) -> dict[str, Any]:
    """What a partial-JSON reader makes of cut arguments (as the Anthropic SDK's stream reader does)."""
    try:
        value = jiter.from_json(text.encode(), partial_mode="trailing-strings") if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def tamper_body(api: Api, fault: ToolArguments | MaxTokens, body: dict[str, Any]) -> dict[str, Any]:
    """A whole answer with its tool arguments changed, or cut as out of tokens."""
    if api == "openai":
        return _openai_body(fault, body)
    return _anthropic_body(fault, body)


def _openai_body(fault: ToolArguments | MaxTokens, body: dict[str, Any]) -> dict[str, Any]:
    choices = []
    for choice in body.get("choices") or []:
        message = dict(choice.get("message") or {})
        left = fault.keep_chars if isinstance(fault, MaxTokens) else 0
        if isinstance(fault, MaxTokens) and isinstance(message.get("content"), str):
            message["content"] = message["content"][:left]
            left -= len(message["content"])
        calls = []
        for call in message.get("tool_calls") or []:
            function = dict(call.get("function") or {})
            arguments = str(function.get("arguments") or "")
            if isinstance(fault, ToolArguments):
                function["arguments"] = changed_arguments(fault, arguments)
            else:
                function["arguments"], left = arguments[:left], left - len(arguments[:left])
            calls.append({**call, "function": function})
        if calls:
            message["tool_calls"] = calls
        finish = "length" if isinstance(fault, MaxTokens) else choice.get("finish_reason")
        choices.append({**choice, "message": message, "finish_reason": finish})
    return {**body, "choices": choices}


def _anthropic_body(fault: ToolArguments | MaxTokens, body: dict[str, Any]) -> dict[str, Any]:
    content = []
    left = fault.keep_chars if isinstance(fault, MaxTokens) else 0
    for block in body.get("content") or []:
        if not isinstance(block, dict):
            content.append(block)
            continue
        if block.get("type") == "tool_use":
            arguments = dumps(block.get("input", {}))
            if isinstance(fault, ToolArguments):
                text = changed_arguments(fault, arguments)
                # A whole answer's input is an object: cut arguments arrive as what a partial-JSON
                # reader makes of them; invalid ones as their text (not an object at all).
                block = {**block, "input": _partial_object(text) if fault.mode == "truncated" else text}
            else:
                block = {**block, "input": _partial_object(arguments[:left])}
                left -= len(arguments[:left])
        elif block.get("type") == "text" and isinstance(fault, MaxTokens):
            block = {**block, "text": str(block.get("text", ""))[:left]}
            left -= len(block["text"])
        content.append(block)
    stop = "max_tokens" if isinstance(fault, MaxTokens) else body.get("stop_reason")
    return {**body, "content": content, "stop_reason": stop}


def read_json(body: bytes) -> dict[str, Any] | None:
    """A body's JSON object, or None when it is none (jiter: about twice as fast as the json module)."""
    try:
        value = jiter.from_json(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
