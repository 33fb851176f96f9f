"""One upstream session per client behind the proxy, so each meets the upstream as it would directly.

A client's upstream session declares that client's own capabilities (sampling, elicitation, roots: the
upstream offers what it would offer that client, and asks only what that client can answer), carries its
client info, and speaks its protocol era: 2026-07-28 only when both the client and the upstream speak it.
What the upstream sends on the session (notifications, server-to-client requests) can only be that
client's, so it reaches that client and no other (`ClientRelay` with one client behind it).

Who a client is: its handshake session (``mcp-session-id``), else its stdio or in-memory connection or
HTTP cookie (`ClientIdentity.channel`); stateless HTTP clients that keep no cookie cannot be told apart
and share one session. A session ends with its client's connection (a handshake session, stdio), or
when more than `UpstreamSessions.max_sessions` are open (the least recently used one is closed; its
client gets a fresh one on its next request, as after a server restart).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp import Client
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_resili.proxy.relay import ClientRelay
from mcp_resili.proxy.upstream import Upstream, UpstreamError, connect_upstream
from mcp_resili.server.episodes import client_identity

logger = logging.getLogger(__name__)

#: Upstream sessions open at once (for a stdio upstream, processes), by default.
MAX_SESSIONS = 32
#: What the 2026-07-28 envelope's ``_meta`` keys are called.
_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"


@dataclass
class UpstreamSession:
    """One client's session with the upstream, and the relay back to that client."""

    key: str
    relay: ClientRelay
    modern: bool
    upstream: Upstream | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    error: BaseException | None = None

    @property
    def client(self) -> Client:
        """The session's upstream client (once ready)."""
        assert self.upstream is not None
        return self.upstream.client


def session_key(ctx: ServerRequestContext[Any]) -> str:
    """Which client a request comes from (see the module docstring)."""
    headers = getattr(ctx.request, "headers", None)
    session = headers.get("mcp-session-id") if headers is not None else None
    if session:
        return f"session:{session}"
    return client_identity(ctx).channel or "anonymous"


def _declared(ctx: ServerRequestContext[Any], handshake_key: str, envelope_key: str) -> object:
    """What the client declared, in ``initialize``'s params or the request's 2026-07-28 envelope.

    While ``initialize`` is handled its session knows nothing yet.
    """
    if ctx.method == "initialize":
        return (ctx.params or {}).get(handshake_key)
    return (ctx.meta or {}).get(envelope_key)


def _capabilities(ctx: ServerRequestContext[Any]) -> types.ClientCapabilities:
    declared = ctx.session.client_capabilities
    if declared is not None and ctx.method != "initialize":
        return declared
    raw = _declared(ctx, "capabilities", _CLIENT_CAPABILITIES)
    try:
        return types.ClientCapabilities.model_validate(raw if isinstance(raw, Mapping) else {})
    except ValueError:
        return types.ClientCapabilities()


def _client_info(ctx: ServerRequestContext[Any]) -> types.Implementation | None:
    params = ctx.session.client_params
    if params is not None and ctx.method != "initialize":
        return params.client_info
    raw = _declared(ctx, "clientInfo", _CLIENT_INFO)
    try:
        return types.Implementation.model_validate(raw) if isinstance(raw, Mapping) else None
    except ValueError:
        return None


class UpstreamSessions:
    """The upstream sessions of the clients behind the proxy, opened on a client's first request."""

    def __init__(
        self,
        target: str,
        group: TaskGroup,
        *,
        upstream_modern: bool,
        connect_timeout: float,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.target = target
        self.upstream_modern = upstream_modern
        self.connect_timeout = connect_timeout
        self.max_sessions = max_sessions
        self._group = group
        self._sessions: OrderedDict[str, UpstreamSession] = OrderedDict()
        #: Upstream sessions opened so far (what the proxy's start-up and per-client cost is counted in).
        self.opened = 0
        #: The first upstream that closed its connection while serving (the proxy reports it at the end).
        self.lost: UpstreamError | None = None

    def __len__(self) -> int:
        return len(self._sessions)

    async def for_request(self, ctx: ServerRequestContext[Any]) -> UpstreamSession:
        """The session of the client that sent ``ctx``, opened (with its capabilities) when new."""
        key = session_key(ctx)
        session = self._sessions.get(key)
        if session is not None and session.stop.is_set():
            self._sessions.pop(key, None)
            session = None
        if session is None:
            session = self._open(key, ctx)
        else:
            self._sessions.move_to_end(key)
        with anyio.move_on_after(self.connect_timeout):
            await session.ready.wait()
        if not session.ready.is_set() or session.error is not None:
            self.close(key)
            why = session.error or f"no answer within {self.connect_timeout:g} s"
            message = f"the upstream {self.target!r} could not be reached: {why}"
            raise MCPError(types.CONNECTION_CLOSED, message)
        # A session whose upstream went away stays: its client meets the closed connection, as it would.
        return session

    def prepare(self, ctx: ServerRequestContext[Any]) -> None:
        """Start opening the session of the client that sent ``ctx`` (without waiting for it)."""
        key = session_key(ctx)
        session = self._sessions.get(key)
        if session is None or session.stop.is_set():
            self._open(key, ctx)

    def _open(self, key: str, ctx: ServerRequestContext[Any]) -> UpstreamSession:
        modern = self.upstream_modern and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        session = UpstreamSession(key=key, relay=ClientRelay(), modern=modern)
        self._sessions[key] = session
        while len(self._sessions) > self.max_sessions:
            _, oldest = self._sessions.popitem(last=False)
            oldest.stop.set()
        capabilities = _capabilities(ctx)
        options: dict[str, Any] = {"message_handler": session.relay.on_notification}
        callbacks = session.relay.client_options()
        if capabilities.sampling is not None:
            options["sampling_callback"] = callbacks["sampling_callback"]
        if capabilities.elicitation is not None:
            options["elicitation_callback"] = callbacks["elicitation_callback"]
        if capabilities.roots is not None:
            options["list_roots_callback"] = callbacks["list_roots_callback"]
        info = _client_info(ctx)
        if info is not None:
            options["client_info"] = info
        self.opened += 1
        self._group.start_soon(self._run, session, options)
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            # It ends with its client's connection (the SDK offers no public hook for that). At
            # 2026-07-28 every request has a connection of its own: the session outlives them.
            ctx.session._connection.exit_stack.callback(self.close, key)
        return session

    def close(self, key: str) -> None:
        """End the session of ``key`` (its client left)."""
        session = self._sessions.pop(key, None)
        if session is not None:
            session.stop.set()

    def close_all(self) -> None:
        """End every session (the proxy is stopping)."""
        for session in self._sessions.values():
            session.stop.set()
        self._sessions.clear()

    async def _run(self, session: UpstreamSession, options: dict[str, Any]) -> None:
        try:
            async with connect_upstream(
                self.target,
                read_timeout_seconds=self.connect_timeout,
                mode="auto" if session.modern else "legacy",
                **options,
            ) as upstream:
                session.upstream = upstream
                session.ready.set()
                async with anyio.create_task_group() as watch:

                    async def notice_loss() -> None:
                        await upstream.closed.wait()
                        if not session.stop.is_set() and self.lost is None:
                            self.lost = upstream.lost()

                    watch.start_soon(notice_loss)
                    await session.stop.wait()
                    watch.cancel_scope.cancel()
        except Exception as exc:
            if not session.ready.is_set():
                session.error = exc
            logger.info("upstream session %s ended: %s", session.key, exc)
        finally:
            session.ready.set()
