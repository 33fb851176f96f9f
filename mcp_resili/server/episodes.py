"""Which episode a request belongs to, and the table of live episodes."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError

from mcp_resili import META_EPISODE
from mcp_resili.server.pipeline import Episode
from mcp_resili.tasks.model import Task

#: Header an HTTP client may send to name its episode (when it cannot set ``_meta``).
EPISODE_HEADER = "x-mcp-resili-episode"
#: Fault key of episodes named by their connection or session (random ids): their draws must not depend
#: on that id, so ``serve --seed N`` replays the same faults for the same calls. A task bound later
#: through its prompt becomes the key (see `ResiliServer._get_prompt`).
SESSION_FAULT_KEY = "session"
#: Episodes kept in memory at once; the oldest is dropped first (its trace file is complete).
MAX_EPISODES = 10_000


@dataclass(frozen=True)
class EpisodeRequest:
    """What a client said (or we inferred) about the episode a call belongs to."""

    id: str
    task: str | None = None
    fault_key: str | None = None
    seed: int | None = None


def episode_request(ctx: ServerRequestContext[Any]) -> EpisodeRequest:
    """The episode of a request: ``_meta``, then HTTP headers, then the connection."""
    raw = (ctx.meta or {}).get(META_EPISODE)
    if isinstance(raw, str) and raw:
        return EpisodeRequest(id=raw)
    if isinstance(raw, dict) and isinstance(raw.get("id"), str):
        seed, task, fault_key = raw.get("seed"), raw.get("task"), raw.get("fault_key")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise MCPError(types.INVALID_PARAMS, f"{META_EPISODE}.seed must be an integer, got {seed!r}")
        for name, value in (("task", task), ("fault_key", fault_key)):
            if value is not None and not isinstance(value, str):
                raise MCPError(types.INVALID_PARAMS, f"{META_EPISODE}.{name} must be a string, got {value!r}")
        return EpisodeRequest(id=raw["id"], task=task, fault_key=fault_key, seed=seed)
    if raw is not None:
        raise MCPError(types.INVALID_PARAMS, f"{META_EPISODE} must be a string or an object with an 'id'")
    headers = getattr(ctx.request, "headers", None)
    if headers is not None:
        if headers.get(EPISODE_HEADER):
            return EpisodeRequest(id=str(headers[EPISODE_HEADER]))
        if headers.get("mcp-session-id"):
            return EpisodeRequest(id=str(headers["mcp-session-id"]), fault_key=SESSION_FAULT_KEY)
        return EpisodeRequest(id="http-default", fault_key=SESSION_FAULT_KEY)
    # stdio and in-memory: one lifespan context per connection, so one episode per connection.
    lifespan = ctx.lifespan_context
    if isinstance(lifespan, dict):
        connection = lifespan.setdefault("mcp-resili/connection", f"conn-{uuid.uuid4().hex[:12]}")
        return EpisodeRequest(id=connection, fault_key=SESSION_FAULT_KEY)
    return EpisodeRequest(id="default", fault_key=SESSION_FAULT_KEY)


class EpisodeTable:
    """Live episodes by id, created on first use; the oldest is dropped past `MAX_EPISODES`."""

    def __init__(self, default_seed: int, max_episodes: int = MAX_EPISODES) -> None:
        self.default_seed = default_seed
        self.max_episodes = max_episodes
        self._episodes: OrderedDict[str, Episode] = OrderedDict()

    def get(self, request: EpisodeRequest, task: Callable[[], Task | None] = lambda: None) -> Episode:
        """The episode ``request`` names; ``task`` is asked only when the episode is new."""
        episode = self._episodes.get(request.id)
        if episode is None:
            episode = Episode(
                id=request.id,
                task=task(),
                fault_key=request.fault_key or request.id,
                seed=self.default_seed if request.seed is None else request.seed,
            )
            self._episodes[request.id] = episode
            while len(self._episodes) > self.max_episodes:
                self._episodes.popitem(last=False)
        return episode
