"""Connecting to an upstream MCP server: start or dial it, notice when it goes away, say why in one line."""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TextIO

import anyio
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import ErrorData, JSONRPCError, JSONRPCRequest, JSONRPCResponse, RequestId
from pydantic import BaseModel, ConfigDict, ValidationError

from mcp_resili.errors import UserError, plain_validation_error
from mcp_resili.faults import ToolOutcome
from mcp_resili.tools import ToolSpec, ToolState
from mcp_resili.trace.codes import UPSTREAM_CLOSED

UPSTREAM_ERROR = "UPSTREAM_ERROR"
#: The upstream did not answer a call within the proxy's own timeout (``proxy --call-timeout``).
UPSTREAM_TIMEOUT = "UPSTREAM_TIMEOUT"
#: The upstream answered a call with a result no MCP client can read (it breaks the schema).
UPSTREAM_INVALID_RESULT = "UPSTREAM_INVALID_RESULT"
#: How long the upstream may take to answer ``initialize`` (and, for `check`, any request).
CONNECT_TIMEOUT = 30.0


class RawResult(BaseModel):
    """A JSON-RPC result kept exactly as the upstream sent it (every key an extra)."""

    model_config = ConfigDict(extra="allow")

    def raw(self) -> dict[str, Any]:
        """The result's JSON object."""
        return dict(self.model_extra or {})


class UpstreamError(UserError):
    """An upstream that cannot be used: not startable, unreachable, died, or not answering; one line."""


@dataclass
class WireTap:
    """What the upstream's read stream showed: its end, the last raw result, lines that were no JSON-RPC."""

    closed: anyio.Event = field(default_factory=anyio.Event)
    #: The ``result`` object of the last response, as sent (a check reads listings the SDK refuses).
    last_result: dict[str, Any] | None = None
    #: Messages the transport could not parse (e.g. a server printing to stdout), first few only.
    unparsed: list[str] = field(default_factory=list)
    #: The target while connecting (None once ``initialize`` is answered): a server that prints
    #: something that is no JSON-RPC on stdout then must answer within `JUNK_GRACE` seconds, or the
    #: connection ends with one line saying what it printed (`junk_error`), rather than after the
    #: whole connect timeout. A banner followed by a proper answer is tolerated (careless, not broken).
    strict: str | None = None
    #: Seconds the ``server/discover`` probe of an ``auto`` connection waits (None: the SDK's own
    #: fixed wait). A probe left unanswered then reads as a timeout, and the SDK goes on to the
    #: handshake: ``--connect-timeout`` bounds every step of the start, the probe too.
    probe_timeout: float | None = None
    #: The unanswered probe: its request id and the time its answer is due.
    _probe: tuple[RequestId, float] | None = field(default=None, init=False, repr=False)
    #: The read stream's wait in progress, if any (woken when a probe starts, to bound it).
    waiting: anyio.CancelScope | None = field(default=None, init=False, repr=False)

    def see(self, item: object) -> None:
        """Note one item read from the upstream."""
        if isinstance(item, SessionMessage):
            message = item.message
            if isinstance(message, JSONRPCResponse):
                self.last_result = message.result
            answer = message if isinstance(message, JSONRPCResponse | JSONRPCError) else None
            if self._probe is not None and answer is not None and answer.id == self._probe[0]:
                self._probe = None
        elif isinstance(item, Exception) and len(self.unparsed) < MAX_UNPARSED:
            self.unparsed.append(_unparsed_text(item))

    def sent(self, item: object) -> None:
        """Note one item written to the upstream (the discover probe starts its clock)."""
        if (
            self.probe_timeout is not None
            and isinstance(item, SessionMessage)
            and isinstance(item.message, JSONRPCRequest)
            and item.message.method == "server/discover"
        ):
            self._probe = (item.message.id, anyio.current_time() + self.probe_timeout)
            if self.waiting is not None:
                self.waiting.cancel()

    def probe_due(self) -> float:
        """The time the unanswered discover probe's answer is due (infinity when none is)."""
        return math.inf if self._probe is None else self._probe[1]

    def probe_timed_out(self) -> SessionMessage:
        """The timeout answer for the unanswered probe (what the SDK's own wait would have raised)."""
        assert self._probe is not None
        probe_id, self._probe = self._probe[0], None
        said = f"server/discover got no answer within {self.probe_timeout:g} s"
        error = ErrorData(code=types.REQUEST_TIMEOUT, message=said)
        return SessionMessage(JSONRPCError(jsonrpc="2.0", id=probe_id, error=error))

    def junk_error(self) -> UpstreamError:
        """The one line for a server that printed junk and then gave no answer."""
        return UpstreamError(
            f"the server {self.strict!r} wrote something that is not JSON-RPC on its stdout and then did "
            f"not answer initialize within {JUNK_GRACE:g} s (a server must log to stderr): "
            f"{(self.unparsed or [''])[0][:120]!r}"
        )


class _QuietParseErrors(logging.Filter):
    """Drops the SDK's parse-error log (with its traceback): the `WireTap` reports such lines itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to parse JSONRPC message")


_QUIET = _QuietParseErrors()


MAX_UNPARSED = 5
#: Seconds a connecting server that printed junk on stdout still has to answer ``initialize``.
JUNK_GRACE = 2.0


def _unparsed_text(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        for error in exc.errors():
            if isinstance(error.get("input"), str):
                return str(error["input"])[:200]
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


class _WatchedStream:
    """One of the transport's streams, reporting what passes to a `WireTap`."""

    def __init__(self, stream: Any, tap: WireTap) -> None:
        self._stream = stream
        self._tap = tap

    async def aclose(self) -> None:
        """Close the wrapped stream."""
        await self._stream.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _WatchedReadStream(_WatchedStream):
    """The transport's read stream: what it reads, and its end, go to the `WireTap`."""

    @property
    def last_context(self) -> Any:
        """The sender's context, when the wrapped stream carries one (the SDK reads it duck-typed)."""
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        """The next message; the end of the stream marks the upstream closed."""
        tap = self._tap
        # Junk seen while connecting: the answer must come soon, or the server is broken.
        junk_due = anyio.current_time() + JUNK_GRACE if tap.strict is not None and tap.unparsed else math.inf
        try:
            while True:
                due = min(junk_due, tap.probe_due())
                with anyio.CancelScope(deadline=due) as waiting:
                    tap.waiting = waiting  # a probe sent meanwhile wakes this wait to start its clock
                    try:
                        item: SessionMessage | Exception = await self._stream.receive()
                    finally:
                        tap.waiting = None
                if not waiting.cancelled_caught:
                    break
                now = anyio.current_time()
                if now >= junk_due:
                    raise tap.junk_error()
                if now >= tap.probe_due():
                    return tap.probe_timed_out()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            tap.closed.set()
            raise
        tap.see(item)
        return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aexit__(self, *exc_info: object) -> None:
        self._tap.closed.set()
        await super().__aexit__(*exc_info)


class _WatchedWriteStream(_WatchedStream):
    """The transport's write stream: what it sends goes to the `WireTap` first."""

    async def send(self, item: SessionMessage) -> None:
        """Send ``item`` on, noting it first."""
        self._tap.sent(item)
        await self._stream.send(item)

    def close(self) -> None:
        """Close the wrapped stream without waiting."""
        self._stream.close()


@asynccontextmanager
async def _watched(transport: Any, tap: WireTap) -> AsyncIterator[tuple[Any, Any]]:
    async with transport as (read, write):
        yield _WatchedReadStream(read, tap), _WatchedWriteStream(write, tap)


@dataclass
class Upstream:
    """A connected upstream: its client and what its wire showed (`WireTap`: closed, raw results)."""

    client: Client
    target: str
    tap: WireTap = field(default_factory=WireTap)
    stderr_path: Path | None = None

    @property
    def closed(self) -> anyio.Event:
        """Set once the upstream's connection has ended (it exited or hung up)."""
        return self.tap.closed

    def stderr_tail(self) -> str:
        """The last line the upstream wrote to stderr, when it was captured ('' otherwise)."""
        return _last_line(self.stderr_path)

    def lost(self, during: str = "") -> UpstreamError:
        """The error for an upstream that closed the connection (exited, crashed or hung up)."""
        return UpstreamError(_closed_reason(self.target, during, self.stderr_tail()))


def _last_line(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _closed_reason(target: str, during: str, tail: str) -> str:
    when = f" during {during}" if during else ""
    said = f"; its last stderr line: {tail}" if tail else ""
    return f"the server {target!r} closed the connection{when} (it exited or crashed){said}"


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def connection_failure(
    exc: BaseException, target: str, *, during: str = "", stderr_tail: str = ""
) -> str | None:
    """One line saying why ``target`` could not be used, or None when ``exc`` is not a connection failure.

    ``exc`` may be an exception group (the SDK's task groups wrap what went wrong).
    """
    for leaf in _leaves(exc):
        if isinstance(leaf, UpstreamError):
            return str(leaf)
        if isinstance(leaf, FileNotFoundError):
            return f"cannot start the server {target!r}: command not found"
        if isinstance(leaf, PermissionError):
            return f"cannot start the server {target!r}: permission denied"
        if isinstance(leaf, MCPError) and leaf.code == types.CONNECTION_CLOSED:
            return _closed_reason(target, during, stderr_tail)
        if isinstance(leaf, TimeoutError) or (
            isinstance(leaf, MCPError) and leaf.code == types.REQUEST_TIMEOUT
        ):
            return f"the server {target!r} did not answer{f' {during}' if during else ''} in time"
        if isinstance(leaf, httpx2.HTTPStatusError):
            status = f"{leaf.response.status_code} {leaf.response.reason_phrase}"
            return f"the server {target!r} answered HTTP {status}"
        if isinstance(leaf, httpx2.TransportError):
            return f"cannot connect to {target!r}: {str(leaf) or type(leaf).__name__}"
        if isinstance(leaf, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)):
            return _closed_reason(target, during, stderr_tail)
        if isinstance(leaf, OSError):
            return f"cannot reach the server {target!r}: {leaf.strerror or leaf}"
    return None


@asynccontextmanager
async def entered(client: Client, target: str) -> AsyncIterator[Client]:
    """``async with client``, where failing to start, reach or initialize ``target`` is `UpstreamError`.

    Only entering is translated: errors once connected are the caller's to handle.
    """
    stack = AsyncExitStack()
    try:
        await stack.enter_async_context(client)
    except Exception as exc:
        reason = connection_failure(exc, target, during="initialize")
        if reason is None:
            raise
        raise UpstreamError(reason) from None
    async with stack:
        yield client


def _stdio_params(
    target: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> StdioServerParameters:
    try:
        argv = shlex.split(target)
    except ValueError as exc:
        raise UpstreamError(f"cannot parse the server command {target!r}: {exc}") from None
    if not argv:
        raise UpstreamError("the server command is empty")
    return StdioServerParameters(
        command=argv[0], args=argv[1:], env=dict(os.environ if env is None else env), cwd=cwd
    )


@asynccontextmanager
async def connect_upstream(
    target: str,
    *,
    read_timeout_seconds: float | None = CONNECT_TIMEOUT,
    capture_stderr: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    mode: str = "legacy",
    **client_options: Any,
) -> AsyncIterator[Upstream]:
    """Connect to ``target``: an ``http(s)://`` URL, or a command line started over stdio.

    A proxied command gets the proxy's whole environment: it is the user's own server on the user's
    machine, and many servers need their own variables (we never record them). With ``capture_stderr``
    the command's stderr goes to a temporary file (quoted when it dies) instead of ours.
    ``client_options`` go to `mcp.Client` (callbacks). Any failure to start, reach or keep the
    connection is raised as `UpstreamError` with one line saying why. ``env`` replaces the inherited
    environment of a started command (a benchmark's servers get only what they need), ``cwd`` sets
    its working directory. ``mode`` is the `mcp.Client` mode (``legacy``: the handshake era; ``auto``:
    2026-07-28 when the upstream speaks it; its ``server/discover`` probe waits at most
    ``read_timeout_seconds`` too, not the SDK's fixed wait). Until the upstream has answered
    ``initialize``, anything on its stdout that is not JSON-RPC fails the connection at once, in one
    line.
    """
    tap = WireTap(strict=target, probe_timeout=read_timeout_seconds if mode == "auto" else None)
    logging.getLogger("mcp.client.stdio").addFilter(_QUIET)
    with tempfile.TemporaryDirectory(prefix="mcp-resili-upstream-") as scratch:
        stderr_path = Path(scratch) / "stderr.log" if capture_stderr else None
        upstream: Upstream | None = None
        try:
            guard: AnswerLostConnections | None = None
            if target.startswith(("http://", "https://")):
                # An upstream killed mid-call fails that call (`UPSTREAM_CLOSED`), not the session.
                transport, guard = guarded_http_transport(target)
                errlog: TextIO | None = None
            else:
                params = _stdio_params(target, env, cwd)
                errlog = stderr_path.open("w", encoding="utf-8") if stderr_path is not None else None
                # sys.stderr as it is now (the SDK's default is the one it saw at import).
                transport = stdio_client(params, errlog=errlog if errlog is not None else sys.stderr)
            try:
                client = Client(
                    _watched(transport, tap),
                    read_timeout_seconds=read_timeout_seconds,
                    mode=mode,
                    **client_options,
                )
                async with client:
                    tap.strict = None  # connected: later junk is reported, the session goes on
                    if guard is not None:
                        guard.armed = True
                    upstream = Upstream(client, target, tap, stderr_path)
                    yield upstream
            finally:
                if errlog is not None:
                    errlog.close()
        except Exception as exc:
            # The SDK's task groups wrap what went wrong: the caller's own one-line errors come first.
            user_error = next((leaf for leaf in _leaves(exc) if isinstance(leaf, UserError)), None)
            if user_error is not None:
                raise user_error from None
            if upstream is not None and not tap.closed.is_set() and not _connection_lost(exc):
                raise  # the caller's own error, not the upstream's
            during = "" if upstream is not None else "initialize"
            reason = connection_failure(exc, target, during=during, stderr_tail=_last_line(stderr_path))
            if reason is None:
                raise
            raise UpstreamError(reason) from None


def _connection_lost(exc: BaseException) -> bool:
    lost = (anyio.ClosedResourceError, anyio.BrokenResourceError, httpx2.TransportError)
    return any(
        isinstance(leaf, lost) or (isinstance(leaf, MCPError) and leaf.code == types.CONNECTION_CLOSED)
        for leaf in _leaves(exc)
    )


#: A request whose params are sent as given (the unparametrised generic would drop them).
_RawRequest = types.Request[dict[str, Any] | None, str]


async def forward(
    client: Client,
    method: str,
    params: Mapping[str, Any] | None,
    *,
    on_progress: ProgressFnT | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Send ``method`` with ``params`` to the upstream and return its raw result, unchanged.

    ``timeout``: seconds to wait for the answer, then `MCPError` ``REQUEST_TIMEOUT`` (the proxy's own
    limit, so that a client without one never waits forever); None waits as long as the client does
    (cancelling reaches upstream).
    """
    request = _RawRequest(method=method, params=dict(params) if params is not None else None)
    result = await client.session.send_request(
        request,
        RawResult,
        request_read_timeout_seconds=float("inf") if timeout is None else timeout,
        progress_callback=on_progress,
    )
    return result.raw()


async def list_all_tools(client: Client) -> list[types.Tool]:
    """Every tool of the upstream, following pagination."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def spec_of(tool: Mapping[str, Any]) -> ToolSpec:
    """A `ToolSpec` view of an upstream tool's raw JSON, taken as is (its schemas are its business)."""
    annotations = tool.get("annotations") if isinstance(tool.get("annotations"), dict) else {}
    schema = tool.get("inputSchema")
    output = tool.get("outputSchema")
    return ToolSpec.model_construct(
        name=str(tool.get("name", "")),
        description=str(tool.get("description") or ""),
        input_schema=dict(schema) if isinstance(schema, dict) else {"type": "object"},
        output_schema=dict(output) if isinstance(output, dict) else None,
        errors=(),
        dependencies=(),
        category="upstream",
        operation="",
        access="read" if (annotations or {}).get("readOnlyHint") else "write",
    )


def result_text(result: Mapping[str, Any]) -> str:
    """The text blocks of a raw ``CallToolResult``, joined."""
    content = result.get("content")
    blocks = content if isinstance(content, list) else []
    return "\n".join(
        str(block.get("text", ""))
        for block in blocks
        if isinstance(block, dict) and block.get("type") == "text"
    )


#: Reserved ``_meta`` keys that belong to one hop (the SDK stamps its own on the upstream connection).
_HOP_META_PREFIX = "io.modelcontextprotocol/"


def upstream_params(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The client's params as forwarded: this hop's reserved ``_meta`` keys and progress token removed.

    The progress token is the client's; the upstream request gets the proxy's own and progress is
    relayed back under the client's token.
    """
    if params is None:
        return None
    forwarded = dict(params)
    meta = forwarded.get("_meta")
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if not k.startswith(_HOP_META_PREFIX) and k != "progressToken"}
        if kept:
            forwarded["_meta"] = kept
        else:
            del forwarded["_meta"]
    return forwarded


@dataclass(frozen=True)
class ForwardedCall:
    """The ``tools/call`` being handled, as the client sent it, where its progress goes, and to whom.

    ``client``: the upstream session of the client behind (one per client); None: the backend's own.
    """

    params: Mapping[str, Any]
    on_progress: ProgressFnT | None = None
    client: Client | None = None


#: The call the proxy is handling in this task: `UpstreamBackend.run` forwards it as sent (the pipeline
#: in between only knows the tool name and arguments).
FORWARDED_CALL: ContextVar[ForwardedCall | None] = ContextVar("mcp_resili_forwarded_call", default=None)


class UpstreamBackend:
    """Runs calls on the upstream server ``target`` (the proxy's `ToolBackend`)."""

    def __init__(
        self,
        client: Client | None,
        specs: Sequence[ToolSpec] = (),
        *,
        target: str = "upstream",
        call_timeout: float | None = None,
    ) -> None:
        self.client = client
        self.target = target
        self._specs = list(specs)
        #: Seconds an upstream call may take before it is the call's `UPSTREAM_TIMEOUT` error.
        self.call_timeout = call_timeout

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """The upstream tools known when the pipeline was built."""
        return self._specs

    def run_inline(
        self, spec: ToolSpec, arguments: dict[str, Any], state: ToolState, json_bytes: int | None = None
    ) -> ToolOutcome | None:
        """None: every upstream call awaits its answer."""
        return None

    async def run(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        state: ToolState,
        meta: Mapping[str, Any] | None = None,
    ) -> ToolOutcome:
        """Forward the call; the upstream's raw result is kept for the agent while no fault touches it.

        An upstream that closed the connection (before or during the call) is the call's error, not
        the proxy's: `UPSTREAM_CLOSED`, saying so.
        """
        call = FORWARDED_CALL.get()
        client = call.client if call is not None and call.client is not None else self.client
        if call is not None and call.params.get("name") == spec.name:
            params, on_progress = call.params, call.on_progress
        else:
            params, on_progress = {"name": spec.name, "arguments": arguments}, None
        if client is None:
            return ToolOutcome(structured=None, error_code=UPSTREAM_CLOSED, message="no upstream session")
        try:
            result = await forward(
                client, "tools/call", params, on_progress=on_progress, timeout=self.call_timeout
            )
        except ValidationError as exc:  # no client could read it: the call fails, and is recorded
            return ToolOutcome(
                structured=None,
                error_code=UPSTREAM_INVALID_RESULT,
                message=f"{spec.name}'s result breaks the MCP schema: {plain_validation_error(exc)}",
            )
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                reason = _closed_reason(self.target, "", "")
                return ToolOutcome(structured=None, error_code=UPSTREAM_CLOSED, message=reason)
            if exc.code == types.REQUEST_TIMEOUT and self.call_timeout is not None:
                return ToolOutcome(
                    structured=None,
                    error_code=UPSTREAM_TIMEOUT,
                    message=f"the server {self.target!r} did not answer {spec.name} within "
                    f"{self.call_timeout:g} s (the proxy's --call-timeout)",
                )
            # The upstream's JSON-RPC error is its answer: recorded, then passed on as it came.
            return ToolOutcome(
                structured=None, error_code=f"JSONRPC_{exc.code}", message=exc.error.message, upstream=exc
            )
        if result.get("isError"):
            return ToolOutcome(
                structured=None, error_code=UPSTREAM_ERROR, message=result_text(result), upstream=result
            )
        structured = result.get("structuredContent")
        if not isinstance(structured, dict):
            structured = {"text": result_text(result)}
        return ToolOutcome(structured=dict(structured), upstream=result)


class AnswerLostConnections(httpx2.AsyncBaseTransport):
    """An HTTP transport that answers a request whose connection broke with a JSON-RPC error.

    The SDK's Streamable HTTP client lets a transport error of a POST (the server killed, the
    connection reset) escape its task group: that ends the whole client, every episode in flight with
    it, in a traceback. Answered as ``CONNECTION_CLOSED`` under the request's id instead, only the
    request fails, as it does over stdio, and the runner counts its episode as an infrastructure
    error. Set ``armed`` once the session is up: until then a server that cannot be reached at all is
    reported as such (`entered`).
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.inner = inner if inner is not None else httpx2.AsyncHTTPTransport()
        self.armed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request``; once armed, a broken POST comes back as a 502 with a JSON-RPC error.

        A JSON answer is read here, whole: the connection can also break after its headers (a reset
        mid-body), which the SDK would meet outside any request. An event stream is left to stream:
        the SDK resolves a request whose stream breaks.
        """
        if not self.armed or request.method != "POST":
            return await self.inner.handle_async_request(request)
        try:
            response = await self.inner.handle_async_request(request)
            if not response.headers.get("content-type", "").lower().startswith("application/json"):
                return response
            try:
                body = b"".join([chunk async for chunk in response.aiter_raw()])
            finally:
                await response.aclose()
        except httpx2.TransportError as exc:
            error = {
                "code": types.CONNECTION_CLOSED,
                "message": f"Connection closed: {_transport_error(exc)}",
            }
            answer = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
            return httpx2.Response(
                502, headers={"content-type": "application/json"}, content=answer, request=request
            )
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            content=body,
            request=request,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.inner.aclose()


def _transport_error(exc: httpx2.TransportError) -> str:
    detail = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def guarded_http_transport(
    url: str, headers: Mapping[str, str] | None = None
) -> tuple[Any, AnswerLostConnections]:
    """A Streamable HTTP transport for ``url`` whose broken requests fail alone (`AnswerLostConnections`).

    ``headers`` go with every request (e.g. the bearer token of a server that wants one).
    """
    guard = AnswerLostConnections()
    return _guarded_streams(url, guard, headers or {}), guard


@asynccontextmanager
async def _guarded_streams(
    url: str, guard: AnswerLostConnections, headers: Mapping[str, str]
) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    async with (
        httpx2.AsyncClient(transport=guard, timeout=timeout, headers=dict(headers)) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams
