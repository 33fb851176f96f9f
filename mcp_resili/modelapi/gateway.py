"""The fault gateway (``mcp-resili llm-proxy``): any OpenAI- or Anthropic-compatible endpoint, with faults.

Every request is forwarded to the upstream as it came (the caller's ``Authorization`` or ``x-api-key``
included, untouched, and never stored); answers come back as the upstream sends them, a stream event
by event as it arrives. A model call (``POST /v1/chat/completions`` or ``/v1/messages``) is first
decided by the fault plan: ordinal ``n`` of its episode (`ledger`), RNG from (seed, fault key,
`MODEL_CALL`, ``n``), first matching rule. The decision, and what the client got, is one
`ModelFaultEvent` in the episode's trace file. Other paths (``/v1/models``...) pass through undecided.

Delays (``hang``, ``slow_first_token``, ``slow_tokens``, ``retry-after``) are multiplied by the time
scale. A failure nobody injected (the upstream unreachable or timing out) is answered 502/504 in the
API's shape and recorded as such, never as a fault.
"""

from __future__ import annotations

import hmac
import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from mcp_resili import EPISODE_HEADER
from mcp_resili.faults.model_api import (
    ConnectionReset,
    ContentFilter,
    ContextLength,
    EmptyCompletion,
    Hang,
    MalformedEvent,
    MaxTokens,
    ModelFaultBase,
    ModelFaultDecision,
    ModelFaultPlan,
    RateLimited,
    ServerError,
    SlowFirstToken,
    SlowTokens,
    StreamCut,
    ToolArguments,
    model_call_rng,
)
from mcp_resili.modelapi.formats import (
    Api,
    ApiError,
    EventSplitter,
    api_error,
    api_of,
    bad_request,
    dumps,
    request_id,
)
from mcp_resili.modelapi.hosting import close_connection, reset_connection
from mcp_resili.modelapi.ledger import (
    CallEpisode,
    ClientLabels,
    EpisodeHeaderError,
    Ordinals,
    TraceFiles,
    episode_from_header,
)
from mcp_resili.modelapi.render import Answer, render, render_stream
from mcp_resili.modelapi.tamper import (
    Action,
    Cut,
    Finish,
    cut_body,
    malformed_body,
    read_json,
    stream_tamper,
    tamper_body,
)
from mcp_resili.trace.model import ModelFaultEvent

logger = logging.getLogger(__name__)

#: Header a caller sends the gateway's own token in (``Authorization`` and ``x-api-key`` belong to the
#: upstream); checked in constant time and never forwarded.
TOKEN_HEADER = "x-mcp-resili-token"
#: Request headers that describe one hop, not the request: never forwarded either way.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
        TOKEN_HEADER,
    }
)
#: Largest request body accepted (the model APIs' own limits are of this order).
MAX_BODY_BYTES = 32 * 1024 * 1024
#: A whole answer under ``slow_tokens`` arrives in this many pieces.
SLOW_PIECES = 8

Sleeper = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class GatewaySettings:
    """What the gateway forwards to and how it decides."""

    upstream: str
    plan: ModelFaultPlan
    seed: int = 0
    trace_dir: Path | None = None
    #: Injected delays are multiplied by this (0: none).
    time_scale: float = 1.0
    #: When set, every request must carry it in `TOKEN_HEADER`.
    token: str | None = None
    #: Seconds an upstream answer may take to start (and between its pieces).
    upstream_timeout: float = 600.0
    #: Waits an injected delay (scaled already); tests pass one they control.
    sleep: Sleeper = anyio.sleep


def upstream_url(base: str, path: str, query: str) -> str:
    """``base`` joined with a request's path: a base ending in ``/v1`` takes ``/v1/...`` paths once."""
    base = base.rstrip("/")
    if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        base = base[: -len("/v1")]
    return f"{base}{path}" + (f"?{query}" if query else "")


@dataclass
class _Outcome:
    """What the client got, for the ledger."""

    status: int | None = None
    upstream_status: int | None = None
    detail: str = ""


class ModelGateway:
    """The ASGI app of the fault gateway (see the module docstring)."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self._ordinals = Ordinals()
        self._clients = ClientLabels()
        self._traces = TraceFiles(settings.trace_dir)
        self._token = settings.token.encode() if settings.token else None
        self._http: httpx2.AsyncClient | None = None

    def _client(self) -> httpx2.AsyncClient:
        if self._http is None:
            timeout = httpx2.Timeout(self.settings.upstream_timeout, connect=10.0)
            limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)
            self._http = httpx2.AsyncClient(timeout=timeout, limits=limits, trust_env=False)
        return self._http

    async def aclose(self) -> None:
        """Close the upstream connections."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request (or the server's lifespan)."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = Headers(scope=scope)
        api = _shape_of(scope["path"], headers)
        if self._token is not None and not hmac.compare_digest(
            headers.get(TOKEN_HEADER, "").encode(), self._token
        ):
            error = api_error(api, 401, f"send the gateway's token in the {TOKEN_HEADER} header", key="token")
            await _send_error(send, error)
            return
        body = await _read_body(receive)
        if body is None:
            await _send_error(send, api_error(api, 413, "request body too large", key="size"))
            return
        called = api_of(scope["path"])
        if scope["method"] != "POST" or called is None:
            await self._forward(scope, receive, send, headers, body, None, _Outcome(), None)
            return
        await self._model_call(scope, receive, send, headers, body, called)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _episode(self, headers: Headers) -> CallEpisode:
        named = headers.get(EPISODE_HEADER)
        if named is not None:
            return episode_from_header(named)
        label = self._clients.label(headers)
        return CallEpisode(label, label)

    async def _model_call(
        self, scope: Scope, receive: Receive, send: Send, headers: Headers, body: bytes, api: Api
    ) -> None:
        fields = read_json(body)
        if fields is None:  # not a model call the upstream can read: it answers it, undecided
            await self._forward(scope, receive, send, headers, body, None, _Outcome(), None)
            return
        try:
            episode = self._episode(headers)
        except EpisodeHeaderError as exc:
            await _send_error(send, bad_request(api, str(exc), key="episode"))
            return
        stream = fields.get("stream") is True
        model = fields.get("model") if isinstance(fields.get("model"), str) else None
        ordinal = self._ordinals.take(episode.id)
        plan = self.settings.plan
        if plan.rules:
            seed = self.settings.seed if episode.seed is None else episode.seed
            decision = plan.decide(ordinal, api, stream, model_call_rng(seed, episode.fault_key, ordinal))
        else:
            decision = ModelFaultDecision(plan=plan.name, ordinal=ordinal)
        key = f"{episode.fault_key}#{ordinal}"
        outcome = _Outcome()
        try:
            await self._deliver(
                scope, receive, send, headers, body, api, stream, model, decision.fault, key, outcome
            )
        finally:
            self._traces.write(
                ModelFaultEvent(
                    episode=episode.id,
                    ordinal=ordinal,
                    api=api,
                    stream=stream,
                    model=model,
                    decision=decision,
                    status=outcome.status,
                    upstream_status=outcome.upstream_status,
                    detail=outcome.detail,
                )
            )

    def _scaled(self, seconds: float) -> float:
        return seconds * self.settings.time_scale

    async def _deliver(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: Headers,
        body: bytes,
        api: Api,
        stream: bool,
        model: str | None,
        fault: ModelFaultBase | None,
        key: str,
        outcome: _Outcome,
    ) -> None:
        error = self._error_for(api, fault, key, len(body))
        if error is not None:
            await _send_error(send, error)
            outcome.status, outcome.detail = error.status, "answered by the gateway"
            return
        if isinstance(fault, ConnectionReset):
            await reset_connection(receive)
            outcome.detail = "connection reset before any byte"
            return
        if isinstance(fault, EmptyCompletion):
            await self._send_empty(send, api, stream, model or "", key, outcome)
            return
        if isinstance(fault, Hang):
            gone = await self._hang(receive, fault)
            if gone:
                outcome.detail = "the client gave up waiting for headers"
                return
            outcome.detail = "answered after the hang"
        await self._forward(scope, receive, send, headers, body, fault, outcome, api)

    def _error_for(self, api: Api, fault: ModelFaultBase | None, key: str, size: int) -> ApiError | None:
        """The error answer of an error-family fault (None for any other)."""
        if isinstance(fault, RateLimited):
            return _rate_limited(api, fault, key, self._scaled(fault.retry_after or 0.0))
        if isinstance(fault, ServerError):
            return _server_error(api, fault.status, key)
        if isinstance(fault, ContextLength):
            asked = fault.limit + 1 + size // 4
            if api == "openai":
                message = (
                    f"This model's maximum context length is {fault.limit} tokens. However, your messages "
                    f"resulted in {asked} tokens. Please reduce the length of the messages."
                )
                return api_error(api, 400, message, key=key, param="messages", code="context_length_exceeded")
            return api_error(api, 400, f"prompt is too long: {asked} tokens > {fault.limit} maximum", key=key)
        if isinstance(fault, ContentFilter):
            if api == "openai":
                message = (
                    "The response was filtered due to the prompt triggering the content management "
                    "policy. Please modify your prompt and retry."
                )
                return api_error(api, 400, message, key=key, param="prompt", code="content_filter")
            return api_error(api, 400, "Output blocked by content filtering policy", key=key)
        return None

    async def _hang(self, receive: Receive, fault: Hang) -> bool:
        """Hold the request; True when the client gave up first."""
        gone = False
        async with anyio.create_task_group() as group:

            async def client_gone() -> None:
                nonlocal gone
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone = True
                group.cancel_scope.cancel()

            group.start_soon(client_gone)
            if fault.seconds is None:
                await anyio.sleep_forever()
            else:
                await self.settings.sleep(self._scaled(fault.seconds))
            group.cancel_scope.cancel()
        return gone

    async def _send_empty(
        self, send: Send, api: Api, stream: bool, model: str, key: str, outcome: _Outcome
    ) -> None:
        answer = Answer(id=_answer_id(api, key), model=model)
        outcome.status, outcome.detail = 200, "empty answer sent by the gateway"
        if not stream:
            await _send_whole(
                send, 200, [(b"content-type", b"application/json")], dumps(render(api, answer)).encode()
            )
            return
        await send({"type": "http.response.start", "status": 200, "headers": _sse_headers()})
        for event in render_stream(api, answer):
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: Headers,
        body: bytes,
        fault: ModelFaultBase | None,
        outcome: _Outcome,
        api: Api | None,
    ) -> None:
        """The upstream's answer to the request, with ``fault`` applied to a successful one."""
        query = scope.get("query_string", b"").decode("latin-1")
        url = upstream_url(self.settings.upstream, scope["path"], query)
        forwarded = [(k, v) for k, v in headers.items() if k.lower() not in _HOP_BY_HOP]
        forwarded.append(("accept-encoding", "identity"))
        client = self._client()
        request = client.build_request(scope["method"], url, content=body, headers=forwarded)
        key = api or _shape_of(scope["path"], headers)
        try:
            response = await client.send(request, stream=True)
        except httpx2.TimeoutException:
            outcome.status, outcome.detail = 504, "the upstream did not answer in time (not injected)"
            await _send_error(send, api_error(key, 504, "the upstream did not answer in time", key=url))
            return
        except httpx2.HTTPError as exc:
            outcome.status = 502
            outcome.detail = f"the upstream is unreachable (not injected): {type(exc).__name__}"
            await _send_error(send, api_error(key, 502, "the upstream is unreachable", key=url))
            return
        try:
            outcome.upstream_status = response.status_code
            await self._answer(receive, send, response, fault, outcome, api)
        except httpx2.HTTPError as exc:
            outcome.detail = f"the upstream's answer broke off (not injected): {type(exc).__name__}"
            await close_connection(receive)
        finally:
            await response.aclose()

    async def _answer(
        self,
        receive: Receive,
        send: Send,
        response: httpx2.Response,
        fault: ModelFaultBase | None,
        outcome: _Outcome,
        api: Api | None,
    ) -> None:
        status = response.status_code
        outcome.status = status
        content_type = response.headers.get("content-type", "")
        applies = fault is not None and api is not None and status == 200
        if fault is not None and not applies:
            outcome.detail = f"not applied: the upstream answered {status}"
        if not applies or api is None:
            await _until_gone(receive, outcome, self._pass(send, response))
        elif content_type.startswith("text/event-stream"):
            await _until_gone(
                receive, outcome, self._relay_stream(receive, send, response, fault, api, outcome)
            )
        else:
            await self._relay_whole(receive, send, response, fault, api, outcome)

    async def _pass(self, send: Send, response: httpx2.Response) -> None:
        """The upstream's answer, byte for byte, piece by piece as it arrives."""
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": _back(response, raw=True),
            }
        )
        async for chunk in response.aiter_raw():
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _relay_stream(
        self,
        receive: Receive,
        send: Send,
        response: httpx2.Response,
        fault: ModelFaultBase | None,
        api: Api,
        outcome: _Outcome,
    ) -> None:
        """A stream, event by event as the upstream sends them, changed as ``fault`` says."""
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": _back(response, raw=False),
            }
        )
        first_delay = self._scaled(fault.seconds) if isinstance(fault, SlowFirstToken) else 0.0
        event_delay = self._scaled(fault.seconds) if isinstance(fault, SlowTokens) else 0.0
        tamper = stream_tamper(api, fault)
        splitter = EventSplitter() if tamper is not None or event_delay else None
        sent_any = False

        async def act(actions: list[Action]) -> bool:
            """Send ``actions``; True when the answer ended (cut, or finished early)."""
            nonlocal sent_any
            for action in actions:
                if isinstance(action, Finish):
                    outcome.detail = "ended early by the fault"
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return True
                if not sent_any and first_delay:
                    await self.settings.sleep(first_delay)
                if event_delay:
                    await self.settings.sleep(event_delay)
                sent_any = True
                if isinstance(action, Cut):
                    await send({"type": "http.response.body", "body": action.partial, "more_body": True})
                    outcome.detail = "connection closed mid-answer"
                    await close_connection(receive)
                    return True
                await send({"type": "http.response.body", "body": action, "more_body": True})
            return False

        async for chunk in response.aiter_bytes():
            if not chunk:
                continue
            if splitter is None:
                if await act([chunk]):
                    return
                continue
            for event in splitter.feed(chunk):
                if await act(tamper.on_event(event) if tamper is not None else [event]):
                    return
        if splitter is not None:
            rest = splitter.rest()
            if await act(tamper.on_end(rest) if tamper is not None else ([rest] if rest else [])):
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _relay_whole(
        self,
        receive: Receive,
        send: Send,
        response: httpx2.Response,
        fault: ModelFaultBase | None,
        api: Api,
        outcome: _Outcome,
    ) -> None:
        """A whole (non-streamed) answer, changed as ``fault`` says."""
        body = await response.aread()
        headers = _back(response, raw=False)
        if isinstance(fault, SlowFirstToken):
            await self.settings.sleep(self._scaled(fault.seconds))
        if isinstance(fault, StreamCut):
            cut = cut_body(api, fault, body)
            start_headers = [*headers, (b"content-length", str(cut.length).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": start_headers})
            await send({"type": "http.response.body", "body": cut.partial, "more_body": True})
            await close_connection(receive)
            outcome.detail = "connection closed mid-answer"
            return
        if isinstance(fault, MalformedEvent):
            body = malformed_body(body)
        elif isinstance(fault, ToolArguments | MaxTokens):
            parsed = read_json(body)
            if parsed is not None:
                body = dumps(tamper_body(api, fault, parsed)).encode()
        if isinstance(fault, SlowTokens):
            await send({"type": "http.response.start", "status": 200, "headers": [*headers, _length(body)]})
            size = max(1, math.ceil(len(body) / SLOW_PIECES))
            for start in range(0, len(body), size):
                await self.settings.sleep(self._scaled(fault.seconds))
                await send(
                    {"type": "http.response.body", "body": body[start : start + size], "more_body": True}
                )
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await _send_whole(send, 200, headers, body)


async def _until_gone(receive: Receive, outcome: _Outcome, relay: Coroutine[Any, Any, None]) -> None:
    """Run ``relay`` (an answer streaming back) unless the client goes away first.

    A client that leaves mid-answer stops the upstream's answer too (its tokens would be spent for
    nobody); the server reports the closed connection through ``receive``.
    """
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            outcome.detail = outcome.detail or "the client went away mid-answer"
            group.cancel_scope.cancel()

        group.start_soon(watch)
        await relay
        group.cancel_scope.cancel()


def _length(body: bytes) -> tuple[bytes, bytes]:
    return (b"content-length", str(len(body)).encode())


#: Response headers not passed back when the gateway re-frames the body (it sets its own).
_REFRAMED = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive"})


def _back(response: httpx2.Response, *, raw: bool) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers for the client (byte-exact framing kept when ``raw``)."""
    dropped = {"transfer-encoding", "connection", "keep-alive"} if raw else _REFRAMED
    return [(k, v) for k, v in response.headers.raw if k.decode("latin-1").lower() not in dropped]


def _sse_headers() -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


async def _send_whole(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    framed = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    await send({"type": "http.response.start", "status": status, "headers": [*framed, _length(body)]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _send_error(send: Send, error: ApiError) -> None:
    await send({"type": "http.response.start", "status": error.status, "headers": error.raw_headers()})
    await send({"type": "http.response.body", "body": error.body, "more_body": False})


async def _read_body(receive: Receive) -> bytes | None:
    """The request body (None when it is over `MAX_BODY_BYTES`)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message: Message = await receive()
        if message["type"] != "http.request":
            return b"".join(parts)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


def _shape_of(path: str, headers: Headers) -> Api:
    """The API whose error shape a request gets: Anthropic's for its paths or its version header."""
    if path.startswith("/v1/messages") or "anthropic-version" in headers:
        return "anthropic"
    return "openai"


def _answer_id(api: Api, key: str) -> str:
    rid = request_id(api, key)[4:]
    return f"chatcmpl-{rid}" if api == "openai" else f"msg_{rid}"


def _rate_limited(api: Api, fault: RateLimited, key: str, retry_after: float) -> ApiError:
    """429 with the vendor's rate-limit headers; ``retry-after`` (and ``-ms``) when the fault sets one."""
    headers: list[tuple[str, str]] = []
    if fault.retry_after is not None:
        seconds = f"{retry_after:g}" if retry_after != math.ceil(retry_after) else str(math.ceil(retry_after))
        headers += [("retry-after", seconds), ("retry-after-ms", str(round(retry_after * 1000)))]
    if api == "openai":
        headers += [
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", f"{retry_after:g}s"),
        ]
        message = "Rate limit reached for requests. Please try again later."
        return api_error(
            api,
            429,
            message,
            key=key,
            openai_type="requests",
            code="rate_limit_exceeded",
            headers=tuple(headers),
        )
    headers += [("anthropic-ratelimit-requests-limit", "60"), ("anthropic-ratelimit-requests-remaining", "0")]
    message = "Number of requests has exceeded your rate limit. Please try again later."
    return api_error(api, 429, message, key=key, headers=tuple(headers))


#: (OpenAI message, OpenAI type, Anthropic message) of each server error status.
_SERVER_ERRORS: dict[int, tuple[str, str, str]] = {
    500: (
        "The server had an error while processing your request. Sorry about that!",
        "server_error",
        "Internal server error",
    ),
    502: ("Bad gateway.", "cf_bad_gateway", "Bad gateway"),
    503: (
        "The engine is currently overloaded, please try again later.",
        "server_error",
        "Service unavailable",
    ),
    529: ("The server is overloaded, please try again later.", "server_error", "Overloaded"),
}


def _server_error(api: Api, status: int, key: str) -> ApiError:
    openai_message, openai_type, anthropic_message = _SERVER_ERRORS[status]
    if api == "openai":
        code: int | None = status if status == 502 else None
        return api_error(api, status, openai_message, key=key, openai_type=openai_type, code=code)
    return api_error(api, status, anthropic_message, key=key)
