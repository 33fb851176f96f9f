"""One episode's server-side state, and the lock that serialises its calls."""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from mcp_resili.faults import (
    CallOutcome,
    ProtocolState,
)
from mcp_resili.tasks.model import Task
from mcp_resili.trace import ToolCallEvent, TraceEvent

logger = logging.getLogger(__name__)


class EpisodeLock:
    """A first-come, first-served lock for the calls of one episode, cheap when nobody waits.

    An episode's calls almost never overlap (an agent awaits each answer), so the uncontended
    acquire is two attribute tests: no yield to the event loop, no cancellation checkpoint, no task
    lookup (`anyio.Lock` does all three, a visible share of a call's server cost in memory). A
    waiter is handed the lock by its releaser; one cancelled while waiting passes it on or leaves
    the queue, so a cancelled call never leaves the episode locked.
    """

    __slots__ = ("_held", "_waiters")

    def __init__(self) -> None:
        self._held = False
        self._waiters: collections.deque[anyio.Event] = collections.deque()

    def locked(self) -> bool:
        """Whether a call holds the lock."""
        return self._held

    @property
    def waiting(self) -> int:
        """How many calls wait for the lock."""
        return len(self._waiters)

    async def __aenter__(self) -> None:
        if not self._held:
            self._held = True
            return
        handed = anyio.Event()
        self._waiters.append(handed)
        try:
            await handed.wait()
        except BaseException:
            if handed.is_set():  # handed over just as the wait was cancelled: pass it on
                self._release()
            else:
                self._waiters.remove(handed)
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()  # the lock stays held, now by that waiter
        else:
            self._held = False


@dataclass(slots=True)
class EpisodeUsage:
    """What one episode holds, in bytes of JSON (`mcp_resili.server.budget` keeps the accounts).

    ``trace_bytes`` counts every event recorded for it (wherever the trace went); the others what it
    holds in memory now.
    """

    #: Bytes of its trace so far (arguments and results of every call, as JSON).
    trace_bytes: int = 0
    #: Bytes of the events recorded and not yet taken by the in-process runner (`Episode.pending`).
    pending_bytes: int = 0
    #: Bytes of the calls kept for the suite's dependency gate (`Episode.kept`).
    kept_bytes: int = 0
    #: The last measure (or bound) of its tool state.
    state_bytes: int = 0
    #: What the server's account last counted for it (`MemoryAccount`).
    counted: int = 0


@dataclass
class Episode:
    """Per-episode server state. Episodes never share any of it."""

    id: str
    task: Task | None
    fault_key: str
    seed: int
    #: The trial this episode plays (part of its fault key), when known.
    trial: int | None = None
    tool_state: dict[str, Any] = field(default_factory=dict)
    ordinals: collections.Counter[str] = field(default_factory=collections.Counter)
    history: list[CallOutcome] = field(default_factory=list)
    seq: int = 0
    #: Calls of one episode are serialised so ordinals and history never depend on scheduling.
    lock: EpisodeLock = field(default_factory=EpisodeLock)
    #: Private scratch space of the fault plan (armed groups, cascades...), per episode.
    fault_state: dict[str, Any] = field(default_factory=dict)
    #: The trace file this episode created (`TraceRecorder`): None until its first event is written.
    trace_path: Path | None = None
    #: Whether ``tool_state`` was seeded from the suite's initial state (on the first call).
    state_ready: bool = False
    #: Events recorded and not yet taken by the in-process runner (`TraceRecorder.take`); a server
    #: that hands no events over keeps none here (they go to the trace file as they happen).
    pending: list[TraceEvent] = field(default_factory=list)
    #: The successful tool calls so far, kept only for a suite's dependency gate (its data flow).
    kept: list[ToolCallEvent] = field(default_factory=list)
    #: Bytes it holds and has recorded (`mcp_resili.server.budget`).
    usage: EpisodeUsage = field(default_factory=EpisodeUsage)
    #: Whether the agent called ``finish`` (a finished episode is evicted first once idle).
    finished: bool = False
    #: ``time.monotonic()`` of the last call: idle episodes expire (`EpisodeTable`).
    last_used: float = field(default_factory=time.monotonic)
    #: What protocol faults changed for this episode (its catalogue, its session; `server.protocol`).
    protocol: ProtocolState = field(default_factory=ProtocolState)

    def next_seq(self) -> int:
        """The sequence number of the next recorded event."""
        self.seq += 1
        return self.seq
