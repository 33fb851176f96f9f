"""Memory budgets of a server: how many bytes one episode may gather, and all live episodes may hold.

A server that runs for days meets careless and hostile agents alike, so what it keeps is bounded:

- **per episode** (`MemoryBudget.episode_bytes`): its trace (every call's arguments and result, as
  JSON) plus its tool state. The trace is what a runner fetches whole at the end (`TRACE_METHOD`),
  wherever it is kept meanwhile. A call whose arguments would take the episode past it is answered
  `EPISODE_MEMORY_LIMIT` (an ``isError`` result naming the limit); the tool does not run.
- **per server** (`MemoryBudget.server_bytes`): what the live episodes hold *in memory*: tool state,
  the events not yet handed to the in-process runner, the calls a suite's dependency gate reads, and
  a fixed cost per episode and per call (history, ordinals). Before a call would take the server past
  it, episodes are evicted: finished ones first, then those idle longest (at least
  `MemoryBudget.pressure_idle_seconds`), never the caller's. If that is not enough the call is answered
  `SERVER_MEMORY_LIMIT`, which says nothing about the agent (the runner counts an infrastructure
  error).

Bytes are those of the values as JSON (what a trace line holds), measured at C speed
(`json_size`): Python objects take a few times more, but in proportion. A finished episode is evicted
once idle for `MemoryBudget.finished_idle_seconds`; the episode table still closes any episode idle
for 30 minutes and keeps at most 4,096 live. An evicted episode is closed (later calls naming it are
refused): its trace, if written to a file, stays readable.
"""

from __future__ import annotations

import collections
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import pydantic_core

from mcp_resili.server.episode import Episode, EpisodeUsage
from mcp_resili.server.heap import HeapTrimmer, default_trimmer
from mcp_resili.trace.codes import EPISODE_MEMORY_LIMIT, SERVER_MEMORY_LIMIT

MIB = 1024 * 1024
#: Defaults for a small machine (a 1–2 GB VM): one episode may gather 32 MiB (eight calls at the
#: HTTP body limit), all live episodes together hold at most 256 MiB.
DEFAULT_EPISODE_BYTES = 32 * MIB
DEFAULT_SERVER_BYTES = 256 * MIB
#: The largest result ``serve`` sends for one call (the size of the largest request it takes): no
#: model reads more at once, and answering megabytes is work every other client waits for.
DEFAULT_RESULT_BYTES = 4 * MIB
#: Bytes counted per episode, and per recorded event, besides their JSON: the objects that hold them.
EPISODE_BASE_BYTES = 4096
CALL_BASE_BYTES = 256
#: Seconds a finished episode stays after its last call before it is evicted.
FINISHED_IDLE_SECONDS = 60.0
#: Under memory pressure, episodes idle at least this long may be evicted to admit another's call.
PRESSURE_IDLE_SECONDS = 10.0
#: Below this many bytes a tool state is measured after each write call; above, bounded instead.
STATE_MEASURE_BYTES = 256 * 1024


def _no_json(value: Any) -> None:
    """What a value JSON cannot hold counts as nothing (a suite's own immutable world, say)."""
    return None


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (values JSON cannot hold count as ``null``)."""
    try:
        return len(pydantic_core.to_json(value, fallback=_no_json))
    except (pydantic_core.PydanticSerializationError, ValueError, RecursionError):
        return len(repr(value))


def plain_json(value: Any) -> bytes | None:
    """``value`` as compact JSON, or None if it holds anything JSON text cannot (an object, a lone surrogate).

    When it is not None, its length is `json_size` of ``value``, and it says that no string in
    ``value`` holds a lone surrogate (`strings.lone_surrogate` is None): one encoding answers both.
    """
    try:
        return pydantic_core.to_json(value)
    except (pydantic_core.PydanticSerializationError, ValueError, RecursionError):
        return None


def larger_than(value: Any, limit: int) -> bool:
    """Whether ``value`` as JSON is (about) more than ``limit`` bytes, looking at no more than that.

    Strings count their length, every other value a few bytes: a walk that stops once past ``limit``,
    so a megabyte of arguments is never serialised on the event loop just to learn it is big.
    """
    # A container's scalar members are counted where they stand (most of a call's values are): only
    # nested containers wait their turn.
    total = 0
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        members: Iterable[Any] = ()
        if kind is dict:
            total += 2
            for key in item:
                total += len(key) + 4 if type(key) is str else 8
                if total > limit:
                    return True
            members = item.values()
        elif kind is list or kind is tuple:
            total += 2 + len(item)
            members = item
        else:
            total += len(item) + 3 if kind is str else 8
        for member in members:
            member_kind = type(member)
            if member_kind is str:
                total += len(member) + 3
            elif member_kind is dict or member_kind is list or member_kind is tuple:
                pending.append(member)
            else:
                total += 8
            if total > limit:
                return True
        if total > limit:
            return True
    return False


def megabytes(nbytes: int) -> str:
    """``nbytes`` for a person: ``3.4 MiB``, ``812 KiB``."""
    if nbytes >= MIB:
        return f"{nbytes / MIB:.1f} MiB"
    return f"{max(1, round(nbytes / 1024))} KiB"


def result_too_large(tool: str, size: int | None, limit: int) -> str:
    """The message of `RESULT_TOO_LARGE` (``size`` None: known only to be over ``limit``)."""
    how_big = "more than that" if size is None else megabytes(size)
    return (
        f"the result of {tool} is {how_big}, over this server's limit of {megabytes(limit)} for one "
        "result (--max-result-memory): the tool ran, its result is not sent; ask for less"
    )


@dataclass(frozen=True)
class MemoryBudget:
    """The limits (bytes, seconds); see the module docstring."""

    episode_bytes: int = DEFAULT_EPISODE_BYTES
    server_bytes: int = DEFAULT_SERVER_BYTES
    #: The largest result one call may send (None: no limit; ``serve`` sets `DEFAULT_RESULT_BYTES`).
    result_bytes: int | None = None
    finished_idle_seconds: float = FINISHED_IDLE_SECONDS
    pressure_idle_seconds: float = PRESSURE_IDLE_SECONDS

    def __post_init__(self) -> None:
        if self.episode_bytes < 1 or self.server_bytes < 1 or (self.result_bytes or 1) < 1:
            raise ValueError(
                f"memory budgets must be positive, got {self.episode_bytes} and {self.server_bytes} bytes"
            )
        if self.finished_idle_seconds < 0 or self.pressure_idle_seconds < 0:
            raise ValueError("idle times must be >= 0")


@dataclass(frozen=True)
class Refusal:
    """Why a call was not admitted: its error code and the message the agent reads."""

    code: str
    message: str


class ClosesEpisodes(Protocol):
    """The live-episode table (`EpisodeTable`): what eviction needs of it."""

    def peek(self, episode_id: str) -> Episode | None:
        """The live episode of that id, or None."""
        ...

    def close(self, episode_id: str, why: str = "closed") -> Episode | None:
        """Close the episode (later calls naming it are refused)."""
        ...


def retained(episode: Episode) -> int:
    """Bytes ``episode`` holds in memory (what the server budget counts)."""
    usage = episode.usage
    return (
        EPISODE_BASE_BYTES
        + usage.state_bytes
        + usage.pending_bytes
        + usage.kept_bytes
        + episode.seq * CALL_BASE_BYTES
    )


class MemoryAccount:
    """The server's accounts: every live episode's bytes, admission of calls, eviction.

    Only references that do not keep an episode alive are held: an episode the table closed is
    freed at once, and its bytes leave the total when it is.
    """

    def __init__(
        self,
        budget: MemoryBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
        trimmer: HeapTrimmer | None = None,
    ) -> None:
        self.budget = budget or MemoryBudget()
        self._clock = clock
        #: Gives freed memory back to the system as arguments come in and episodes go.
        self.trimmer = trimmer or default_trimmer()
        self._table: ClosesEpisodes | None = None
        #: Bytes the live episodes hold, as last counted (`retained`) plus growth since.
        self.total = 0
        #: Episode id -> a weak reference, least recently used first.
        self._live: collections.OrderedDict[str, weakref.ref[Episode]] = collections.OrderedDict()
        #: Episodes that called ``finish``, oldest first (evicted once idle).
        self._finished: collections.deque[weakref.ref[Episode]] = collections.deque()
        #: Episodes evicted so far, by reason (for logs and benchmarks).
        self.evicted: collections.Counter[str] = collections.Counter()

    def attach(self, table: ClosesEpisodes) -> None:
        """Let the account evict episodes from ``table`` (without it, it can only refuse)."""
        self._table = table

    # --- accounting ------------------------------------------------------------------------------

    def _track(self, episode: Episode) -> None:
        entry = self._live.get(episode.id)
        if entry is None or entry() is not episode:
            usage = episode.usage

            def gone(_: object, usage: EpisodeUsage = usage, key: str = episode.id) -> None:
                self.total -= usage.counted
                self.trimmer.churned(usage.counted)
                usage.counted = 0
                current = self._live.get(key)
                if current is not None and current() is None:
                    del self._live[key]

            self._live[episode.id] = weakref.ref(episode, gone)
        else:
            self._live.move_to_end(episode.id)

    def _recount(self, episode: Episode) -> None:
        now = retained(episode)
        self.total += now - episode.usage.counted
        episode.usage.counted = now

    def grew(self, episode: Episode) -> None:
        """Count what ``episode`` holds now (after a call, a take, a state measure)."""
        self._track(episode)
        self._recount(episode)

    def forget(self, episode: Episode) -> None:
        """``episode`` was closed: its bytes leave the total now (its objects may linger a moment)."""
        self.total -= episode.usage.counted
        self.trimmer.churned(episode.usage.counted)
        episode.usage.counted = 0
        entry = self._live.get(episode.id)
        if entry is not None and entry() is episode:
            del self._live[episode.id]

    def finished(self, episode: Episode) -> None:
        """``episode`` called ``finish``: it is evicted once idle (`MemoryBudget.finished_idle_seconds`)."""
        if not episode.finished:
            episode.finished = True
            self._finished.append(weakref.ref(episode))

    # --- admission -------------------------------------------------------------------------------

    def admit(self, episode: Episode, incoming: int) -> Refusal | None:
        """Whether a call bringing ``incoming`` bytes may run in ``episode`` (evicting others if need be)."""
        self._track(episode)
        self._evict_finished(episode)
        self.trimmer.churned(incoming)  # an earlier call's arguments are garbage by now, or kept
        budget = self.budget
        usage = episode.usage
        if usage.trace_bytes + usage.state_bytes + incoming > budget.episode_bytes:
            return Refusal(
                EPISODE_MEMORY_LIMIT,
                f"this episode already holds {megabytes(usage.trace_bytes + usage.state_bytes)} of its "
                f"{megabytes(budget.episode_bytes)} memory budget and this call brings "
                f"{megabytes(incoming)}: the call was not run. Send smaller arguments, or start a new "
                "episode (the server's --max-episode-memory sets the budget)",
            )
        if self.total + incoming + CALL_BASE_BYTES <= budget.server_bytes:
            return None
        self._evict_for(episode, incoming)
        if self.total + incoming + CALL_BASE_BYTES <= budget.server_bytes:
            return None
        return Refusal(
            SERVER_MEMORY_LIMIT,
            f"the server holds {megabytes(self.total)} of its {megabytes(budget.server_bytes)} memory budget "
            f"for live episodes and cannot take this call's {megabytes(incoming)} now: the call was not "
            "run (not the agent's doing; retry later, or raise the server's --max-server-memory)",
        )

    def _evict_finished(self, caller: Episode) -> None:
        if not self._finished:
            return
        now = self._clock()
        limit = self.budget.finished_idle_seconds
        while self._finished:
            episode = self._finished[0]()
            if episode is None or self._closed(episode):
                self._finished.popleft()
                continue
            if episode is caller or now - episode.last_used < limit:
                return
            self._finished.popleft()
            self._evict(episode, "finished")

    def _closed(self, episode: Episode) -> bool:
        return self._table is not None and self._table.peek(episode.id) is not episode

    def _evict_for(self, caller: Episode, incoming: int) -> None:
        """Evict finished episodes, then the longest idle ones, until the call fits."""
        if self._table is None:
            return
        now = self._clock()
        need = self.budget.server_bytes - incoming - CALL_BASE_BYTES
        candidates = [ref() for ref in self._live.values()]
        live = [e for e in candidates if e is not None and e is not caller and not self._closed(e)]
        for episode in [e for e in live if e.finished and not e.lock.locked()]:
            if self.total <= need:
                return
            self._evict(episode, "finished")
        idle = self.budget.pressure_idle_seconds
        for episode in live:  # least recently used first
            if self.total <= need:
                return
            if not episode.finished and not episode.lock.locked() and now - episode.last_used >= idle:
                self._evict(episode, "idle")

    def _evict(self, episode: Episode, why: str) -> None:
        assert self._table is not None
        reasons = {
            "finished": "closed: it had finished and the server needed its memory",
            "idle": "closed: it was idle and the server needed its memory (--max-server-memory)",
        }
        self._table.close(episode.id, reasons[why])
        self.forget(episode)
        self.evicted[why] += 1

    def session_ended(self, session_id: str) -> None:
        """An HTTP session was deleted: its episode (keyed by the session id) is closed now."""
        if self._table is None:
            return
        episode = self._table.close(session_id, "closed: its HTTP session was deleted")
        if episode is not None:
            self.forget(episode)
            self.evicted["session deleted"] += 1


class SessionEndWatch:
    """ASGI middleware: once a client deletes its Streamable HTTP session, its episode is closed.

    The SDK forgets a deleted session at once; without this its episode (keyed by the session id)
    stayed until 30 idle minutes or 4,096 newer episodes pushed it out.
    """

    def __init__(self, app: Any, on_end: Callable[[str], None]) -> None:
        self.app = app
        self.on_end = on_end

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Pass the request on; after a successful ``DELETE``, end the session's episode."""
        if scope.get("type") != "http" or scope.get("method") != "DELETE":
            await self.app(scope, receive, send)
            return
        session = next(
            (value.decode("latin-1") for key, value in scope.get("headers", ()) if key == b"mcp-session-id"),
            None,
        )
        status = 0

        async def watching_send(message: Any) -> None:
            nonlocal status
            if message.get("type") == "http.response.start":
                status = int(message.get("status", 0))
            await send(message)

        await self.app(scope, receive, watching_send)
        if session and 200 <= status < 300:
            self.on_end(session)
