"""The two model APIs on the wire: which one a request speaks, their error shapes, their SSE events.

OpenAI Chat Completions (``POST /v1/chat/completions``): errors are ``{"error": {"message", "type",
"param", "code"}}`` with an ``x-request-id`` header; a stream is ``data: CHUNK`` events ending with
``data: [DONE]``. Anthropic Messages (``POST /v1/messages``): errors are ``{"type": "error", "error":
{"type", "message"}, "request_id"}`` with a ``request-id`` header; a stream is named events
(``event: message_start`` ... ``event: message_stop``). Both SDKs read exactly these shapes, so a
fault or a refusal delivered this way reaches the client as the SDK's own typed error.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

Api = Literal["openai", "anthropic"]

#: Request paths of the model calls each API serves (the model-call endpoints faults apply to).
MODEL_PATHS: dict[str, Api] = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}
JSON_TYPE = "application/json"
SSE_TYPE = "text/event-stream; charset=utf-8"
#: The SSE line that ends an OpenAI stream.
OPENAI_DONE = b"data: [DONE]\n\n"


def api_of(path: str) -> Api | None:
    """The API a request path belongs to, or None when it is no model call."""
    return MODEL_PATHS.get(path.rstrip("/"))


class RequestHead(msgspec.Struct):
    """The two fields of a model call's body that decide it: its model and whether it streams."""

    model: Any = None
    stream: Any = None


_HEAD = msgspec.json.Decoder(RequestHead)


def request_head(body: bytes) -> RequestHead | None:
    """A model call body's `RequestHead`, or None when the body is no JSON object.

    The whole body is checked as JSON, but only these two fields are built: the messages and tools
    (kilobytes) are skipped in C, a third of the time a full parse takes.
    """
    try:
        return _HEAD.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def dumps(value: Any) -> str:
    """Compact JSON as the APIs send it (UTF-8 kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def request_id(api: Api, key: str) -> str:
    """A request id in the vendor's form, derived from ``key`` (deterministic)."""
    digest = hashlib.blake2b(key.encode(), digest_size=12).hexdigest()
    return f"req_{digest}" if api == "openai" else f"req_011{digest}"


#: Anthropic's error ``type`` by HTTP status (its documented table).
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class ApiError:
    """One error answer: HTTP status, body and headers, in one vendor's shape."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...]


def api_error(
    api: Api,
    status: int,
    message: str,
    *,
    key: str,
    openai_type: str | None = "invalid_request_error",
    param: str | None = None,
    code: str | int | None = None,
    anthropic_type: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> ApiError:
    """The error ``message`` with ``status`` as ``api`` answers it (``key`` seeds its request id)."""
    rid = request_id(api, key)
    if api == "openai":
        body: dict[str, Any] = {
            "error": {"message": message, "type": openai_type, "param": param, "code": code}
        }
        id_header = ("x-request-id", rid)
    else:
        kind = anthropic_type or ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": rid}
        id_header = ("request-id", rid)
    return ApiError(status, dumps(body).encode(), (id_header, *headers))


def bad_request(api: Api, message: str, *, key: str, param: str | None = None) -> ApiError:
    """HTTP 400 for a request the API refuses (the message says what is wrong)."""
    shown = f"{param}: {message}" if api == "anthropic" and param else message
    return api_error(api, 400, shown, key=key, param=param)


def sse_event(name: str | None, data: str) -> bytes:
    """One SSE event: ``event: NAME`` (Anthropic) when named, then its ``data:`` line."""
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {data}\n\n".encode()


def openai_event(chunk: dict[str, Any]) -> bytes:
    """One Chat Completions stream chunk."""
    return sse_event(None, dumps(chunk))


def anthropic_event(data: dict[str, Any]) -> bytes:
    """One Messages stream event (its name is its ``type``)."""
    return sse_event(str(data["type"]), dumps(data))


class EventSplitter:
    """Cuts a byte stream into whole SSE events (each ends with its blank line), as they arrive."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The events ``chunk`` completes (with what came before it)."""
        data = self._pending + chunk
        events: list[bytes] = []
        start = 0
        while True:
            end, width = _boundary(data, start)
            if end < 0:
                break
            events.append(data[start : end + width])
            start = end + width
        self._pending = data[start:]
        return events

    def rest(self) -> bytes:
        """Bytes after the last whole event (a stream that ended mid-event)."""
        rest, self._pending = self._pending, b""
        return rest


def _boundary(data: bytes, start: int) -> tuple[int, int]:
    """The earliest blank line at or after ``start``: (position, its width), or (-1, 0)."""
    found = [(data.find(sep, start), len(sep)) for sep in (b"\n\n", b"\r\n\r\n", b"\r\r")]
    hits = [hit for hit in found if hit[0] >= 0]
    return min(hits) if hits else (-1, 0)


@dataclass(frozen=True)
class SseEvent:
    """An SSE event's name (None when unnamed) and its ``data`` (lines joined with newlines)."""

    name: str | None
    data: str

    def json(self) -> Any:
        """The data as JSON, or None when it is not JSON (``[DONE]``, a malformed line)."""
        try:
            return json.loads(self.data)
        except ValueError:
            return None


def parse_event(raw: bytes) -> SseEvent:
    """An event's fields (comments and unknown fields are skipped)."""
    name: str | None = None
    data: list[str] = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return SseEvent(name, "\n".join(data))
