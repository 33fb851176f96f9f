"""The fault gateway (``mcp-resili llm-proxy``): any OpenAI- or Anthropic-compatible endpoint, with faults.

Every request is forwarded to the upstream as it came (the caller's ``Authorization`` or ``x-api-key``
included, untouched, and never stored); answers come back as the upstream sends them, a stream event
by event as it arrives. A model call (``POST /v1/chat/completions`` or ``/v1/messages``) is first
decided by the fault plan: ordinal ``n`` of its episode (`ledger`), RNG from (seed, fault key,
`MODEL_CALL`, ``n``), first matching rule. The decision, and what the client got, is one
`ModelFaultEvent` in the episode's trace file. Other paths (``/v1/models``...) pass through undecided.

Delays (``hang``, ``slow_first_token``, ``slow_tokens``, ``retry-after``) are multiplied by the time
scale. A failure nobody injected (the upstream unreachable or timing out) is answered 502/504 in the
API's shape and recorded as such, never as a fault. A client that goes away ends its request here and
upstream (its answer's tokens would be spent for nobody).

It is served by aiohttp, both ways: a proxy's cost is HTTP parsing and framing, which aiohttp does in
C, and its handlers hold their connection (a reset, a cut mid-answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import math
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import aiohttp
import anyio
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from mcp_resili.constants import EPISODE_HEADER
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
    request_head,
    request_id,
)
from mcp_resili.modelapi.hosting import base_url
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
#: Request headers that describe one hop, not the request: never forwarded.
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
#: Response headers the gateway frames itself when it changes or re-frames an answer.
_FRAMING = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive"})
#: Largest request body accepted (the model APIs' own limits are of this order).
MAX_BODY_BYTES = 32 * 1024 * 1024
#: A whole answer under ``slow_tokens`` arrives in this many pieces.
SLOW_PIECES = 8

Sleeper = Callable[[float], Awaitable[None]]


#: Seconds an idle upstream connection is kept for reuse (below uvicorn's default 5 s keep-alive).
UPSTREAM_KEEPALIVE_SECONDS = 3.0


class CallWatch(Protocol):
    """Sees one model call as it happens: every byte its client is sent, then its ledger entry."""

    def sent(self, data: bytes) -> None:
        """Bytes of the answer, as they go to the client."""

    def recorded(self, event: ModelFaultEvent) -> None:
        """The call's ledger entry, once the call is over (answered, cut, or given up on)."""


#: Given a model call's episode and request body, its watch (None: not watched). A runner that hosts
#: the gateway counts tokens and joins the ledger to its episode's trace this way (`GatewaySettings`).
Watcher = Callable[[CallEpisode, bytes], CallWatch | None]


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
    #: Watches each model call (its answer's bytes and its ledger entry), when set.
    watch: Watcher | None = None


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


class _HeldHeaders(web.StreamResponse):
    """A response whose headers go out in one write with the first piece of its body, not before it.

    aiohttp's own `web.Response` does this; a stream sends its headers at once, a write of its own
    (each write to the client is a system call and a wake-up of the client: a tenth of the gateway's
    CPU per call). On an aiohttp without the switch the headers just go first, as before.
    """

    _send_headers_immediately = False


class _Reply:
    """The client's side of one request: what was sent, and the connection-level acts."""

    def __init__(self, request: web.BaseRequest) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None
        #: Hears every byte sent (a `CallWatch`'s ``sent``), when set.
        self.tap: Callable[[bytes], None] | None = None

    async def start(
        self, status: int, headers: CIMultiDict[str], length: int | None = None, *, hold: bool = False
    ) -> None:
        """Send the status line and headers (a stream, or a body of ``length`` bytes).

        ``hold``: with the first piece of the body instead (which the caller has in hand, to send now).
        """
        response = (_HeldHeaders if hold else web.StreamResponse)(status=status, headers=headers)
        if length is not None:
            response.content_length = length
        self.response = response
        await response.prepare(self.request)

    async def write(self, data: bytes) -> None:
        """Send part of the body."""
        assert self.response is not None
        if self.tap is not None:
            self.tap(data)
        await self.response.write(data)

    async def end(self, last: bytes = b"") -> web.StreamResponse:
        """The body is complete (with ``last``, its last piece, sent in the same write)."""
        assert self.response is not None
        if last and self.tap is not None:
            self.tap(last)
        await self.response.write_eof(last)
        return self.response

    async def whole(self, status: int, headers: CIMultiDict[str], body: bytes) -> web.StreamResponse:
        """A whole answer at once (headers and body in one write)."""
        await self.start(status, headers, len(body), hold=True)
        return await self.end(body)

    async def error(self, error: ApiError) -> web.StreamResponse:
        """An error answer in its API's shape."""
        headers = CIMultiDict([("content-type", "application/json"), *error.headers])
        return await self.whole(error.status, headers, error.body)

    def close(self) -> web.StreamResponse:
        """Close the connection after what was sent so far: the answer ends mid-way."""
        transport = self.request.transport
        if transport is not None:
            transport.close()
        return self.response or web.StreamResponse()

    def reset(self) -> web.StreamResponse:
        """Reset the connection (TCP RST) before any byte: the client reads "connection reset by peer"."""
        transport = self.request.transport
        if transport is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    # Linger on, for zero seconds: closing sends RST instead of FIN.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        return web.StreamResponse()


class ModelGateway:
    """The fault gateway (see the module docstring); `serve` runs it on a socket."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self._ordinals = Ordinals()
        self._clients = ClientLabels()
        self._traces = TraceFiles(settings.trace_dir)
        self._token = settings.token.encode() if settings.token else None
        self._http: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=10.0, sock_read=self.settings.upstream_timeout
            )
            self._http = aiohttp.ClientSession(
                # An idle upstream connection is let go before common servers close it (uvicorn's
                # default, so vLLM's: 5 s), or a reused one can die under the next request.
                connector=aiohttp.TCPConnector(limit=1000, keepalive_timeout=UPSTREAM_KEEPALIVE_SECONDS),
                # A cookie one client's upstream answer set must never ride on another's request.
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=timeout,
                auto_decompress=False,
                trust_env=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
            )
        return self._http

    async def aclose(self) -> None:
        """Close the upstream connections and the trace files."""
        self._traces.close()
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def serve(self, sock: socket.socket, *, on_started: Callable[[str], object] | None = None) -> None:
        """Serve on ``sock`` until cancelled; ``on_started`` gets the base URL once it listens."""
        server = web.Server(self.handle, handler_cancellation=True, access_log=None)
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(server, sock=sock)
        try:
            if on_started is not None:
                on_started(base_url(sock))
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                listener.close()
                await server.shutdown(2.0)
                await self.aclose()

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Serve one request."""
        reply = _Reply(request)
        headers = request.headers
        shape = _shape_of(request.path, headers)
        if self._token is not None and not hmac.compare_digest(
            headers.get(TOKEN_HEADER, "").encode(), self._token
        ):
            return await reply.error(
                api_error(shape, 401, f"send the gateway's token in the {TOKEN_HEADER} header", key="token")
            )
        body = await _read_body(request)
        if body is None:
            return await reply.error(api_error(shape, 413, "request body too large", key="size"))
        api = api_of(request.path)
        if request.method != "POST" or api is None:
            return await self._forward(reply, body, None, _Outcome(), shape)
        return await self._model_call(reply, body, api)

    def _episode(self, headers: CIMultiDictProxy[str]) -> CallEpisode:
        named = headers.get(EPISODE_HEADER)
        if named is not None:
            return episode_from_header(named)
        label = self._clients.label(headers)
        return CallEpisode(label, label)

    async def _model_call(self, reply: _Reply, body: bytes, api: Api) -> web.StreamResponse:
        head = request_head(body)
        if head is None:  # not a model call the upstream can read: it answers it, undecided
            return await self._forward(reply, body, None, _Outcome(), api)
        try:
            episode = self._episode(reply.request.headers)
        except EpisodeHeaderError as exc:
            return await reply.error(bad_request(api, str(exc), key="episode"))
        stream = head.stream is True
        model = head.model if isinstance(head.model, str) else None
        ordinal = self._ordinals.take(episode.id)
        plan = self.settings.plan
        if plan.rules:
            seed = self.settings.seed if episode.seed is None else episode.seed
            decision = plan.decide(ordinal, api, stream, model_call_rng(seed, episode.fault_key, ordinal))
        else:
            decision = ModelFaultDecision(plan=plan.name, ordinal=ordinal)
        outcome = _Outcome()
        watch = self.settings.watch(episode, body) if self.settings.watch is not None else None
        if watch is not None:
            reply.tap = watch.sent
        try:
            return await self._deliver(
                reply, body, api, stream, model, decision.fault, f"{episode.fault_key}#{ordinal}", outcome
            )
        except asyncio.CancelledError:  # the client went away
            outcome.detail = outcome.detail or "the client went away mid-answer"
            raise
        finally:
            event = ModelFaultEvent(
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
            self._traces.write(event)
            if watch is not None:
                watch.recorded(event)

    def _scaled(self, seconds: float) -> float:
        return seconds * self.settings.time_scale

    async def _deliver(
        self,
        reply: _Reply,
        body: bytes,
        api: Api,
        stream: bool,
        model: str | None,
        fault: ModelFaultBase | None,
        key: str,
        outcome: _Outcome,
    ) -> web.StreamResponse:
        error = self._error_for(api, fault, key, len(body))
        if error is not None:
            outcome.status, outcome.detail = error.status, "answered by the gateway"
            return await reply.error(error)
        if isinstance(fault, ConnectionReset):
            outcome.detail = "connection reset before any byte"
            return reply.reset()
        if isinstance(fault, EmptyCompletion):
            return await self._send_empty(reply, api, stream, model or "", key, outcome)
        if isinstance(fault, Hang):
            outcome.detail = "the client gave up waiting for headers"  # unless the hang ends first
            if fault.seconds is None:
                await anyio.sleep_forever()
            await self.settings.sleep(self._scaled(fault.seconds or 0.0))
            outcome.detail = "answered after the hang"
        return await self._forward(reply, body, fault, outcome, api)

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

    async def _send_empty(
        self, reply: _Reply, api: Api, stream: bool, model: str, key: str, outcome: _Outcome
    ) -> web.StreamResponse:
        answer = Answer(id=_answer_id(api, key), model=model)
        outcome.status, outcome.detail = 200, "empty answer sent by the gateway"
        if not stream:
            json_type = CIMultiDict([("content-type", "application/json")])
            return await reply.whole(200, json_type, dumps(render(api, answer)).encode())
        await reply.start(200, _sse_headers())
        for event in render_stream(api, answer):
            await reply.write(event)
        return await reply.end()

    async def _forward(
        self, reply: _Reply, body: bytes, fault: ModelFaultBase | None, outcome: _Outcome, api: Api | None
    ) -> web.StreamResponse:
        """The upstream's answer to the request, with ``fault`` applied to a successful one."""
        request = reply.request
        path, _, query = request.raw_path.partition("?")
        url = URL(upstream_url(self.settings.upstream, path, query), encoded=True)
        forwarded = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP]
        forwarded.append(("accept-encoding", "identity"))
        shape = api or _shape_of(request.path, request.headers)
        try:
            async with self._client().request(request.method, url, data=body, headers=forwarded) as response:
                outcome.upstream_status = outcome.status = response.status
                applies = fault is not None and api is not None and response.status == 200
                if fault is not None and not applies:
                    outcome.detail = f"not applied: the upstream answered {response.status}"
                if not applies or api is None:
                    return await self._pass(reply, response)
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    return await self._relay_stream(reply, response, fault, api, outcome)
                return await self._relay_whole(reply, response, fault, api, outcome)
        except (TimeoutError, aiohttp.ServerTimeoutError):
            if reply.response is not None:
                outcome.detail = "the upstream stopped answering mid-way (not injected)"
                return reply.close()
            outcome.status, outcome.detail = 504, "the upstream did not answer in time (not injected)"
            return await reply.error(
                api_error(shape, 504, "the upstream did not answer in time", key=str(url))
            )
        except aiohttp.ClientError as exc:
            if reply.response is not None:
                if isinstance(exc, aiohttp.ClientConnectionResetError) and reply.request.transport is None:
                    outcome.detail = outcome.detail or "the client went away mid-answer"
                else:
                    outcome.detail = f"the upstream's answer broke off (not injected): {type(exc).__name__}"
                return reply.close()
            outcome.status = 502
            outcome.detail = f"the upstream is unreachable (not injected): {type(exc).__name__}"
            return await reply.error(api_error(shape, 502, "the upstream is unreachable", key=str(url)))

    async def _pass(self, reply: _Reply, response: aiohttp.ClientResponse) -> web.StreamResponse:
        """The upstream's answer, byte for byte, piece by piece as it arrives.

        What arrived with the upstream's headers goes out with the client's, and a piece the upstream
        ended its answer with goes out with the end: fewer writes, and never a wait for more bytes.
        """
        headers = _back(response, keep_framing=True)
        length = response.content_length if "content-length" in response.headers else None
        content = response.content
        arrived = content.read_nowait()
        await reply.start(response.status, headers, length, hold=bool(arrived))
        if arrived:
            if content.at_eof():
                return await reply.end(arrived)
            await reply.write(arrived)
        async for chunk in content.iter_any():
            if content.at_eof():
                return await reply.end(chunk)
            await reply.write(chunk)
        return await reply.end()

    async def _relay_stream(
        self,
        reply: _Reply,
        response: aiohttp.ClientResponse,
        fault: ModelFaultBase | None,
        api: Api,
        outcome: _Outcome,
    ) -> web.StreamResponse:
        """A stream, event by event as the upstream sends them, changed as ``fault`` says."""
        await reply.start(response.status, _back(response, keep_framing=False))
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
                    return True
                if not sent_any and first_delay:
                    await self.settings.sleep(first_delay)
                if event_delay:
                    await self.settings.sleep(event_delay)
                sent_any = True
                if isinstance(action, Cut):
                    await reply.write(action.partial)
                    outcome.detail = "connection closed mid-answer"
                    reply.close()
                    return True
                await reply.write(action)
            return False

        async for chunk in response.content.iter_any():
            events = [chunk] if splitter is None else splitter.feed(chunk)
            for event in events:
                if await act(tamper.on_event(event) if tamper is not None else [event]):
                    return (
                        reply.close() if outcome.detail.startswith("connection closed") else await reply.end()
                    )
        if splitter is not None:
            rest = splitter.rest()
            if await act(tamper.on_end(rest) if tamper is not None else ([rest] if rest else [])):
                return reply.close() if outcome.detail.startswith("connection closed") else await reply.end()
        return await reply.end()

    async def _relay_whole(
        self,
        reply: _Reply,
        response: aiohttp.ClientResponse,
        fault: ModelFaultBase | None,
        api: Api,
        outcome: _Outcome,
    ) -> web.StreamResponse:
        """A whole (non-streamed) answer, changed as ``fault`` says."""
        body = await response.read()
        headers = _back(response, keep_framing=False)
        if isinstance(fault, SlowFirstToken):
            await self.settings.sleep(self._scaled(fault.seconds))
        if isinstance(fault, StreamCut):
            cut = cut_body(api, fault, body)
            await reply.start(200, headers, cut.length)
            await reply.write(cut.partial)
            outcome.detail = "connection closed mid-answer"
            return reply.close()
        if isinstance(fault, MalformedEvent):
            body = malformed_body(body)
        elif isinstance(fault, ToolArguments | MaxTokens):
            parsed = read_json(body)
            if parsed is not None:
                body = dumps(tamper_body(api, fault, parsed)).encode()
        if isinstance(fault, SlowTokens):
            await reply.start(200, headers, len(body))
            size = max(1, math.ceil(len(body) / SLOW_PIECES))
            for start in range(0, len(body), size):
                await self.settings.sleep(self._scaled(fault.seconds))
                await reply.write(body[start : start + size])
            return await reply.end()
        return await reply.whole(200, headers, body)


def _back(response: aiohttp.ClientResponse, *, keep_framing: bool) -> CIMultiDict[str]:
    """The upstream's response headers for the client (its own length kept when ``keep_framing``)."""
    dropped = (
        {"transfer-encoding", "connection", "keep-alive", "content-length"} if keep_framing else _FRAMING
    )
    return CIMultiDict(
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in response.raw_headers
        if k.decode("latin-1").lower() not in dropped
    )


def _sse_headers() -> CIMultiDict[str]:
    return CIMultiDict([("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache")])


async def _read_body(request: web.BaseRequest) -> bytes | None:
    """The request body (None when it is over `MAX_BODY_BYTES`)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        parts.append(chunk)
    return b"".join(parts)


def _shape_of(path: str, headers: CIMultiDictProxy[str]) -> Api:
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
