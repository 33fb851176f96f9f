"""`RayExecutor`: a run's episodes played by a pool of Ray actors, results streamed home to the driver.

The driver keeps the plan and the store (`runner.execute`); this executor only plays. It starts or
joins a Ray instance, starts one `EpisodeWorker` actor per CPU of the cluster (or ``workers``; never
more than the run's concurrency or work items, see `worker_shares`), a `BudgetKeeper` actor when the
run has a cost cap or rate limits, and sends the work items in batches, a few calls in flight per
worker. Each finished batch comes back as `EpisodeResult` s and is delivered to the driver, which
stores it.

Fault tolerance: when a worker dies (its process killed, its node lost), the calls it had in flight
fail; their episodes, which were never delivered, go back in the queue and are played again by
another worker, with the same seed and so the same draws (the driver also refuses an episode id it
has stored). A replacement actor takes the dead one's place. An item whose worker died
``MAX_ATTEMPTS`` times ends the run with an error rather than killing workers forever.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import secrets
import signal
import socket
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from mcp_resili.client.executor import Deliver, RunJob, WorkItem, WorkItems
from mcp_resili.errors import UserError

logger = logging.getLogger(__name__)

#: How the extra is installed; named by every error about a missing Ray.
RAY_EXTRA = "pip install 'mcp-resili[ray]'"
#: Times one work item may be lost with its worker before the run gives up.
MAX_ATTEMPTS = 3
#: Calls in flight per worker (its share of ``--concurrency`` split over them): one batch playing
#: while another travels.
WINDOW = 2
#: Seconds between two readings of the run's spend from the budget actor (for the progress line).
SPEND_EVERY = 1.0
#: Why a run stops when its budget actor is gone (killed, or its node lost).
KEEPER_LOST = (
    "the run's budget actor died, so its --max-cost and rate limits can no longer be kept; "
    "finished episodes are stored, --resume plays the rest"
)
#: Seconds a cluster address gets to accept a TCP connection before the run calls it unreachable
#: (Ray itself keeps retrying an unreachable address for minutes, showing nothing).
REACH_TIMEOUT = 10.0
#: Environment for a Ray instance this process starts: no usage statistics, every port on loopback,
#: and a token of this process only (nothing written under ~/.ray). Read when ray is first imported.
LOCAL_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "token",
}


class RayUnavailableError(UserError):
    """``--executor ray`` without Ray installed, or a Ray cluster that cannot be reached."""


class RayRunError(UserError):
    """The run could not finish on Ray (every worker died, or one item killed its workers)."""


def import_ray() -> Any:
    """The ``ray`` module, or `RayUnavailableError` naming the extra."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise RayUnavailableError(f"--executor ray needs Ray: {RAY_EXTRA}") from None


def running_instance() -> tuple[str, str] | None:
    """(address, where it came from) of the instance Ray joins when given no address, or None.

    Ray's own lookup: ``RAY_ADDRESS``, else the instance the last ``ray start`` on this machine runs
    (recorded under Ray's temporary directory until ``ray stop``). Read without importing Ray, whose
    environment must be settled first (`prepare_local_env`).
    """
    named = os.environ.get("RAY_ADDRESS")
    if named:
        return named, "RAY_ADDRESS"
    if "RAY_TMPDIR" in os.environ:
        base = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        base = os.environ["TMPDIR"]
    else:
        base = "/tmp" if sys.platform.startswith(("linux", "darwin")) else tempfile.gettempdir()
    record = Path(base) / "ray" / "ray_current_cluster"
    try:
        started = record.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return (started, f"`ray start` here, recorded in {record} until `ray stop`") if started else None


def prepare_local_env(address: str | None) -> None:
    """Set `LOCAL_ENV` before Ray is imported, when this process will start its own instance.

    Joining an instance (``address``, or one Ray finds by itself) leaves Ray's environment alone: that
    instance's own settings, its token among them, decide.
    """
    if address is None and running_instance() is None:
        for key, value in LOCAL_ENV.items():
            os.environ.setdefault(key, value)
        os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
        if "ray" in sys.modules:
            reread_ray_env()


def reread_ray_env() -> None:
    """Make an already imported Ray read its auth mode and token again from the environment.

    Ray reads them once, when first imported; an instance started later takes them from the
    environment, so a stale reading (token auth off) would lock this process out of its own instance.
    """
    raylet: Any = importlib.import_module("ray._raylet")  # how Ray itself re-reads them (untyped)
    raylet.Config.initialize("")
    raylet.AuthenticationTokenLoader.instance().reset_cache()


def check_reachable(address: str | None) -> None:
    """Raise `RayUnavailableError` when the cluster Ray would join takes no TCP connection.

    Ray joins ``address`` (``HOST:PORT`` or ``ray://HOST:PORT``), or, when ``address`` is None or
    ``auto``, the `running_instance` (None with none found: Ray starts one; ``auto``: an error). What
    answers there must speak gRPC, as Ray does (else Ray would retry for minutes). ``local`` starts an
    instance; any other form is an error.
    """
    source = "is `ray start --head` running there?"
    if address == "local":
        return  # Ray starts an instance of its own
    if address is None or address == "auto":
        found = running_instance()
        if found is None:
            if address == "auto":  # Ray would fail the same way, only after the run was stored
                raise RayUnavailableError(
                    "--ray-address auto found no running Ray instance here (start one with "
                    "`ray start --head`, or leave --ray-address out to start one for the run)"
                )
            return
        address, origin = found
        if address in ("auto", "local"):
            return  # RAY_ADDRESS says so: Ray's own lookup, as without it
        source = f"from {origin}"
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailableError(
            f"--ray-address {address!r} is not HOST:PORT, ray://HOST:PORT, auto or local"
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT) as connection:
            if os.environ.get("RAY_USE_TLS", "0") in ("0", "") and not _speaks_grpc(connection):
                # Ray would retry a service that is not its own for minutes, with no end in sight.
                why = "something answers there, but not Ray (it does not speak gRPC)"
                raise RayUnavailableError(f"cannot reach Ray at {address}: {why} ({source})")
            return
    except TimeoutError:
        why = f"no answer within {REACH_TIMEOUT:g} s"
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
    raise RayUnavailableError(f"cannot reach Ray at {address}: {why} ({source})")


#: What an HTTP/2 client sends first: the connection preface, then an empty SETTINGS frame.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _speaks_grpc(connection: socket.socket) -> bool:
    """Whether the peer answers an HTTP/2 preface with a SETTINGS frame.

    Every gRPC server (Ray's GCS and its client server among them) does at once; an HTTP/1 server, or
    any other, does not.
    """
    try:
        connection.sendall(_HTTP2_PREFACE)
        head = b""
        while len(head) < 9:
            chunk = connection.recv(9 - len(head))
            if not chunk:
                return False
            head += chunk
    except OSError:
        return False
    return head[3] == 0x04  # the frame type of SETTINGS


def worker_shares(concurrency: int, workers: int, items: int) -> list[int]:
    """Episodes in flight on each worker: ``concurrency`` split as evenly as it goes, in all.

    No more workers than ``concurrency`` (each holds at least one slot) or than ``items`` (work to
    give them): ``--concurrency`` bounds the episodes in flight across all workers, and a typo in
    ``--ray-workers`` starts no thousands of idle actors.
    """
    count = max(1, min(workers, concurrency, items))
    return [concurrency // count + (index < concurrency % count) for index in range(count)]


def feeder_batches(share: int) -> list[int]:
    """Work items per batch for each of a worker's `WINDOW` feeders, given its share of ``--concurrency``.

    Together they keep exactly ``share`` episodes in flight on the worker (a share of 1 leaves the
    second feeder idle): ``--concurrency`` bounds the episodes in flight across all workers.
    """
    return [share // WINDOW + (position < share % WINDOW) for position in range(WINDOW)]


@dataclass
class _Slot:
    """One worker place in the pool: its current actor and how many times it was replaced."""

    actor: Any
    pid: int | None = None
    generation: int = 0
    #: Actors of this slot in a row that died before they told their pid (never started).
    stillborn: int = 0


class RayExecutor:
    """Plays a run's episodes on Ray actors (``address``: a cluster, or None to start or join locally)."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        workers: int | None = None,
        on_dispatch: Callable[[int, int | None, int], None] | None = None,
    ) -> None:
        if workers is not None and workers < 1:
            raise RayRunError(f"--ray-workers must be at least 1, got {workers}")
        if address is not None and not address.strip():
            raise RayRunError("--ray-address is empty (leave it out to start or join a local instance)")
        self.address = address
        self.workers = workers
        #: Called after each batch is sent: (worker index, worker pid, episodes in the batch).
        self.on_dispatch = on_dispatch
        #: Work items played again because their worker died with them in flight.
        self.replayed = 0
        #: Worker actors that replaced dead ones.
        self.replaced = 0
        #: Worker pids, by slot, once known.
        self.pids: list[int | None] = []
        self._spent: float | None = None
        self._keeper: Any = None

    def spent(self) -> float | None:
        """The run's spend as last read from the budget actor (None without limits)."""
        return self._spent

    def _connect(self, ray: Any) -> bool:
        """Join ``address`` or a running local instance, else start one; True when we started it."""
        if ray.is_initialized():
            return False
        options: dict[str, Any] = {
            "namespace": "mcp-resili",
            "include_dashboard": False,
            "log_to_driver": False,
            "configure_logging": False,
        }
        check_reachable(self.address)
        in_main_thread = threading.current_thread() is threading.main_thread()
        on_sigterm = signal.getsignal(signal.SIGTERM) if in_main_thread else None
        try:
            # No address: Ray joins the instance `ray start` runs on this machine, else starts one.
            ray.init(address=self.address, **options)
        except Exception as exc:  # whatever Ray raises here, the cluster could not be started or joined
            where = self.address or "a local instance"
            hint = ""
            if isinstance(exc, ConnectionError) and self.address and "RAY_AUTH_MODE" not in os.environ:
                # Ray finds a token by itself only for an instance it finds by itself (`auto`).
                hint = (
                    " (a cluster with token auth also needs RAY_AUTH_MODE=token, and its token in "
                    "RAY_AUTH_TOKEN or ~/.ray/auth_token)"
                )
            raise RayUnavailableError(f"cannot start or reach Ray at {where}: {exc}{hint}") from None
        if callable(on_sigterm):
            # Ray's own SIGTERM handling exits with a native stack dump: keep the caller's handler.
            signal.signal(signal.SIGTERM, on_sigterm)
        return True

    async def run(self, job: RunJob, items: WorkItems, deliver: Deliver) -> None:
        """Play ``items`` on the pool; returns when every episode's result was delivered."""
        prepare_local_env(self.address)
        ray = import_ray()
        started = self._connect(ray)
        actors: list[Any] = []
        try:
            cpus = int(ray.cluster_resources().get("CPU", 0))
            if self.workers is None and cpus < 1:
                raise RayRunError(
                    "the Ray cluster has no CPU for a worker; add worker nodes or --ray-workers"
                )
            shares = worker_shares(job.config.concurrency, self.workers or cpus, len(items))
            keeper_name = None
            if job.limits.active:
                from mcp_resili.integrations.ray.budget import BudgetKeeper

                keeper_name = f"mcp-resili-budget-{job.run_id}-{secrets.token_hex(3)}"
                self._keeper = (
                    ray.remote(BudgetKeeper).options(name=keeper_name, num_cpus=0).remote(job.limits)
                )
                actors.append(self._keeper)
            await self._play(ray, job, items, deliver, shares, keeper_name, actors)
            if self._keeper is not None:
                # Every episode is home; a keeper lost just now leaves the spend last read.
                with contextlib.suppress(ray.exceptions.RayActorError):
                    self._spent = await self._keeper.spent.remote()
        finally:
            for actor in actors:
                ray.kill(actor)
            if started:
                ray.shutdown()

    async def _play(
        self,
        ray: Any,
        job: RunJob,
        items: WorkItems,
        deliver: Deliver,
        shares: list[int],
        keeper: str | None,
        actors: list[Any],
    ) -> None:
        from mcp_resili.integrations.ray.worker import EpisodeWorker

        count = len(shares)
        worker_class = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(EpisodeWorker)

        def new_actor(index: int) -> Any:
            actor = worker_class.remote(job.config, job.run_id, job.limits, keeper, shares[index])
            actors.append(actor)
            return actor

        def replace(index: int, generation: int) -> None:
            # Only the first of a slot's feeders to notice a death replaces its actor.
            slot = slots[index]
            if slot.generation == generation:
                slot.actor, slot.pid, slot.generation = new_actor(index), None, generation + 1
                self.replaced += 1

        slots = [_Slot(new_actor(index)) for index in range(count)]
        self.pids = [None] * count
        queue = _Queue(items)
        attempts: dict[int, int] = {}
        failures: list[BaseException] = []
        undelivered = sum(len(item.chain) for item in items)  # one pass: nothing is kept

        async def feeder(index: int, position: int, scope: anyio.CancelScope) -> None:
            nonlocal undelivered
            slot = slots[index]
            batch = feeder_batches(shares[index])[position]
            while batch and queue and not failures:
                generation = slot.generation
                if slot.pid is None:
                    # Waits while Ray places the worker (a worker that never fits is simply not fed).
                    try:
                        pid = await slot.actor.pid.remote()
                    except ray.exceptions.RayActorError as exc:
                        # Died while this feeder waited for it (killed, or it never started).
                        if slot.generation == generation and slot.pid is None:
                            slot.stillborn += 1
                            if slot.stillborn >= MAX_ATTEMPTS:
                                failures.append(
                                    RayRunError(
                                        f"Ray worker {index} died {slot.stillborn} times before it "
                                        f"started ({type(exc).__name__}); stopping"
                                    )
                                )
                                break
                        replace(index, generation)
                        continue
                    if slot.generation == generation:  # not an actor already replaced meanwhile
                        slot.pid = self.pids[index] = pid
                        slot.stillborn = 0
                    continue
                chunk = queue.take(batch)
                if not chunk:
                    break
                call = slot.actor.play_batch.remote(chunk)
                if self.on_dispatch is not None:
                    self.on_dispatch(index, slot.pid, sum(len(i.chain) for i in chunk))
                try:
                    results = await call
                except ray.exceptions.RayActorError as exc:
                    try:
                        self._requeue(chunk, queue, attempts, exc)
                    except RayRunError as gave_up:
                        failures.append(gave_up)
                        break
                    replace(index, generation)
                    continue
                except ray.exceptions.RayTaskError as exc:
                    # The worker raised (e.g. a model key missing on its node): the run stops with it.
                    cause = getattr(exc, "cause", None)
                    failures.append(cause if isinstance(cause, BaseException) else exc)
                    break
                for result in results:
                    deliver(result)
                undelivered -= len(results)
            if undelivered == 0 or failures:
                scope.cancel()  # feeders still waiting for a worker that was never placed

        async def watch_spend() -> None:
            # The driver's progress shows the whole run's spend, calls still in flight included.
            while self._keeper is not None:
                try:
                    self._spent = await self._keeper.spent.remote()
                except ray.exceptions.RayActorError:
                    failures.append(RayRunError(KEEPER_LOST))
                    tg.cancel_scope.cancel()  # batches in flight are not delivered: resume plays them
                    return
                await anyio.sleep(SPEND_EVERY)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_spend)
            async with anyio.create_task_group() as feeders:
                for index in range(count):
                    for position in range(WINDOW):
                        feeders.start_soon(feeder, index, position, feeders.cancel_scope)
            tg.cancel_scope.cancel()
        if failures:
            raise failures[0]
        if undelivered:
            raise RayRunError(f"{undelivered} episodes were not played on Ray; finish with --resume")

    def _requeue(
        self, chunk: list[WorkItem], queue: _Queue, attempts: dict[int, int], exc: BaseException
    ) -> None:
        for item in chunk:
            attempts[id(item)] = attempts.get(id(item), 0) + 1
            if attempts[id(item)] >= MAX_ATTEMPTS:
                first = item.chain[0]
                raise RayRunError(
                    f"episode {first.task_id}/{first.trial} ({first.model}) lost its Ray worker "
                    f"{MAX_ATTEMPTS} times ({type(exc).__name__}); stopping"
                )
        logger.warning("a Ray worker died (%s); replaying its %d work items", type(exc).__name__, len(chunk))
        self.replayed += len(chunk)
        queue.give_back(chunk)


class _Queue:
    """Work items to send: taken from the run's items as they go, a dead worker's given back first."""

    def __init__(self, items: WorkItems) -> None:
        self._items = iter(items)
        self._back: deque[WorkItem] = deque()
        self._next: WorkItem | None = None

    def __bool__(self) -> bool:
        if self._back or self._next is not None:
            return True
        self._next = next(self._items, None)
        return self._next is not None

    def take(self, count: int) -> list[WorkItem]:
        """Up to ``count`` items: those given back first."""
        chunk: list[WorkItem] = []
        while len(chunk) < count:
            if self._back:
                chunk.append(self._back.popleft())
            elif self._next is not None:
                chunk.append(self._next)
                self._next = None
            else:
                item = next(self._items, None)
                if item is None:
                    break
                chunk.append(item)
        return chunk

    def give_back(self, chunk: list[WorkItem]) -> None:
        """Items a dead worker did not play: sent again before any other."""
        self._back.extendleft(reversed(chunk))
