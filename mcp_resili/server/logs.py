"""MCP logging for our server: what happens to an episode, as ``notifications/message``, never its faults.

Handshake era: a client asks with ``logging/setLevel`` (per client: its connection, cookie or session);
until it does, nothing is sent. 2026-07-28: logging is an opt-in per request (the reserved
``io.modelcontextprotocol/logLevel`` key in ``_meta``), delivered on that request's stream only.

What is logged: an episode starting (``start_episode``) and finishing, and each tool call's outcome (ok or
an error), which the client sees in the result anyway. Nothing that reveals a fault decision.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, get_args

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.connection import allowed_log_levels
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_resili.server.episodes import client_identity

#: Severity-ascending levels (RFC 5424, as MCP orders them).
LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)
#: Clients whose level is remembered (the least recently set are forgotten past it).
MAX_CLIENTS = 4096
LOGGER = "mcp-resili"


class EpisodeLog:
    """Sends log messages to the clients that asked for them, at the levels they asked for."""

    def __init__(self) -> None:
        self._levels: OrderedDict[str, str] = OrderedDict()

    async def set_level(
        self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        """``logging/setLevel`` (handshake era): messages at ``level`` and above, for this client."""
        channel = client_identity(ctx).channel or ""
        self._levels[channel] = params.level
        self._levels.move_to_end(channel)
        while len(self._levels) > MAX_CLIENTS:
            self._levels.popitem(last=False)
        return types.EmptyResult()

    def _allowed(self, ctx: ServerRequestContext[Any], level: str) -> bool:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return level in allowed_log_levels(ctx.protocol_version, ctx.meta)
        if not self._levels:
            return False
        wanted = self._levels.get(client_identity(ctx).channel or "")
        return wanted is not None and LEVELS.index(level) >= LEVELS.index(wanted)

    async def log(
        self, ctx: ServerRequestContext[Any], level: types.LoggingLevel, data: dict[str, Any]
    ) -> bool:
        """Send ``data`` at ``level`` on the request's own stream if the client asked; whether it was sent."""
        if not self._allowed(ctx, level):
            return False
        notification = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(level=level, logger=LOGGER, data=data)
        )
        try:
            await ctx.session.send_notification(notification, related_request_id=ctx.request_id)
        except Exception:  # a client that went away: its answer is lost anyway
            return False
        return True
