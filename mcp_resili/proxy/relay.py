"""The client behind the proxy, as the upstream sees it: notifications and server-to-client requests.

The proxy holds one upstream connection. What the upstream sends on it (progress, log messages,
resource updates, list changes; sampling, elicitation and roots requests) goes to the client whose
tool call is in flight (the newest one, on that call's own stream), else to the client that spoke
last (on its connection's own channel). The upstream connection declares sampling, elicitation
and roots, so the upstream offers what needs them; a request the client behind cannot answer
gets an error naming why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
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
from pydantic import BaseModel

logger = logging.getLogger(__name__)

#: What the client behind must have declared for each kind of server-to-client request.
_NEEDS = {
    "sampling": types.ClientCapabilities(sampling=types.SamplingCapability()),
    "elicitation": types.ClientCapabilities(elicitation=types.ElicitationCapability()),
    "roots": types.ClientCapabilities(roots=types.RootsCapability()),
}


class ClientRelay:
    """Relays the upstream's notifications and requests to the client(s) behind the proxy.

    Pass `client_options()` to the upstream `mcp.Client`; the proxy marks each request it handles
    with `seen` (a tool call with `handling`), and calls `settle` before it answers one, so that
    everything the upstream sent before its answer reaches the client before the answer does.
    """

    def __init__(self) -> None:
        self._in_flight: list[ServerRequestContext[Any]] = []
        self._last: ServerSession | None = None
        self._deliveries = 0
        self._idle = anyio.Event()
        self._idle.set()

    def client_options(self) -> dict[str, Any]:
        """Callbacks for the upstream `mcp.Client` (they also declare the matching capabilities)."""
        return {
            "message_handler": self.on_notification,
            "sampling_callback": self.on_sampling,
            "elicitation_callback": self.on_elicitation,
            "list_roots_callback": self.on_list_roots,
        }

    def seen(self, ctx: ServerRequestContext[Any]) -> None:
        """Remember the client that sent ``ctx`` as the one to reach outside any request."""
        self._last = ctx.session

    def client_has_roots(self, ctx: ServerRequestContext[Any]) -> bool:
        """Whether the client that sent ``ctx`` declared the roots capability."""
        return ctx.session.check_client_capability(_NEEDS["roots"])

    @contextmanager
    def handling(self, ctx: ServerRequestContext[Any]) -> Iterator[None]:
        """Mark the tool call ``ctx`` as in flight while the proxy handles it."""
        self.seen(ctx)
        self._in_flight.append(ctx)
        try:
            yield
        finally:
            self._in_flight.remove(ctx)

    def _target(self) -> tuple[ServerSession, types.RequestId | None] | None:
        if self._in_flight:
            newest = self._in_flight[-1]
            return newest.session, newest.request_id
        if self._last is not None:
            return self._last, None
        return None

    async def settle(self) -> None:
        """Wait until the notifications received so far have been passed on."""
        # Let notification relays the upstream client has just scheduled start first.
        await anyio.lowlevel.checkpoint()
        while self._deliveries:
            await self._idle.wait()

    async def _deliver(self, notification: types.ServerNotification) -> None:
        target = self._target()
        if target is None:
            logger.debug("dropped %s: no client behind the proxy yet", notification.method)
            return
        session, request_id = target
        try:
            await session.send_notification(notification, related_request_id=request_id)
        except Exception as exc:  # a client that went away must not stop the relay
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
        target = self._target()
        if target is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST, message=f"no client behind the proxy for {kind}"
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
