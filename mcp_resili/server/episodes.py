"""Which episode a request belongs to, and the table of live episodes.

One episode per MCP session, on every transport:

1. a request that names its episode (``_meta["mcp-resili/episode"]``, else the ``x-mcp-resili-episode``
   HTTP header) belongs to that episode: our runner plays many episodes over one connection this way;
2. a Streamable HTTP session (handshake era, ``mcp-session-id``) is one episode;
3. a stdio (or in-memory) connection is one episode (``serve --episode ID`` names it);
4. an HTTP request with neither (the stateless modern era, or a client that drops the session id) is
   refused: sharing one fallback episode would mix every client's state, ordinals and fault draws.

An episode's fault key is ``TASK/TRIAL`` (``untasked/TRIAL`` without a task): exactly the key of trial
TRIAL of TASK in ``mcp-resili run``, so an external agent meets the same fault draws as our runner. The
trial is the one the request names, else the server's ``--trial``, else the number of earlier episodes of
that task on this server. Every trace header records seed, task and trial.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError

from mcp_resili.constants import EPISODE_HEADER, META_EPISODE
from mcp_resili.server.episode import Episode
from mcp_resili.tasks.model import Task

__all__ = [
    "EPISODE_HEADER",
    "EpisodeRequest",
    "EpisodeTable",
    "NoEpisodeError",
    "episode_request",
    "fault_key_of",
]

#: Episodes kept in memory at once; past it the least recently used one is closed (its trace file,
#: if any, is complete) and later calls naming it are refused.
MAX_EPISODES = 4096
#: Seconds without a call after which an episode is closed (the SDK's HTTP session idle timeout).
EPISODE_IDLE_SECONDS = 30 * 60.0
#: Ids of closed episodes remembered (so that a call to one is refused rather than starting afresh).
MAX_CLOSED = 100_000
#: Longest episode id accepted (it names the trace file).
MAX_EPISODE_ID = 512
#: Fault-key prefix of episodes bound to no task.
UNTASKED = "untasked"
_LIFESPAN_KEY = "mcp-resili/connection"
_MISSING = (
    "no episode for this request: a stateless HTTP request must name its episode in "
    f'_meta["{META_EPISODE}"] or the {EPISODE_HEADER} header (an id, or {{"id", "task", "trial", '
    '"seed"}), or use a Streamable HTTP session (mcp-session-id)'
)


@dataclass(frozen=True)
class EpisodeRequest:
    """What a client said (or we inferred) about the episode a call belongs to."""

    id: str
    task: str | None = None
    trial: int | None = None
    seed: int | None = None
    #: An explicit fault key (our runner sends ``TASK/TRIAL``); None derives it from task and trial.
    fault_key: str | None = None


def fault_key_of(task: str | None, trial: int) -> str:
    """The fault key of trial ``trial`` of ``task``: the runner's key, so both meet the same draws."""
    return f"{task if task is not None else UNTASKED}/{trial}"


class NoEpisodeError(MCPError):
    """An HTTP request without a session that names no episode (invalid params)."""

    def __init__(self) -> None:
        super().__init__(types.INVALID_PARAMS, _MISSING)


def _invalid(message: str) -> MCPError:
    return MCPError(types.INVALID_PARAMS, message)


_EPISODE_KEYS = frozenset({"id", "task", "trial", "seed", "fault_key"})
#: Where an episode named in a request's ``_meta`` is, in errors about it.
_META_WHERE = f"_meta[{META_EPISODE!r}]"


def parse_episode(raw: object, where: str) -> EpisodeRequest:
    """An episode named by ``raw`` (an id, or ``{"id", "task", "trial", "seed", "fault_key"}``)."""
    if isinstance(raw, str):
        return EpisodeRequest(id=_checked_id(raw, where))
    if not isinstance(raw, Mapping):
        raise _invalid(f"{where} must be an episode id or an object with an 'id', got {raw!r:.100}")
    episode_id = _checked_id(raw.get("id"), f"{where}.id")
    if not raw.keys() <= _EPISODE_KEYS:
        unknown = sorted(set(raw) - _EPISODE_KEYS)
        raise _invalid(f"{where} has unknown keys {unknown}; known: id, task, trial, seed, fault_key")
    task, fault_key, seed, trial = raw.get("task"), raw.get("fault_key"), raw.get("seed"), raw.get("trial")
    if (
        (task is None or type(task) is str)
        and (fault_key is None or type(fault_key) is str)
        and (seed is None or type(seed) is int)
        and (trial is None or (type(trial) is int and trial >= 0))
    ):  # every call names its episode: the well-formed case without the loops that explain errors
        return EpisodeRequest(id=episode_id, task=task, trial=trial, seed=seed, fault_key=fault_key)
    for name, value in (("task", task), ("fault_key", fault_key)):
        if value is not None and not isinstance(value, str):
            raise _invalid(f"{where}.{name} must be a string, got {value!r:.100}")
    for name, value, minimum in (("seed", seed, None), ("trial", trial, 0)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum)
        ):
            what = "a non-negative integer" if minimum is not None else "an integer"
            raise _invalid(f"{where}.{name} must be {what}, got {value!r:.100}")
    return EpisodeRequest(id=episode_id, task=task, trial=trial, seed=seed, fault_key=fault_key)


def _checked_id(episode_id: object, where: str) -> str:
    if not isinstance(episode_id, str) or not episode_id or len(episode_id) > MAX_EPISODE_ID:
        raise _invalid(f"{where} must be a non-empty string of at most {MAX_EPISODE_ID} characters")
    return episode_id


def _from_header(value: str) -> EpisodeRequest:
    """The episode header: a plain id, or the JSON object form (for clients that cannot set ``_meta``)."""
    if not value.lstrip().startswith("{"):
        return parse_episode(value, EPISODE_HEADER)
    try:
        raw = json.loads(value)
    except ValueError:
        raise _invalid(f"the {EPISODE_HEADER} header is neither an id nor a JSON object") from None
    return parse_episode(raw, EPISODE_HEADER)


def episode_request(ctx: ServerRequestContext[Any], connection_episode: str | None = None) -> EpisodeRequest:
    """The episode of a request: ``_meta``, the episode header, the HTTP session, else the connection.

    ``connection_episode`` names the episode of a stdio or in-memory connection (``serve --episode``);
    by default each connection gets a fresh random id. Raises `MCPError` (invalid params) for a malformed
    episode, or an HTTP request that has no session and names no episode.
    """
    raw = (ctx.meta or {}).get(META_EPISODE)
    if raw is not None:
        return parse_episode(raw, _META_WHERE)
    headers = getattr(ctx.request, "headers", None)
    if headers is not None:
        named = headers.get(EPISODE_HEADER)
        if named:
            return _from_header(str(named))
        session = headers.get("mcp-session-id")
        if session:
            return EpisodeRequest(id=str(session))
        raise NoEpisodeError
    # stdio and in-memory: one lifespan context per connection, so one episode per connection.
    lifespan = ctx.lifespan_context
    if not isinstance(lifespan, dict):
        raise NoEpisodeError
    connection = lifespan.setdefault(_LIFESPAN_KEY, connection_episode or f"conn-{uuid.uuid4().hex[:12]}")
    return EpisodeRequest(id=str(connection))


@dataclass
class _Live:
    episode: Episode
    request: EpisodeRequest


class EpisodeTable:
    """Live episodes by id, created on first use, closed on request, when idle, or past the bound.

    A closed episode's id is remembered: calls naming it are refused (`MCPError`), never given a
    fresh episode that would replay its draws from ordinal 0.
    """

    def __init__(
        self,
        default_seed: int,
        max_episodes: int = MAX_EPISODES,
        *,
        idle_seconds: float = EPISODE_IDLE_SECONDS,
        trial: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_episodes < 1 or idle_seconds <= 0:
            raise ValueError(f"need max_episodes >= 1, idle_seconds > 0; got {max_episodes}, {idle_seconds}")
        if trial is not None and trial < 0:
            raise ValueError(f"trial must be >= 0, got {trial}")
        self.default_seed = default_seed
        self.max_episodes = max_episodes
        self.idle_seconds = idle_seconds
        #: The trial every episode plays unless it names its own (``serve --trial``).
        self.trial = trial
        self._clock = clock
        self._live: OrderedDict[str, _Live] = OrderedDict()  # least recently used first
        #: No live episode expires before this time (`_expire` skips its walk until then).
        self._first_expiry = -math.inf
        self._closed: OrderedDict[str, str] = OrderedDict()  # id -> why
        self._started: Counter[str | None] = Counter()  # episodes started per task

    def __len__(self) -> int:
        return len(self._live)

    def get(self, request: EpisodeRequest, task: Callable[[], Task | None] = lambda: None) -> Episode:
        """The episode ``request`` names; ``task`` is asked only when the episode is new."""
        now = self._clock()
        self._expire(now)
        live = self._live.get(request.id)
        if live is None:
            why = self._closed.get(request.id)
            if why is not None:
                raise _invalid(f"episode {request.id!r} is {why}; start a new episode under another id")
            live = _Live(self._new(request, task()), request)
            self._live[request.id] = live
            while len(self._live) > self.max_episodes:
                oldest, _ = self._live.popitem(last=False)
                self._remember(oldest, f"closed: more than {self.max_episodes} episodes were live")
        else:
            self._live.move_to_end(request.id)
        live.episode.last_used = now
        return live.episode

    def peek(self, episode_id: str) -> Episode | None:
        """The live episode ``episode_id``, or None; neither creates nor touches it."""
        live = self._live.get(episode_id)
        return None if live is None else live.episode

    def bind_task(self, episode: Episode, task: Task) -> None:
        """Bind a not yet started episode to ``task`` (a person picked its prompt): new trial and key."""
        live = self._live.get(episode.id)
        if live is None or episode.seq > 0:
            return
        episode.task = task
        episode.trial, episode.fault_key = self._identity(live.request, task)

    def close(self, episode_id: str, why: str = "closed") -> Episode | None:
        """Close an episode (later calls naming it are refused, told ``why``); it, or None if not live."""
        live = self._live.pop(episode_id, None)
        if live is None:
            return None
        self._remember(episode_id, why)
        return live.episode

    def _new(self, request: EpisodeRequest, task: Task | None) -> Episode:
        trial, fault_key = self._identity(request, task)
        return Episode(
            id=request.id,
            task=task,
            fault_key=fault_key,
            seed=self.default_seed if request.seed is None else request.seed,
            trial=trial,
        )

    def _identity(self, request: EpisodeRequest, task: Task | None) -> tuple[int, str]:
        # A server with no tasks of its own (the proxy) still keys the draws by the task named.
        task_id = task.id if task is not None else request.task
        started = self._started[task_id]
        self._started[task_id] += 1
        trial = next(t for t in (request.trial, self.trial, started) if t is not None)
        return trial, request.fault_key or fault_key_of(task_id, trial)

    def _expire(self, now: float) -> None:
        # Nothing can have expired before the least recently used episode could: its time is kept, and
        # stays a safe lower bound (episodes are only used again, added at ``now``, or removed).
        if now < self._first_expiry:
            return
        while self._live:
            episode_id, oldest = next(iter(self._live.items()))
            if now - oldest.episode.last_used < self.idle_seconds:
                self._first_expiry = oldest.episode.last_used + self.idle_seconds
                return
            del self._live[episode_id]
            self._remember(episode_id, f"closed: idle for more than {self.idle_seconds:g} s")
        self._first_expiry = -math.inf  # none live: the next new episode sets it on the next call

    def _remember(self, episode_id: str, why: str) -> None:
        self._closed[episode_id] = why
        while len(self._closed) > MAX_CLOSED:
            self._closed.popitem(last=False)
