"""``subscriptions/listen`` (2026-07-28): each client's stream of list changes, and no one else's.

A catalogue change lives in one episode, so its notice goes to the streams of the client that played
it (told apart by its channel: connection, cookie or session), never to every listener. A request
whose client cannot be told apart gets a stream nobody publishes to.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ServerEvent, ToolsListChanged

from mcp_resili.server.episodes import client_identity


class _CountingBus(InMemorySubscriptionBus):
    """An in-process bus that knows how many listen streams are open on it."""

    def __init__(self) -> None:
        super().__init__()
        self.listening = 0

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        """Register ``listener``; the returned callable unsubscribes it once."""
        unsubscribe = super().subscribe(listener)
        self.listening += 1
        done = False

        def once() -> None:
            nonlocal done
            if not done:
                done = True
                self.listening -= 1
                unsubscribe()

        return once


class ListenStreams:
    """One subscription bus per client channel (at most ``max_channels``, the oldest forgotten)."""

    def __init__(self, max_channels: int) -> None:
        self.max_channels = max_channels
        self._channels: OrderedDict[str, tuple[_CountingBus, ListenHandler]] = OrderedDict()

    def _held(self, channel: str) -> tuple[_CountingBus, ListenHandler]:
        if channel not in self._channels:
            while len(self._channels) >= self.max_channels:
                self._channels.popitem(last=False)
            bus = _CountingBus()
            self._channels[channel] = (bus, ListenHandler(bus))
        self._channels.move_to_end(channel)
        return self._channels[channel]

    async def listen(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """Serve one ``subscriptions/listen`` request on its client's bus."""
        channel = client_identity(ctx).channel
        handler = self._held(channel)[1] if channel is not None else ListenHandler(_CountingBus())
        return await handler(ctx, params)

    async def tools_changed(self, ctx: ServerRequestContext[Any]) -> int:
        """Announce a tools list change to the streams of ``ctx``'s client; how many were open."""
        channel = client_identity(ctx).channel
        held = self._channels.get(channel) if channel is not None else None
        if held is None or not held[0].listening:
            return 0
        await held[0].publish(ToolsListChanged())
        return held[0].listening
