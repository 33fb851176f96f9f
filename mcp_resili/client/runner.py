"""The runner: plans a run's episodes, has an executor play them, and stores every result.

A run is (model × fault plan × variant × task × trial) episodes; this process is the only writer of
its results database.

Planning lives in `mcp_resili.client.plan`, playing in `mcp_resili.client.session`, executors in
`mcp_resili.client.executor` (this process) and ``mcp_resili.integrations.ray`` (a Ray cluster).
"""

from __future__ import annotations

import gc
import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mcp_resili.agents.model import Model, Reflection
from mcp_resili.client.executor import (
    Executor,
    LocalExecutor,
    RunJob,
    SessionFactory,
    WorkItem,
    remember,
)
from mcp_resili.client.limits import LimitSpec
from mcp_resili.client.plan import (
    EXTERNAL_FAULTS,
    MATRIX_FIELDS,
    PlannedEpisode,
    RunConfig,
    RunConfigError,
    RunPlan,
    chain_key,
    episode_id,
    load_run_config,
    plans_of_stored_episodes,
)
from mcp_resili.client.pricing import CostEstimate, PriceTable, estimate_cost, load_price_table
from mcp_resili.client.providers import create_model
from mcp_resili.client.session import EpisodeResult, connect
from mcp_resili.registry.loader import get_suite, load_all_suites
from mcp_resili.registry.suites import Suite
from mcp_resili.store import EpisodeRow, Store, StoredKey
from mcp_resili.trace import ReflectionEvent, Trace, trace_lines

__all__ = [
    "EXTERNAL_FAULTS",
    "MATRIX_FIELDS",
    "PlannedEpisode",
    "RunConfig",
    "RunConfigError",
    "RunPlan",
    "RunResult",
    "connect",
    "estimate_run",
    "execute",
    "load_run_config",
    "local_executor",
    "resolve_run",
]

logger = logging.getLogger(__name__)
#: Finished episodes are written in batches of this many, and at least this often (seconds).
WRITE_BATCH = 64
WRITE_EVERY = 1.0
#: Finished episodes that may wait for the writer (then the driver waits for the disk).
WRITE_QUEUE = 1024
#: Allocations between two passes of the cyclic GC over its youngest generation, during a run.
YOUNG_COLLECTION = 10_000


@dataclass
class RunResult:
    """What a finished run produced: its counts; its rows are in the store (`iter_rows`, `rows`).

    Nothing here grows with the run: a sweep of 200,000 episodes returns the same few numbers.
    """

    run_id: str
    config: RunConfig
    #: Episodes of the run in the store (resumed ones included).
    episodes: int = 0
    #: Stored episodes that say nothing about the agent (the provider or the server failed).
    infrastructure_errors: int = 0
    #: USD spent by the run's stored episodes that have a price.
    cost_usd: float = 0.0
    #: Episodes found already stored (a resume) and not played again.
    resumed: int = 0
    #: Episodes a resume found stored as infrastructure errors and played again (their rows replaced).
    replayed_infrastructure_errors: int = 0
    #: USD those replaced rows had cost (still spent: it counts against ``--max-cost``).
    replaced_cost_usd: float = 0.0
    #: Why the run stopped before playing every episode (``"max_cost"``), or ``None``.
    stopped: str | None = None
    #: Planned episodes not started because the run stopped early.
    skipped: int = 0
    #: Episodes in flight when the cost cap was reached: ended before their next model call, not
    #: stored and not scored (a resume plays them).
    budget_stopped: int = 0
    #: USD the run spent, including the calls of budget-stopped episodes (None: no ledger was kept,
    #: see `cost_usd`).
    spent_usd: float | None = None
    #: The executor that played the episodes (``local``, ``ray``).
    executor: str = "local"

    def iter_rows(self, *, traces: bool = True) -> Iterator[EpisodeRow]:
        """The run's stored rows one at a time, read from the store (without ``traces``: lighter)."""
        store = Store(self.config.db, read_only=True)
        try:
            yield from store.iter_episodes(self.run_id, traces=traces)
        finally:
            store.close()

    @property
    def rows(self) -> list[EpisodeRow]:
        """Every stored row of the run, read from the store now: for small runs (else `iter_rows`)."""
        return list(self.iter_rows())


def _written_reflection(trace_text: str, episode_id: str) -> Reflection | None:
    """The reflection a stored Reflexion episode wrote after failing, if any (to resume its task)."""
    trace = Trace.from_lines(trace_lines(trace_text), origin=episode_id)
    written = [e for e in trace.events if isinstance(e, ReflectionEvent) and e.role == "written" and e.text]
    return Reflection(written[-1].from_trial, written[-1].text) if written else None


def _stored_memory(
    store: Store, run_id: str, keys: Sequence[StoredKey]
) -> dict[tuple[str, str, str, str], tuple[Reflection, ...]]:
    """Per task chain, the Reflexion memory its stored trials left (a resume continues from it)."""
    memory: dict[tuple[str, str, str, str], tuple[Reflection, ...]] = {}
    reflexion = sorted((k for k in keys if k.architecture == "reflexion"), key=lambda k: k.trial)
    traces = dict(store.traces_of(run_id, (k.episode_id for k in reflexion)))
    for key in reflexion:
        chain = (key.faults, key.model, key.variant, key.task_id)
        written = _written_reflection(traces[key.episode_id], key.episode_id)
        memory[chain] = remember(memory.get(chain, ()), written)
    return memory


def _check_prices(config: RunConfig, prices: PriceTable) -> None:
    if config.max_cost is None:
        return
    unpriced = [m for m in config.models if prices.price(m) is None]
    if unpriced:
        raise RunConfigError(
            f"--max-cost needs a price for every model; none known for {', '.join(unpriced)} "
            "(add them to a --prices TOML file)"
        )


def _estimate(
    plan: RunPlan, planned: Iterable[PlannedEpisode], tools: Mapping[str, Sequence[Any]]
) -> CostEstimate:
    """Tokens and USD for ``planned``: the prompt and tool schemas, one turn per workflow step + finish."""
    config, suite = plan.config, plan.suite
    prices = load_price_table(config.prices)
    schema_chars = {
        spec: sum(len(t.name) + len(t.description or "") + len(str(t.input_schema)) for t in listed)
        for spec, listed in tools.items()
    }
    rows = []
    for p in planned:
        task = suite.task(p.task_id)
        turns = min(len(task.workflow.steps) + 1, config.max_turns or task.constraints.max_turns)
        chars = len(suite.prompt(task, p.variant)) + schema_chars.get(p.faults, 0)
        rows.append((p.model, chars, turns))
    return estimate_cost(rows, prices)


async def _estimate_planned(
    plan: RunPlan, planned: Iterable[PlannedEpisode], specs: Iterable[str]
) -> CostEstimate:
    """Estimate ``planned`` (gone through once) after listing the tools of each of ``specs``."""
    async with AsyncExitStack() as stack:
        tools: dict[str, Sequence[Any]] = {}
        for spec in specs:
            client = await stack.enter_async_context(connect(plan, spec))
            tools[spec] = (await client.list_tools()).tools
    return _estimate(plan, planned, tools)


def resolve_run(config: RunConfig, suite: Suite | None = None, resume: str | None = None) -> RunPlan:
    """The top of a run: its suite, a resumed run's stored plans, and the run resolved once.

    ``suite`` is handed down, else found by ``config.suite``; see `RunPlan.resolve`. Raises a
    one-line `UserError` for anything wrong.
    """
    suite = suite if suite is not None else get_suite(config.suite)
    if resume is not None:
        config = _resumed_config(config, resume, suite)
    return RunPlan.resolve(config, suite, load_all_suites)


async def estimate_run(
    config: RunConfig, resume: str | None = None, suite: Suite | None = None
) -> CostEstimate:
    """Estimate a run's tokens and cost without playing it (connects only to list the tools).

    With ``resume``, only what the resume would play: the episodes not stored yet, and those stored as
    infrastructure errors.
    """
    plan = resolve_run(config, suite, resume)
    planned = plan.episodes()
    if resume is not None:
        store = Store(config.db)
        try:
            done = {
                k.episode_id for k in store.stored_keys(resume) if k.termination != "infrastructure_error"
            }
        finally:
            store.close()
        planned = [p for p in planned if episode_id(resume, p) not in done]
    return await _estimate_planned(plan, planned, sorted({p.faults for p in planned}))


class PlannedWork:
    """The work items of a run, made as they are taken: nothing per episode is listed ahead.

    Iterating goes through the run's matrix (`RunPlan.iter_cells`) and skips the episodes already
    stored (``done``, one byte per planned episode); under Reflexion a cell's trials are one item.
    """

    def __init__(
        self,
        plan: RunPlan,
        done: bytearray,
        memory: Mapping[tuple[str, str, str, str], tuple[Reflection, ...]],
    ) -> None:
        self.plan = plan
        self._done = done
        self._memory = memory
        self._count: int | None = None

    def __iter__(self) -> Iterator[WorkItem]:
        chained = self.plan.config.architecture == "reflexion"
        index = self.plan.index
        done = self._done
        for cell in self.plan.iter_cells():
            todo = [p for p in cell if not done[index(p) or 0]]
            if not todo:
                continue
            if chained:
                yield WorkItem(tuple(todo), self._memory.get(chain_key(todo[0]), ()))
            else:
                for planned in todo:
                    yield WorkItem((planned,))

    def __len__(self) -> int:
        """How many work items there are (one per episode left; under Reflexion, counted once)."""
        if self._count is None:
            if self.plan.config.architecture == "reflexion":
                self._count = sum(1 for _ in self)
            else:
                self._count = len(self._done) - sum(self._done)
        return self._count


class RunWriter:
    """Writes finished episodes to the store in a thread of its own, in batches.

    Compressing a trace and SQLite's work both release the interpreter, so storing overlaps playing
    on a second core; the driver only hands rows over. At most `WRITE_QUEUE` rows wait (then the
    driver waits for the disk).
    """

    def __init__(self, db: Path, replacing: frozenset[str]) -> None:
        self._db = db
        self._replacing = replacing
        self._rows: queue.Queue[EpisodeRow | None] = queue.Queue(maxsize=WRITE_QUEUE)
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="mcp-resili-writer", daemon=True)
        self._thread.start()

    def put(self, row: EpisodeRow) -> None:
        """Store ``row`` (soon); raises what stopped the writer, if it stopped."""
        if self._failure is not None:
            raise self._failure
        self._rows.put(row)

    def close(self) -> None:
        """Write what is left and stop; raises what stopped the writer, if anything did."""
        self._rows.put(None)
        self._thread.join()
        if self._failure is not None:
            raise self._failure

    def _run(self) -> None:
        store: Store | None = None
        try:
            store = Store(self._db)
            while self._write_batch(store):
                pass
        except BaseException as exc:  # surfaced to the driver by `put` or `close`
            self._failure = exc
            while True:  # let a driver blocked on a full queue go on to see the failure
                try:
                    if self._rows.get_nowait() is None:
                        break
                except queue.Empty:
                    break
        finally:
            if store is not None:
                store.close()

    def _write_batch(self, store: Store) -> bool:
        """Write the next batch (up to `WRITE_BATCH` rows or `WRITE_EVERY` seconds); False at the end."""
        first = self._rows.get()
        if first is None:
            return False
        batch = [first]
        more = True
        deadline = time.monotonic() + WRITE_EVERY
        while len(batch) < WRITE_BATCH:
            try:
                row = self._rows.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if row is None:
                more = False
                break
            batch.append(row)
        # One transaction per batch: a commit per episode was a few % of the CPU.
        store.add_episodes(batch, replacing=self._replacing)
        return more


def _model_factory(spec: str, **options: Any) -> Model:
    # Looked up at call time, so tests can substitute `mcp_resili.client.runner.create_model`.
    return create_model(spec, **options)


def local_executor(
    model_options: dict[str, Any] | None = None, session_factory: SessionFactory | None = None
) -> LocalExecutor:
    """The executor of this process, building models with this module's `create_model`.

    ``session_factory``: what plays the episodes (default: `EpisodeSession`, the built-in loop); an
    agent program's run, or one with model-API faults, needs ``mcp_resili.harness.session_factory``.
    """
    if session_factory is None:
        return LocalExecutor(model_factory=_model_factory, model_options=model_options)
    return LocalExecutor(
        model_factory=_model_factory, model_options=model_options, session_factory=session_factory
    )


def _needs_harness(config: RunConfig) -> bool:
    """Whether a run needs the harness session (an agent program, or a gateway before the models)."""
    return config.agent_cmd is not None or config.llm_faults is not None


def _resumed_config(config: RunConfig, resume: str, suite: Suite) -> RunConfig:
    """``config`` with the stored run's fault plans, once its matrix is checked against the stored one."""
    stored = load_run_config(config.db, resume)
    changed = [f for f in MATRIX_FIELDS if getattr(stored, f) != getattr(config, f)]
    if changed:
        raise RunConfigError(
            f"--resume {resume}: the run was stored with different {', '.join(changed)}; "
            "a resume plays the stored configuration"
        )
    plans = stored.fault_plans
    if not plans and config.server is None:  # stored before runs kept their plans
        plans = plans_of_stored_episodes(config.db, resume, config.faults or (suite.default_faults,))
    return replace(config, fault_plans=plans)


@contextmanager
def _long_lived_objects_frozen() -> Iterator[None]:
    """Keep what exists before the episodes (modules, SDKs, suite data) out of the cyclic GC's passes.

    Episodes allocate and drop many objects, so full collections come every few hundred episodes,
    and each one walked everything the process holds (a tenth of an episode's CPU). Frozen objects
    are still freed by reference counting; at the end they go back to the collector.

    The youngest generation is collected every `YOUNG_COLLECTION` allocations instead of 700: an
    episode's objects are almost all freed by reference counting before the next pass, so fewer passes
    find as much garbage and walk fewer survivors (the collector's share of a scripted sweep's CPU
    went from 1.1% to 0.5%).
    """
    global _runs_playing, _thresholds_before  # runs may overlap: the first one sets, the last resets
    with _gc_settings:
        if _runs_playing == 0:
            _thresholds_before = gc.get_threshold()
            gc.set_threshold(max(_thresholds_before[0], YOUNG_COLLECTION), *_thresholds_before[1:])
        _runs_playing += 1
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        with _gc_settings:
            _runs_playing -= 1
            if _runs_playing == 0:
                gc.set_threshold(*_thresholds_before)


_gc_settings = threading.Lock()
_runs_playing = 0
_thresholds_before: tuple[int, ...] = gc.get_threshold()


async def execute(
    config: RunConfig,
    *,
    suite: Suite | None = None,
    resume: str | None = None,
    on_episode: Callable[[EpisodeRow], None] | None = None,
    on_planned: Callable[[int], None] | None = None,
    on_estimate: Callable[[CostEstimate], None] | None = None,
    model_options: dict[str, Any] | None = None,
    executor: Executor | None = None,
    on_run: Callable[[str], None] | None = None,
) -> RunResult:
    """Run the matrix and store every episode as it finishes; returns the run's counts.

    The rows are in the store, written as episodes finish: read them with `RunResult.iter_rows`
    (or ``Store.iter_episodes``). Nothing kept here grows with the run, so a sweep of any size runs
    in the same memory. ``on_episode`` hears each row as it is handed to the store.

    ``suite``: the suite to play, handed down (default: ``config.suite`` found among the installed
    suites). ``on_run`` hears the run id once the run is in the store (so an interrupted run can say how to
    resume it).

    With ``resume`` (a run id in ``config.db``), only the episodes not yet stored are played: episode
    ids and fault keys are deterministic, so the finished run equals an uninterrupted one.
    ``model_options`` go to `create_model` (tests pass an ``http_client`` or a ``sleeper`` here);
    ``executor`` plays the episodes (default: this process, `LocalExecutor`). Whatever the executor,
    this process alone writes the store, and an episode id is stored at most once.
    """
    plan = resolve_run(config, suite, resume)
    config, suite = plan.config, plan.suite
    _check_prices(config, load_price_table(config.prices))
    if executor is None:
        if _needs_harness(config):
            raise RunConfigError(
                "agent_cmd and llm_faults are played by the harness session: pass "
                "executor=local_executor(session_factory=mcp_resili.harness.session_factory)"
            )
        executor = local_executor(model_options)
    run_id = resume or f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    result = RunResult(run_id, config, executor=executor.name)
    #: One byte per planned episode: stored (by the resumed run, or delivered in this one).
    done = bytearray(plan.episode_count())
    replacing, memory = _open_run(plan, run_id, resume, result, done)
    if on_run is not None:
        on_run(run_id)
    work = PlannedWork(plan, done, memory)
    todo = len(done) - sum(done)
    if on_planned is not None:
        on_planned(todo)
    if on_estimate is not None and todo:
        specs = sorted({item.chain[0].faults for item in work})
        on_estimate(await _estimate_planned(plan, (p for item in work for p in item.chain), specs))
    writer = RunWriter(config.db, replacing)

    def deliver(outcome: EpisodeResult) -> None:
        if outcome.outcome != "played":
            result.stopped = "max_cost"
            if outcome.outcome == "budget_stopped":
                result.budget_stopped += 1
            else:
                result.skipped += 1
            return
        row = outcome.row
        assert row is not None  # a played episode always has its row
        position = plan.index(outcome.planned)
        if position is None or done[position]:
            # A replayed episode (its worker died after playing it): the first copy stands.
            logger.info("episode %s delivered twice; kept the stored one", row.episode_id)
            return
        done[position] = 1
        writer.put(row)
        result.episodes += 1
        result.infrastructure_errors += row.label is None
        result.cost_usd += row.cost_usd or 0.0
        if on_episode is not None:
            on_episode(row)

    limits = LimitSpec(
        max_cost=config.max_cost,
        spent=result.cost_usd + result.replaced_cost_usd,
        requests_per_minute=config.requests_per_minute,
        tokens_per_minute=config.tokens_per_minute,
    )
    try:
        if todo:
            with _long_lived_objects_frozen():
                await executor.run(RunJob(plan, run_id, limits), work, deliver)
    finally:
        writer.close()  # episodes already delivered are stored even if the run stops early
    spent = executor.spent()
    result.spent_usd = spent if spent is not None else result.cost_usd
    if result.stopped == "max_cost":
        logger.warning(
            "--max-cost %.2f reached: %d episodes budget-stopped, %d not started; "
            "finish with --resume %s --max-cost HIGHER",
            config.max_cost,
            result.budget_stopped,
            result.skipped,
            run_id,
        )
    return result


def _open_run(
    plan: RunPlan, run_id: str, resume: str | None, result: RunResult, done: bytearray
) -> tuple[frozenset[str], dict[tuple[str, str, str, str], tuple[Reflection, ...]]]:
    """Add the run to the store, or read what a resumed run stored: marks ``done``, counts ``result``.

    Returns the stored infrastructure errors (played again, their rows replaced) and the Reflexion
    memory the stored trials left.
    """
    config = plan.config
    store = Store(config.db)
    try:
        if resume is None:
            store.add_run(
                run_id, datetime.now(UTC).isoformat(), plan.suite.name, config.seed, config.to_dict()
            )
            return frozenset(), {}
        kept: list[StoredKey] = []
        void: list[StoredKey] = []
        for key in store.stored_keys(run_id):
            if key.termination == "infrastructure_error":
                void.append(key)  # measured nothing: played again, its row replaced
                continue
            position = plan.index(PlannedEpisode(key.model, key.faults, key.task_id, key.trial, key.variant))
            if position is not None:
                done[position] = 1
            result.episodes += 1
            result.cost_usd += key.cost_usd or 0.0
            if key.architecture == "reflexion":
                kept.append(key)
        result.resumed = result.episodes
        result.replayed_infrastructure_errors = len(void)
        result.replaced_cost_usd = sum(k.cost_usd or 0.0 for k in void)
        return frozenset(k.episode_id for k in void), _stored_memory(store, run_id, kept)
    finally:
        store.close()
