"""The clients behind the proxy, as the upstream sees them: notifications and server-to-client requests.

The proxy holds one upstream connection for all its clients. What the upstream sends on it (progress,
log messages, resource updates, list changes; sampling, elicitation and roots requests) goes to the
client it belongs to, and only there (over HTTP several clients share the proxy, and one must never
see another's logs or answer another's elicitation):

- What arrives during a forwarded request belongs to that request when the upstream connection says
  so: it runs what arrives on a request's own HTTP stream in the context of the task that sent the
  request (`_FORWARDING`). Over stdio (and on an HTTP upstream's standalone stream) nothing on the
  wire names a request: it belongs to the one client whose requests are in flight, the newest one's
  stream carrying it; when several clients' requests are in flight it cannot be told whose it is and
  it is dropped (a request gets an error saying so).
- Outside requests it goes to the one client connected, and is dropped when there are several.
- List changes concern every client (they share the upstream's lists): each gets them. A resource
  update goes to the clients that subscribed to that resource through the proxy.

The upstream connection declares sampling, elicitation and roots, so the upstream offers what needs
them; a request the client behind cannot answer gets an error naming why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.server import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

logger = logging.getLogger(__name__)

#: What the client behind must have declared for each kind of server-to-client request.
_NEEDS = {
    "sampling": types.ClientCapabilities(sampling=types.SamplingCapability()),
    "elicitation": types.ClientCapabilities(elicitation=types.ElicitationCapability()),
    "roots": types.ClientCapabilities(roots=types.RootsCapability()),
}

#: Seconds an upstream request waits for the client behind to finish its handshake.
READY_SECONDS = 30.0

#: Changes of the upstream's lists, which every client behind the proxy shares.
_EVERY_CLIENT = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    }
)

#: The client request the proxy is forwarding in this task. The upstream `mcp.Client` runs the
#: callbacks for what arrives on that request's HTTP stream in a copy of the sending task's context.
_FORWARDING: ContextVar[ServerRequestContext[Any] | None] = ContextVar("mcp_resili_forwarding", default=None)


def _client_of(session: ServerSession) -> object:
    """Who sent a request: the channel to its client (one per stdio pipe, per HTTP session), if any.

    Else its connection. A `ServerSession` is built per request, and so is a `Connection` at
    2026-07-28; the channel is the client's own, except at 2026-07-28 over HTTP, which has none: each
    request counts as a client of its own there (the careful way). The SDK offers no public way from
    a request to its connection.
    """
    connection = session._connection
    return connection.outbound if connection.has_standalone_channel else connection


def _outlives_its_requests(session: ServerSession) -> bool:
    """Whether the client's channel outlives the connection (2026-07-28 over stdio: one per request)."""
    connection = session._connection
    return connection.has_standalone_channel and connection.protocol_version in MODERN_PROTOCOL_VERSIONS


class ClientRelay:
    """Relays the upstream's notifications and requests to the client(s) behind the proxy.

    Pass `client_options()` to the upstream `mcp.Client`; the proxy marks each client message it
    handles with `seen`, each request it forwards with `handling`, and calls `settle` before it
    answers one, so that everything the upstream sent before its answer reaches the client before
    the answer does.
    """

    def __init__(self) -> None:
        self._in_flight: list[ServerRequestContext[Any]] = []
        #: The connected clients (`_client_of`), each with the session of its latest message.
        self._clients: dict[object, ServerSession] = {}
        #: Resource URIs each client subscribed to through the proxy.
        self._subscriptions: dict[object, set[str]] = {}
        self._deliveries = 0
        self._idle = anyio.Event()
        self._idle.set()
        #: Set once a client behind may be sent requests: it sent ``notifications/initialized`` (or
        #: speaks 2026-07-28, which has no handshake). Until then the upstream's requests wait.
        self.client_ready = anyio.Event()

    def client_options(self) -> dict[str, Any]:
        """Callbacks for the upstream `mcp.Client` (they also declare the matching capabilities)."""
        return {
            "message_handler": self.on_notification,
            "sampling_callback": self.on_sampling,
            "elicitation_callback": self.on_elicitation,
            "list_roots_callback": self.on_list_roots,
        }

    def seen(self, ctx: ServerRequestContext[Any]) -> None:
        """Note the client that sent ``ctx`` (it is forgotten once its connection closes)."""
        if ctx.method == "notifications/initialized" or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            self.client_ready.set()
        client = _client_of(ctx.session)
        if client not in self._clients and not _outlives_its_requests(ctx.session):
            ctx.session._connection.exit_stack.callback(self._forget, client)
        self._clients[client] = ctx.session

    def _forget(self, client: object) -> None:
        self._clients.pop(client, None)
        self._subscriptions.pop(client, None)

    def client_has_roots(self, ctx: ServerRequestContext[Any]) -> bool:
        """Whether the client that sent ``ctx`` declared the roots capability."""
        return ctx.session.check_client_capability(_NEEDS["roots"])

    def subscribed(self, ctx: ServerRequestContext[Any], uri: str, *, subscribe: bool = True) -> None:
        """Note that the client of ``ctx`` (un)subscribed to resource ``uri`` (the upstream agreed)."""
        uris = self._subscriptions.setdefault(_client_of(ctx.session), set())
        if subscribe:
            uris.add(uri)
        else:
            uris.discard(uri)

    @contextmanager
    def handling(self, ctx: ServerRequestContext[Any]) -> Iterator[None]:
        """Mark the request ``ctx`` as in flight (forwarded upstream) while the proxy handles it."""
        self.seen(ctx)
        self._in_flight.append(ctx)
        token = _FORWARDING.set(ctx)
        try:
            yield
        finally:
            _FORWARDING.reset(token)
            self._in_flight.remove(ctx)

    def _target(self) -> tuple[ServerSession, types.RequestId | None] | None:
        """Where what the upstream sends now belongs (see the module docstring), or None: nowhere."""
        forwarding = _FORWARDING.get()
        if forwarding is not None:
            return forwarding.session, forwarding.request_id
        if self._in_flight:
            if len({_client_of(ctx.session) for ctx in self._in_flight}) > 1:
                return None  # several clients' requests in flight: whose it is cannot be told
            newest = self._in_flight[-1]
            return newest.session, newest.request_id
        if len(self._clients) == 1:
            (session,) = self._clients.values()
            return session, None
        return None

    async def settle(self) -> None:
        """Wait until the notifications received so far have been passed on."""
        # Let notification relays the upstream client has just scheduled start first.
        await anyio.lowlevel.checkpoint()
        while self._deliveries:
            await self._idle.wait()

    async def _deliver(self, notification: types.ServerNotification) -> None:
        target = self._target()
        reached: object = None
        if isinstance(notification, types.ResourceUpdatedNotification):
            uri = str(notification.params.uri)
            subscribers = [client for client, uris in self._subscriptions.items() if uri in uris]
            if subscribers:  # never tied to a request: each subscriber's own channel
                await self._broadcast(notification, subscribers)
                return
        if target is not None:
            session, request_id = target
            reached = _client_of(session)
            try:
                await session.send_notification(notification, related_request_id=request_id)
            except Exception as exc:  # a client that went away must not stop the relay
                logger.debug("could not pass on %s: %r", notification.method, exc)
        if notification.method in _EVERY_CLIENT:
            await self._broadcast(notification, [c for c in self._clients if c is not reached])
        elif target is None:
            logger.debug("dropped %s: no single client behind the proxy it belongs to", notification.method)

    async def _broadcast(self, notification: types.ServerNotification, clients: list[object]) -> None:
        """Send ``notification`` to each of ``clients`` on its own channel (not tied to a request)."""
        for client in clients:
            session = self._clients.get(client)
            if session is None:
                continue
            try:
                await session.send_notification(notification)
            except Exception as exc:  # a client that went away must not stop the others
                logger.debug("could not pass on %s: %r", notification.method, exc)

    async def on_notification(self, message: IncomingMessage) -> None:
        """Pass an upstream notification on (progress goes with its request, see `progress_relay`)."""
        if isinstance(message, Exception):
            logger.warning("upstream transport error: %s", message)
            return
        if isinstance(message, types.ProgressNotification):
            return
        with self._delivering():
            await self._deliver(message)

    @contextmanager
    def _delivering(self) -> Iterator[None]:
        self._deliveries += 1
        if self._deliveries == 1:
            self._idle = anyio.Event()
        try:
            yield
        finally:
            self._deliveries -= 1
            if not self._deliveries:
                self._idle.set()

    def progress_relay(self, ctx: ServerRequestContext[Any]) -> ProgressFnT | None:
        """A callback passing the upstream's progress on under the client's own token.

        None when the client asked for no progress.
        """
        if progress_token_from_params(ctx.params) is None:
            return None

        async def relay(progress: float, total: float | None, message: str | None) -> None:
            with self._delivering():
                await ctx.session.report_progress(progress, total, message)

        return relay

    async def _ask(
        self, kind: str, request: Any, result_type: type[BaseModel]
    ) -> Any:  # the callers narrow the result to their own protocol's types
        with anyio.move_on_after(READY_SECONDS):
            await self.client_ready.wait()
        target = self._target()
        if target is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"no single client behind the proxy that this {kind} request belongs to",
            )
        session, request_id = target
        if not session.check_client_capability(_NEEDS[kind]):
            return types.ErrorData(
                code=types.INVALID_REQUEST, message=f"the client behind the proxy does not support {kind}"
            )
        metadata = ServerMessageMetadata(related_request_id=request_id) if request_id is not None else None
        try:
            return await session.send_request(request, result_type, metadata=metadata)
        except MCPError as exc:
            return exc.error
        except Exception as exc:  # e.g. a result that breaks the schema: the upstream gets an error
            return types.ErrorData(
                code=types.INTERNAL_ERROR, message=f"{kind} through the proxy failed: {exc}"
            )

    async def on_sampling(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        """Ask the client behind for a sampling result."""
        result_type = types.CreateMessageResultWithTools if params.tools else types.CreateMessageResult
        result: (
            types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData
        ) = await self._ask("sampling", types.CreateMessageRequest(params=params), result_type)
        return result

    async def on_elicitation(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """Ask the client behind (its user) for input."""
        result: types.ElicitResult | types.ErrorData = await self._ask(
            "elicitation", types.ElicitRequest(params=params), types.ElicitResult
        )
        return result

    async def on_list_roots(self, context: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
        """Ask the client behind for its roots."""
        result: types.ListRootsResult | types.ErrorData = await self._ask(
            "roots", types.ListRootsRequest(), types.ListRootsResult
        )
        return result
