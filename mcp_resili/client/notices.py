"""What an MCP server sends the agent loop besides answers: tool-list changes, elicitation, sampling."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from mcp_resili.constants import (
    META_EPISODE,
)


class ProtocolNotices:
    """What the server sends a client besides answers, for the loop to cope with.

    Give `client_options()` to the `mcp.Client`: ``notifications/tools/list_changed`` marks the episode
    it names in ``_meta`` (every episode when it names none) as needing a fresh tool list; an
    elicitation request is declined and a sampling request answered with a fixed refusal text (a
    scripted harness has no user and no model to ask).
    """

    def __init__(self) -> None:
        self._all = 0
        self._per_episode: dict[str, int] = {}

    def client_options(self) -> dict[str, Any]:
        """Callbacks for `mcp.Client` (they also declare elicitation and sampling)."""
        return {
            "message_handler": self.on_message,
            "elicitation_callback": self.on_elicitation,
            "sampling_callback": self.on_sampling,
        }

    async def on_message(self, message: Any) -> None:
        """Note a tool-list change (every other message is left alone)."""
        if isinstance(message, types.ToolListChangedNotification):
            meta = message.params.meta if message.params is not None else None
            named = (meta or {}).get(META_EPISODE)
            if isinstance(named, str):
                self._per_episode[named] = self._per_episode.get(named, 0) + 1
            else:
                self._all += 1

    def version(self, episode_id: str) -> tuple[int, int]:
        """How many list changes ``episode_id`` has been told of so far."""
        return (self._all, self._per_episode.get(episode_id, 0))

    async def on_elicitation(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        """Decline: no user is there to answer."""
        return types.ElicitResult(action="decline")

    async def on_sampling(
        self, context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        """Answer that no model is sampled on a server's behalf.

        An error would fail the tool call itself on 2026-07-28, where the answer travels with the
        call's retry.
        """
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(
                type="text", text="The agent harness does not sample on a server's behalf."
            ),
            model="none",
            stop_reason="endTurn",
        )
