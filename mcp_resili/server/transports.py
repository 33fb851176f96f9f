"""Run an MCP server of ours (a suite server or the proxy) over stdio or Streamable HTTP.

stdio speaks JSON-RPC 2.0 to the end: a line that is not JSON gets a parse error (-32700), one that is
JSON but no valid message (wrong version, a batch, a bare value) an invalid-request error (-32600, with
its id when it has a usable one, else null), and a line over `MAX_LINE_BYTES` is skipped with the same
error, naming the limit (its id is read from the line's first `HEAD_BYTES` bytes: see `id_in_head`);
the server keeps serving.

HTTP is locked unless it listens on loopback only: binding any other address needs a bearer token
(`HttpAccess.auth_token`, compared in constant time) or an explicit ``insecure`` choice. The accepted
``Host``/``Origin`` values follow the bind address (DNS-rebinding protection) and can be extended.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any, BinaryIO, Protocol

import anyio
import mcp_types as types
import pydantic_core
import uvicorn
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import SessionMessage
from pydantic import ValidationError
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_resili.constants import AUTH_TOKEN_ENV
from mcp_resili.errors import UserError
from mcp_resili.server.episodes import CLIENT_COOKIE, SCOPE_CLIENT, SCOPE_PRINCIPAL, HandleMint
from mcp_resili.server.protocol import (
    REASON_UNAUTHORIZED,
    WIRE_ACTIONS,
    ProtocolLayer,
    StdioWire,
    session_error_body,
)

logger = logging.getLogger(__name__)

#: Longest stdio message accepted (the SDK's HTTP request body limit): longer lines are skipped.
MAX_LINE_BYTES = 4 * 1024 * 1024
#: Seconds the stdio server keeps answering after its input ended (tool calls are time-limited anyway).
DRAIN_SECONDS = 30.0
#: Bytes read from stdin at a time.
READ_CHUNK = 64 * 1024
#: Bytes kept of a line over `MAX_LINE_BYTES`: where its request id is looked for (`id_in_head`).
HEAD_BYTES = 64 * 1024
#: Shortest bearer token accepted: a guessable token is no lock.
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


class Serves(Protocol):
    """Anything that holds a lowlevel MCP server (our suite server, the proxy)."""

    @property
    def mcp(self) -> Server[Any]:
        """The MCP server to expose."""
        ...


# --- stdio ---------------------------------------------------------------------------------------


def _error(code: int, message: str, request_id: types.RequestId | None = None) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


@dataclass(frozen=True)
class OverlongLine:
    """A stdio line longer than `MAX_LINE_BYTES`: its length and its first `HEAD_BYTES` bytes, no more."""

    size: int
    head: bytes


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
#: Keys only a response has: an overlong response is not answered under its id (it is no request of
#: the client's, and an error under that id would answer the client's own request with the same id).
_RESPONSE_KEYS = frozenset({"result", "error"})


def id_in_head(head: bytes) -> types.RequestId | None:
    """The request id (a string or an integer) of a message that starts with ``head``, if it shows.

    Reads the top-level members of the object one by one, each value decoded whole and only as far as
    ``head`` goes (never the rest of the line): the id is found wherever it comes among them, as long
    as it ends within ``head``. None if it does not show there, is no usable id, or the message is a
    response.
    """
    text = head.decode("utf-8", errors="replace")
    end = len(text)
    position = _skip_space(text, 0)
    if not text.startswith("{", position):
        return None
    position += 1
    found: types.RequestId | None = None
    try:
        while True:
            position = _skip_space(text, position)
            key, position = _DECODER.raw_decode(text, position)
            position = _skip_space(text, position)
            if not isinstance(key, str) or not text.startswith(":", position) or key in _RESPONSE_KEYS:
                return None
            position = _skip_space(text, position + 1)
            value, position = _DECODER.raw_decode(text, position)
            position = _skip_space(text, position)
            if position >= end:  # the value may go on past the head (a number cut short)
                return found
            if key == "id":
                if isinstance(value, bool) or not isinstance(value, str | int):
                    return None
                if isinstance(value, str) and not _encodable(value):
                    return None
                found = value
            if text[position] != ",":
                return found  # the end of the object (a message too long for its content), or not JSON
            position += 1
    except (ValueError, RecursionError):  # a value cut short by the head, or malformed
        return found


def _skip_space(text: str, position: int) -> int:
    """The position of the first non-whitespace character at or after ``position``."""
    match = _WHITESPACE.match(text, position)
    return position if match is None else match.end()


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a "\ud800" escape): no reply could carry it
        return False
    return True


def parse_line(line: bytes | OverlongLine) -> types.JSONRPCMessage | types.JSONRPCError | None:
    """A stdio line as a JSON-RPC message, the error reply it deserves, or None for a blank line.

    An `OverlongLine` (longer than `MAX_LINE_BYTES`, skipped unread), and a line the JSON parser cannot
    take, get an error under the id its head shows (`id_in_head`), so the client's request fails at
    once instead of waiting for its timeout.
    """
    if isinstance(line, OverlongLine):
        return _error(
            types.INVALID_REQUEST,
            f"message too large: {line.size} bytes is over the limit of {MAX_LINE_BYTES} bytes "
            f"({MAX_LINE_BYTES // 2**20} MiB) for one stdio message; it was skipped",
            id_in_head(line.head),
        )
    text = line.strip()
    if not text:
        return None
    try:
        message: types.JSONRPCMessage = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
        return message
    except ValidationError:
        pass
    try:
        raw = pydantic_core.from_json(text)
    except ValueError as exc:  # not JSON: truncated, NUL bytes, too deeply nested, not UTF-8 ...
        # Under the id its head shows, when it does: valid JSON the parser cannot take (nested too
        # deep, a huge number, a lone surrogate) then fails the client's request at once.
        return _error(types.PARSE_ERROR, f"parse error: {exc}", id_in_head(text))
    if isinstance(raw, list):
        return _error(types.INVALID_REQUEST, "batches are not supported: send one JSON-RPC message per line")
    request_id = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        request_id = None
    return _error(
        types.INVALID_REQUEST,
        'invalid request: a JSON-RPC 2.0 message is an object with "jsonrpc": "2.0" and a method '
        "(request, notification) or a result or error (response)",
        request_id,
    )


def _modern_request(message: object) -> bool:
    """Whether ``message`` is a request in the 2026-07-28 envelope (``initialize`` never is)."""
    if not isinstance(message, types.JSONRPCRequest) or message.method == "initialize":
        return False
    meta = (message.params or {}).get("_meta")
    return isinstance(meta, dict) and "io.modelcontextprotocol/protocolVersion" in meta


class _Pending:
    """Ids of the requests read from stdio and not answered yet."""

    def __init__(self) -> None:
        self._ids: set[types.RequestId] = set()
        self._empty = anyio.Event()
        self._empty.set()

    def inbound(self, message: types.JSONRPCMessage) -> None:
        """Note a request (or forget one the client cancelled: it gets no answer)."""
        if isinstance(message, types.JSONRPCRequest):
            self._ids.add(message.id)
            if self._empty.is_set():
                self._empty = anyio.Event()
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            self._forget((message.params or {}).get("requestId"))

    def outbound(self, message: types.JSONRPCMessage) -> None:
        """Note an answer."""
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            self._forget(message.id)

    def _forget(self, request_id: object) -> None:
        if isinstance(request_id, str | int):
            self._ids.discard(request_id)
        if not self._ids:
            self._empty.set()

    async def drained(self) -> None:
        """Return once every request has been answered."""
        await self._empty.wait()


async def read_lines(
    source: anyio.AsyncFile[bytes], limit: int = MAX_LINE_BYTES
) -> AsyncIterator[bytes | OverlongLine]:
    """Lines of ``source`` without their newline; an `OverlongLine` for a line longer than ``limit``.

    An overlong line is never held in memory: past its first `HEAD_BYTES` bytes, its bytes are
    dropped as they arrive (only counted).
    """
    buffer = bytearray()
    #: While a line too long is skipped: its first `HEAD_BYTES` bytes, and its length so far.
    head: bytes | None = None
    size = 0
    while chunk := await source.read1(READ_CHUNK):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if head is None:
                buffer += chunk[start:end]
                if len(buffer) > limit:
                    head, size = bytes(buffer[:HEAD_BYTES]), len(buffer)
            else:
                size += end - start
            yield bytes(buffer) if head is None else OverlongLine(size, head)
            buffer.clear()
            head = None
            start = end + 1
        if head is None:
            buffer += chunk[start:]
            if len(buffer) > limit:
                head, size = bytes(buffer[:HEAD_BYTES]), len(buffer)
                buffer.clear()
        else:
            size += len(chunk) - start
    if head is not None:
        yield OverlongLine(size, head)
    elif buffer:
        yield bytes(buffer)


async def serve_stdio(
    server: Serves, *, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None
) -> None:
    """Serve one client over stdin/stdout until it disconnects. Never writes anything else to stdout.

    Malformed lines get JSON-RPC error replies (see the module docstring); anything printed by tool
    code goes to stderr, not onto the wire. When the input ends, a ``server.input_ended()`` (if it has
    one) is called before the requests in flight are waited for (up to `DRAIN_SECONDS`).
    """
    source = anyio.wrap_file(stdin if stdin is not None else sys.stdin.buffer)
    sink = anyio.wrap_file(stdout if stdout is not None else sys.stdout.buffer)
    inbound_send, inbound = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outbound, outbound_receive = anyio.create_memory_object_stream[SessionMessage](0)

    pending = _Pending()
    #: The server serves the handshake era only (a proxy of a handshake-era upstream).
    handshake_only = bool(getattr(server, "handshake_only", False))
    layer = getattr(server, "protocol", None)
    wire = StdioWire() if layer is not None else None
    if layer is not None:
        layer.stdio = wire
    #: Set when the writer stops; ``was_reset`` tells whether a transport_reset fault stopped it.
    writer_done = anyio.Event()
    was_reset = False

    async def read(replies: MemoryObjectSendStream[SessionMessage]) -> None:
        async with inbound_send, replies:
            async for line in read_lines(source):
                parsed = parse_line(line)
                if isinstance(parsed, types.JSONRPCError):
                    await replies.send(SessionMessage(parsed))
                elif handshake_only and _modern_request(parsed):
                    # A proxy of a handshake-era server answers a 2026-07-28 request as that server
                    # would, and leaves the connection's era to the client's next try (initialize).
                    assert isinstance(parsed, types.JSONRPCRequest)
                    await replies.send(
                        SessionMessage(_error(types.METHOD_NOT_FOUND, "Method not found", parsed.id))
                    )
                elif parsed is not None:
                    pending.inbound(parsed)
                    await inbound_send.send(SessionMessage(parsed))
            # End of input: answer what was asked before the server loop stops (it cancels the rest).
            # A server that can answer sooner (a proxy giving up on a hung upstream) hears of it first.
            input_ended = getattr(server, "input_ended", None)
            if callable(input_ended):
                input_ended()
            with anyio.move_on_after(DRAIN_SECONDS):
                await pending.drained()

    async def write() -> None:
        try:
            await write_all()
        finally:
            writer_done.set()

    async def write_all() -> None:
        nonlocal was_reset
        async with outbound_receive:
            async for item in outbound_receive:
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                action = None
                message = item.message
                if (
                    wire is not None
                    and isinstance(message, types.JSONRPCResponse | types.JSONRPCError)
                    and message.id is not None
                ):
                    action = wire.take(message.id)
                if action == "reset":  # a transport_reset fault: the output ends before the response
                    await sink.aclose()
                    was_reset = True
                    return
                await sink.write((data.encode() + b"\n") * (2 if action == "duplicate" else 1))
                await sink.flush()
                pending.outbound(item.message)

    async def stop_at_reset() -> None:
        # After a reset nobody reads our output any more: stop serving (the client must start us again).
        await writer_done.wait()
        if was_reset:
            tg.cancel_scope.cancel()

    with contextlib.redirect_stdout(sys.stderr):
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            tg.start_soon(stop_at_reset)
            tg.start_soon(read, outbound.clone())
            # The writer drains every reply, then ends once the server and the reader closed their ends.
            async with outbound:
                await server.mcp.run(inbound, outbound, server.mcp.create_initialization_options())


# --- HTTP ----------------------------------------------------------------------------------------


class ExposureError(UserError):
    """An HTTP bind that would expose the server without a lock."""


@dataclass(frozen=True)
class HttpAccess:
    """Who may use an HTTP server: its bearer token, whether no lock is wanted, extra allowed hosts."""

    auth_token: str | None = None
    #: Serve a non-loopback address without a token (a warning is printed).
    insecure: bool = False
    #: ``Host`` values accepted besides the bind address's own (``name`` or ``name:port``).
    allowed_hosts: tuple[str, ...] = ()
    #: Further accepted tokens, each its own principal (episodes and handles are bound to one).
    more_tokens: tuple[str, ...] = ()

    @property
    def tokens(self) -> tuple[str, ...]:
        """Every accepted bearer token."""
        return (self.auth_token, *self.more_tokens) if self.auth_token is not None else ()

    @classmethod
    def from_options(
        cls,
        auth_token: str | Sequence[str] | None,
        insecure: bool,
        allowed_hosts: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> HttpAccess:
        """From the command line: ``--auth-token`` (repeatable) else `AUTH_TOKEN_ENV`.

        `ExposureError` for a token that is too short.
        """
        given = [auth_token] if isinstance(auth_token, str) else list(auth_token or [])
        tokens = [t.strip() for t in given if t] or [
            t.strip() for t in [(env if env is not None else {}).get(AUTH_TOKEN_ENV)] if t
        ]
        if any(len(token) < MIN_TOKEN_CHARS for token in tokens):
            raise ExposureError(
                f"the auth token must have at least {MIN_TOKEN_CHARS} characters "
                "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        first = tokens[0] if tokens else None
        return cls(first, insecure, tuple(allowed_hosts), tuple(dict.fromkeys(tokens[1:])))


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, access: HttpAccess) -> str | None:
    """Refuse an unlocked non-loopback bind (`ExposureError`); return the warning an insecure one earns."""
    if is_loopback(host) or access.auth_token is not None:
        return None
    if not access.insecure:
        raise ExposureError(
            f"refusing to serve on {host or '0.0.0.0'} without a lock: pass --auth-token TOKEN "
            f"(or set {AUTH_TOKEN_ENV}), or --insecure to serve it open"
        )
    return (
        f"mcp-resili: warning: serving on {host or '0.0.0.0'} without authentication (--insecure): "
        "anyone who can reach it can call its tools"
    )


def _host_names(host: str) -> list[str]:
    """The names a client may use in ``Host`` to reach a server bound to ``host``."""
    if is_loopback(host):
        return list(LOOPBACK_NAMES)
    if host in WILDCARD_HOSTS:
        names = [*LOOPBACK_NAMES, socket.gethostname(), socket.getfqdn()]
        with contextlib.suppress(OSError):
            names += socket.gethostbyname_ex(socket.gethostname())[2]
        return list(dict.fromkeys(names))
    return [f"[{host}]" if ":" in host else host]


def transport_security(host: str, allowed_hosts: Iterable[str] = ()) -> TransportSecuritySettings:
    """DNS-rebinding protection for a server bound to ``host``: its own names plus ``allowed_hosts``."""
    hosts: list[str] = []
    origins: list[str] = []
    for name in _host_names(host):
        hosts += [name, f"{name}:*"]
        origins += [f"http://{name}", f"http://{name}:*", f"https://{name}", f"https://{name}:*"]
    for extra in allowed_hosts:
        with_port = extra.rsplit(":", 1)[-1].isdigit() and not extra.endswith("]")
        hosts += [extra] if with_port else [extra, f"{extra}:*"]
        origins += [f"http://{extra}", f"https://{extra}"]
        if not with_port:
            origins += [f"http://{extra}:*", f"https://{extra}:*"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


def principal_of(token: str) -> str:
    """The principal a bearer token stands for: a hash (the token itself is never kept with episodes)."""
    return hashlib.sha256(token.encode()).hexdigest()[:24]


class BearerTokenMiddleware:
    """Answers 401 to any HTTP request without ``Authorization: Bearer TOKEN`` (constant-time compare).

    Several tokens may be accepted: each is a principal of its own, left in the request's scope
    (`SCOPE_PRINCIPAL`) for the episode table, which binds episodes and handles to it.
    """

    def __init__(self, app: ASGIApp, token: str | Sequence[str]) -> None:
        self.app = app
        tokens = [token] if isinstance(token, str) else list(token)
        self._tokens = [(t.encode(), principal_of(t)) for t in tokens]

    def _principal(self, given: bytes) -> str | None:
        found = None
        for token, principal in self._tokens:  # every token compared: no early exit to time
            if hmac.compare_digest(given, token):
                found = principal
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the token, then pass the request on."""
        if scope["type"] == "http":
            scheme, _, given = Headers(scope=scope).get("authorization", "").partition(" ")
            principal = self._principal(given.strip().encode()) if scheme.lower() == "bearer" else None
            if principal is None:
                response = JSONResponse(
                    {"error": "unauthorized", "message": "send Authorization: Bearer TOKEN"},
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="mcp-resili"'},
                )
                await response(scope, receive, send)
                return
            scope[SCOPE_PRINCIPAL] = principal
        await self.app(scope, receive, send)


class ClientCookie:
    """Tells stateless HTTP clients apart: a server-minted cookie, set once, read on every request.

    A 2026-07-28 client has no session id; one that keeps cookies (httpx, the Python SDK, browsers)
    sends this one back, so the episodes it names are its own (`ClientIdentity`). A value this
    process did not mint is replaced. A client that keeps no cookies is a stranger on every request:
    only a server-minted episode handle opens its existing episodes.
    """

    def __init__(self, app: ASGIApp, mint: HandleMint | None = None) -> None:
        self.app = app
        self.mint = mint or HandleMint()

    def __getattr__(self, name: str) -> Any:
        # Transparent: the app it wraps (the SDK's Starlette app: its router, lifespan) shows through.
        return getattr(self.app, name)

    def _kept(self, scope: Scope) -> str | None:
        raw = Headers(scope=scope).get("cookie")
        if not raw:
            return None
        try:
            morsel = SimpleCookie(raw).get(CLIENT_COOKIE)
        except CookieError:
            return None
        if morsel is None or not self.mint.verify("client", "c-", morsel.value):
            return None
        return morsel.value

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Put the client's id in the scope (`SCOPE_CLIENT`); set the cookie when it had none."""
        if scope["type"] != "http" or SCOPE_CLIENT in scope:
            # Not HTTP, or an in-process front (never a remote client: it cannot write the ASGI scope)
            # already said who the client is.
            await self.app(scope, receive, send)
            return
        kept = self._kept(scope)
        if kept is not None:
            scope[SCOPE_CLIENT] = kept
            await self.app(scope, receive, send)
            return
        minted = self.mint.mint("client", "c-")
        scope[SCOPE_CLIENT] = minted
        cookie = f"{CLIENT_COOKIE}={minted}; Path=/; HttpOnly; SameSite=Strict".encode()

        async def setting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
            await send(message)

        await self.app(scope, receive, setting_send)


class ProtocolGuard:
    """The HTTP side of protocol faults.

    Real 404s and 401s for expired or revoked sessions, and the wire actions (a response sent twice,
    a connection reset) the protocol layer left for a request.
    """

    def __init__(self, app: ASGIApp, layer: ProtocolLayer) -> None:
        self.app = app
        self.layer = layer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a dead session's request, or pass it on with a send that applies wire actions."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        session = headers.get("mcp-session-id")
        sessions = self.layer.http
        if session is not None and session in sessions.revoked:
            if headers.get("authorization", "") != sessions.revoked[session]:
                del sessions.revoked[session]  # a refreshed token
            else:
                await self._refuse(scope, receive, send, 401, REASON_UNAUTHORIZED)
                return
        if session is not None and session in sessions.expired:
            await self._refuse(scope, receive, send, 404, sessions.expired[session])
            return

        async def acting_send(message: Any) -> None:
            actions = scope.get(WIRE_ACTIONS)
            if actions and message["type"] == "http.response.body":
                action = _action_for(message.get("body", b""), actions)
                if action == "reset":
                    raise ConnectionResetError("transport_reset fault: the response is not sent")
                if action == "duplicate":
                    await send({**message, "more_body": True})
            await send(message)

        await self.app(scope, receive, acting_send)

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, reason: str) -> None:
        extra = {"WWW-Authenticate": 'Bearer error="invalid_token"'} if status == 401 else {}
        response = JSONResponse(json.loads(session_error_body(reason)), status_code=status, headers=extra)
        await response(scope, receive, send)


class HostCheckHint:
    """Says which flag admits a name the DNS-rebinding check refused (the SDK's 421 says only "Invalid").

    A server started on ``--host 0.0.0.0`` answers to its own names; reached through any other (a DNS
    name, a proxy), every request got a bare 421 that named neither the host nor the fix.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; replace the body of a 421 with the hint."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replaced = False

        async def hinting_send(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] == 421:
                replaced = True
                body = _host_hint(Headers(scope=scope).get("host", "")).encode()
                headers = [
                    (key, value)
                    for key, value in message.get("headers", [])
                    if key.lower() not in (b"content-length", b"content-type")
                ]
                headers += [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ]
                await send({**message, "headers": headers})
                await send({"type": "http.response.body", "body": body})
            elif not (replaced and message["type"] == "http.response.body"):
                await send(message)

        await self.app(scope, receive, hinting_send)


def _host_hint(host: str) -> str:
    name = host if len(host) <= 200 else host[:200] + "…"
    bare = name.rsplit(":", 1)[0] if name.rsplit(":", 1)[-1].isdigit() else name
    return (
        f"Invalid Host header: {name!r} is not one of this server's names; "
        f"start the server with --allowed-host {bare or 'NAME'} to accept it"
    )


def _action_for(body: bytes, actions: dict[Any, str]) -> str | None:
    """The wire action for the JSON-RPC response in ``body`` (an SSE event or a JSON body), if any."""
    text = body.decode("utf-8", errors="replace")
    candidates = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")] or [text]
    for candidate in candidates:
        if not candidate.startswith("{"):
            continue
        try:
            message = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(message, dict) and ("result" in message or "error" in message):
            request_id = message.get("id")
            if request_id in actions:
                return actions.pop(request_id)
    return None


def http_app(server: Serves, host: str, access: HttpAccess | None = None) -> ASGIApp:
    """The Streamable HTTP app at ``/mcp`` with the host checks and, when set, the bearer token."""
    access = access or HttpAccess()
    app: ASGIApp = server.mcp.streamable_http_app(
        streamable_http_path="/mcp",
        host=host,
        transport_security=transport_security(host, access.allowed_hosts),
    )
    app = HostCheckHint(ClientCookie(app))
    layer = getattr(server, "protocol", None)
    if isinstance(layer, ProtocolLayer):
        app = ProtocolGuard(app, layer)
    if access.auth_token is not None:
        app = BearerTokenMiddleware(app, access.tokens)
    return app


async def serve_http(
    server: Serves,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    sock: socket.socket | None = None,
    on_started: Callable[[str], None] | None = None,
    access: HttpAccess | None = None,
) -> None:
    """Serve Streamable HTTP at ``http://HOST:PORT/mcp`` until cancelled.

    A non-loopback ``host`` needs ``access`` with a token or ``insecure`` (`ExposureError` otherwise,
    before anything is bound; the insecure warning goes to stderr). The socket is bound here (or passed
    in), so a busy port raises `OSError` before anything starts, and ``on_started`` gets the real URL
    (port 0 binds a free port).
    """
    access = access or HttpAccess()
    warning = check_exposure(host, access)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    if sock is None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family)
    bound_port = sock.getsockname()[1]
    app = http_app(server, host, access)
    config = uvicorn.Config(app, host=host, port=bound_port, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(http.serve, [sock])
        while not http.started:  # uvicorn offers no event to await
            await anyio.sleep(0.01)
            if http.should_exit:
                raise OSError(f"the HTTP server on {host}:{bound_port} did not start")
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{bound_port}/mcp"
        logger.info("serving MCP at %s", url)
        if on_started is not None:
            on_started(url)
