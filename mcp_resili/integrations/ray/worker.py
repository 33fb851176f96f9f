"""A Ray worker: an async actor that plays batches of a run's episodes with its own session.

Each worker process holds one session (`mcp_resili.harness.session_factory`: an `EpisodeSession` with
its own in-process MCP servers, or clients of ``--server``, and its own models; or an agent program's
session with its own servers and model API), opened on the first batch. anyio requires a task group or cancel
scope to be left by the task that entered it, and Ray runs every actor call as its own task, so one
long-lived host task enters the session and leaves it on `close`; calls only use it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from mcp_resili.client.executor import EpisodePlayer, WorkItem, initially_open, open_slots, play_item
from mcp_resili.client.limits import UNLIMITED, Allowance, LimitSpec, wait_for_grant
from mcp_resili.client.plan import RunConfig, RunPlan
from mcp_resili.client.session import EpisodeResult
from mcp_resili.harness import session_factory
from mcp_resili.integrations.ray.executor import KEEPER_LOST, RayRunError
from mcp_resili.registry.loader import get_suite


class RemoteAllowance:
    """The run's allowance as seen from a worker: every question goes to the budget actor.

    A keeper that is gone stops the batch with `RayRunError` (`KEEPER_LOST`): its episode is not
    played on without the run's limits, nor stored, and the driver stops the run in one line.
    """

    def __init__(self, keeper: Any) -> None:
        self._keeper = keeper

    async def _ask(self, method: str, *args: Any) -> Any:
        import ray

        try:
            return await getattr(self._keeper, method).remote(*args)
        except ray.exceptions.RayActorError:
            raise RayRunError(KEEPER_LOST) from None

    async def is_open(self) -> bool:
        """Ask the keeper whether calls may still start."""
        return bool(await self._ask("is_open"))

    async def admit(self, key: str, tokens: int) -> None:
        """Take a start window from the keeper, start inside it (or ask again if its reply came too late)."""
        loop = asyncio.get_running_loop()  # timed by the clock its sleeps are timed by
        await wait_for_grant(
            lambda: self._ask("grant", key, tokens), lambda: self._ask("now"), loop.time, asyncio.sleep
        )

    async def settle(self, key: str, estimated: int, used: int, cost: float) -> None:
        """Charge the call (awaited, so the spend is known before the episode's next call)."""
        await self._ask("settle", key, estimated, used, cost)


class EpisodeWorker:
    """Plays work items of one run; ``keeper`` is the name of the run's budget actor, if any.

    The worker is the top of its own process: it resolves the run's configuration (its fault plans
    frozen by the driver) against the suite once, as the driver did.
    """

    def __init__(
        self, config: RunConfig, run_id: str, limits: LimitSpec, keeper: str | None, concurrency: int
    ) -> None:
        self.config = config
        self.run_id = run_id
        self.limits = limits
        self._keeper_name = keeper
        self._slot_count = max(1, concurrency)
        # This worker's share of the run's slots opens over the run's ramp (`open_slots`).
        self._slots = asyncio.Semaphore(initially_open(config, self._slot_count))
        self._opener: asyncio.Task[None] | None = None
        self._session: EpisodePlayer | None = None
        self._failure: BaseException | None = None
        self._ready: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._host: asyncio.Task[None] | None = None

    async def pid(self) -> int:
        """The process id of this worker (the driver shows it; a test kills it)."""
        return os.getpid()

    async def _hold_session(self) -> None:
        assert self._ready is not None and self._stop is not None
        allowance: Allowance = UNLIMITED
        if self._keeper_name is not None:
            import ray

            allowance = RemoteAllowance(ray.get_actor(self._keeper_name))
        try:
            session = session_factory(
                RunPlan.resolve(self.config, get_suite(self.config.suite)),
                self.run_id,
                allowance=allowance,
                limited=self.limits.active,
            )
            async with session:
                self._session = session
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            # Reported to every call (e.g. a missing API key on this node), not lost in a task.
            self._failure = exc
            self._ready.set()
            if not isinstance(exc, Exception):
                raise

    async def _open(self) -> EpisodePlayer:
        if self._host is None:
            self._ready, self._stop = asyncio.Event(), asyncio.Event()
            self._host = asyncio.create_task(self._hold_session())
        assert self._ready is not None
        await self._ready.wait()
        if self._failure is not None:
            raise self._failure
        assert self._session is not None
        return self._session

    async def play_batch(self, items: list[WorkItem]) -> list[EpisodeResult]:
        """Play ``items`` concurrently (at most the worker's share of the run's concurrency)."""
        session = await self._open()
        if self._opener is None and initially_open(self.config, self._slot_count) < self._slot_count:
            opening = open_slots(self.config, self._slot_count, self._slots.release)
            self._opener = asyncio.create_task(opening)

        async def one(item: WorkItem) -> list[EpisodeResult]:
            async with self._slots:
                return await play_item(session, item)

        batches = await asyncio.gather(*(one(item) for item in items))
        return [result for batch in batches for result in batch]

    async def close(self) -> None:
        """Leave the session (closes MCP clients and model connections)."""
        if self._opener is not None:
            self._opener.cancel()
        if self._host is not None and self._stop is not None:
            self._stop.set()
            await self._host
