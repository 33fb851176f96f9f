"""Executors play a run's planned episodes and hand each result back to the driver, which stores it.

The driver (`runner.execute`) plans, stores and reports; an executor only plays. This module has the
interface and the executor of this process (`LocalExecutor`); ``mcp_resili.integrations.ray`` has one
that spreads the same work over a Ray cluster.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from mcp_resili.agents.model import MEMORY_SIZE, Reflection
from mcp_resili.client.limits import UNLIMITED, Allowance, LimitSpec, LocalAllowance
from mcp_resili.client.plan import PlannedEpisode, RunConfig, RunPlan
from mcp_resili.client.providers import provider_of
from mcp_resili.client.session import EpisodeResult, EpisodeSession, ModelFactory


@dataclass(frozen=True)
class WorkItem:
    """Episodes one worker plays in order: a single episode, or a Reflexion chain of trials."""

    chain: tuple[PlannedEpisode, ...]
    #: Reflexion memory the first episode starts with (stored trials of a resumed run).
    memory: tuple[Reflection, ...] = ()


@dataclass(frozen=True)
class RunJob:
    """What every executor needs to play a run's episodes.

    ``plan`` is the run resolved in this process; an executor that plays elsewhere (Ray) sends only
    ``config`` (small and picklable) and resolves it again at the top of each worker.
    """

    plan: RunPlan
    run_id: str
    limits: LimitSpec

    @property
    def config(self) -> RunConfig:
        """The run's configuration (its fault plans frozen)."""
        return self.plan.config


#: Receives each episode's result as it finishes (called on the driver, in its event loop).
Deliver = Callable[[EpisodeResult], None]


class EpisodePlayer(Protocol):
    """What plays a run's planned episodes in one process (enter it once).

    An `EpisodeSession`, or another session with the same face (``mcp_resili.harness``: an agent
    program's, or the built-in loop behind a model-API fault gateway).
    """

    async def __aenter__(self) -> EpisodePlayer:
        """Connect (servers, clients, models)."""
        ...

    async def __aexit__(self, *exc: object) -> None:
        """Disconnect."""
        ...

    async def play(self, planned: PlannedEpisode, memory: tuple[Reflection, ...] = ()) -> EpisodeResult:
        """Play one planned episode."""
        ...


#: Builds the session of a run in one process, with `EpisodeSession`'s arguments.
SessionFactory = Callable[..., EpisodePlayer]

#: Seconds between two slots opening when ``--ramp-up`` is not given: about the CPU one episode
#: takes this runner, so the first episodes start at the pace it can serve them.
SLOT_OPENING_INTERVAL = 0.004


def opening_delay(config: RunConfig, slot: int, slots: int) -> float:
    """Seconds after the start at which slot ``slot`` (0-based) of ``slots`` opens (`RunConfig.ramp_up`).

    Opening every slot at once starts every episode in the same instant: their model requests leave
    in one burst and come back in one, so the episodes stay in step and queue behind each other's
    CPU at every turn (and a provider sees a burst of ``slots`` requests). Opened over a ramp, they
    stay spread. Which episodes play, and their results, do not depend on it.
    """
    if config.ramp_up is None:
        return slot * SLOT_OPENING_INTERVAL
    return config.ramp_up * slot / slots if slots > 1 else 0.0


def initially_open(config: RunConfig, slots: int) -> int:
    """How many of ``slots`` are open from the start: one when they open over a ramp, else all."""
    return 1 if slots > 1 and config.ramp_up != 0 else slots


async def open_slots(
    config: RunConfig,
    slots: int,
    open_one: Callable[[], None],
    sleep_until: Callable[[float], Awaitable[None]] = anyio.sleep_until,
) -> None:
    """Open slots 1 … ``slots`` - 1 at their `opening_delay` (slot 0 is open: `initially_open`).

    Cancel it once the work is done: a slot not yet open has nothing left to wait for.
    """
    start = anyio.current_time()
    for slot in range(1, slots):
        await sleep_until(start + opening_delay(config, slot, slots))
        open_one()


class Executor(Protocol):
    """Plays work items and delivers one `EpisodeResult` per planned episode."""

    #: ``local``, ``ray``: recorded in logs and shown in the summary.
    name: str

    async def run(self, job: RunJob, items: Sequence[WorkItem], deliver: Deliver) -> None:
        """Play every item; return when every episode's result has been delivered."""
        ...

    def spent(self) -> float | None:
        """USD the run has spent so far, in-flight calls included (None: not tracked)."""
        ...


def remember(memory: tuple[Reflection, ...], reflection: Reflection | None) -> tuple[Reflection, ...]:
    """Reflexion memory after one more trial: its reflection appended, the oldest dropped past the size."""
    return memory if reflection is None else (*memory, reflection)[-MEMORY_SIZE:]


async def play_item(session: EpisodePlayer, item: WorkItem) -> list[EpisodeResult]:
    """Play an item's episodes in order; after a budget stop the rest are not started."""
    results: list[EpisodeResult] = []
    memory = item.memory
    for p in item.chain:
        if results and results[-1].outcome != "played":
            results.append(EpisodeResult(p, "not_started"))
            continue
        result = await session.play(p, memory)
        results.append(result)
        memory = remember(memory, result.reflection)
    return results


class LocalExecutor:
    """Plays episodes concurrently in this process, against one session (one set of clients)."""

    name = "local"

    def __init__(
        self,
        *,
        model_factory: ModelFactory | None = None,
        model_options: Mapping[str, Any] | None = None,
        session_factory: SessionFactory = EpisodeSession,
    ) -> None:
        self._model_factory = model_factory
        self._model_options = model_options
        self._session_factory = session_factory
        self._allowance: LocalAllowance | None = None

    def spent(self) -> float | None:
        """The ledger's spend, when the run has limits."""
        return None if self._allowance is None else self._allowance.ledger.spent

    async def run(self, job: RunJob, items: Sequence[WorkItem], deliver: Deliver) -> None:
        """Run the items with at most ``concurrency`` episodes in flight (and per provider, its own)."""
        config = job.config
        allowance: Allowance = UNLIMITED
        if job.limits.active:
            self._allowance = LocalAllowance(job.limits)
            allowance = self._allowance
        options: dict[str, Any] = {}
        if self._model_factory is not None:
            options["model_factory"] = self._model_factory
        session = self._session_factory(
            job.plan,
            job.run_id,
            allowance=allowance,
            limited=job.limits.active,
            model_options=self._model_options,
            **options,
        )
        slots = min(config.concurrency, len(items))
        run_slots = anyio.CapacityLimiter(max(1, initially_open(config, slots)))
        per_provider: dict[str, list[WorkItem]] = {}
        for item in items:
            per_provider.setdefault(provider_of(item.chain[0].model), []).append(item)

        async def worker(queue: Iterator[WorkItem]) -> None:
            # A provider's workers take their slot in the run only while playing, so an episode that
            # waits for its provider holds no run slot.
            for item in queue:
                async with run_slots:
                    for result in await play_item(session, item):
                        deliver(result)

        def open_one() -> None:
            run_slots.total_tokens += 1

        async with session, anyio.create_task_group() as opener:
            if run_slots.total_tokens < slots:
                opener.start_soon(open_slots, config, slots, open_one)
            async with anyio.create_task_group() as tg:
                for provider_items in per_provider.values():
                    queue = iter(provider_items)
                    width = min(config.provider_concurrency or math.inf, slots, len(provider_items))
                    for _ in range(int(width)):
                        tg.start_soon(worker, queue)
            opener.cancel_scope.cancel()
