"""The runner: plans a run's episodes, has an executor play them, and stores every result.

A run is (model × fault plan × variant × task × trial) episodes; this process is the only writer of
its results database.

Planning lives in `mcp_resili.client.plan`, playing in `mcp_resili.client.session`, executors in
`mcp_resili.client.executor` (this process) and ``mcp_resili.integrations.ray`` (a Ray cluster).
"""

from __future__ import annotations

import gc
import logging
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import anyio

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
    chains,
    episode_id,
    load_run_config,
    plans_of_stored_episodes,
)
from mcp_resili.client.pricing import CostEstimate, PriceTable, estimate_cost, load_price_table
from mcp_resili.client.providers import create_model
from mcp_resili.client.session import EpisodeResult, connect
from mcp_resili.registry.loader import get_suite, load_all_suites
from mcp_resili.registry.suites import Suite
from mcp_resili.store import EpisodeRow, Store
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


@dataclass
class RunResult:
    """What a finished run produced."""

    run_id: str
    config: RunConfig
    rows: list[EpisodeRow] = field(default_factory=list)
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

    @property
    def cost_usd(self) -> float:
        """USD spent by the run's stored episodes that have a price."""
        return sum(r.cost_usd or 0.0 for r in self.rows)

    @property
    def infrastructure_errors(self) -> int:
        """Stored episodes that say nothing about the agent (the provider or the server failed)."""
        return sum(1 for r in self.rows if r.label is None)


def _written_reflection(row: EpisodeRow) -> Reflection | None:
    """The reflection a stored Reflexion episode wrote after failing, if any (to resume its task)."""
    trace = Trace.from_lines(trace_lines(row.trace), origin=row.episode_id)
    written = [e for e in trace.events if isinstance(e, ReflectionEvent) and e.role == "written" and e.text]
    return Reflection(written[-1].from_trial, written[-1].text) if written else None


def _stored_memory(rows: Sequence[EpisodeRow]) -> dict[tuple[str, str, str, str], tuple[Reflection, ...]]:
    """Per task chain, the Reflexion memory its stored trials left (a resume continues from it)."""
    memory: dict[tuple[str, str, str, str], tuple[Reflection, ...]] = {}
    for row in sorted(rows, key=lambda r: r.trial):
        if row.architecture == "reflexion":
            key = (row.faults, row.model, row.variant, row.task_id)
            memory[key] = remember(memory.get(key, ()), _written_reflection(row))
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
    plan: RunPlan, planned: Sequence[PlannedEpisode], tools: Mapping[str, Sequence[Any]]
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


async def _estimate_planned(plan: RunPlan, planned: Sequence[PlannedEpisode]) -> CostEstimate:
    specs = sorted({p.faults for p in planned})
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
            kept, _ = _kept_and_void(store.episodes(resume))
        finally:
            store.close()
        done = {r.episode_id for r in kept}
        planned = [p for p in planned if episode_id(resume, p) not in done]
    return await _estimate_planned(plan, planned)


def _kept_and_void(rows: Sequence[EpisodeRow]) -> tuple[list[EpisodeRow], list[EpisodeRow]]:
    """A stored run's rows: those a resume keeps, and its infrastructure errors (played again)."""
    kept = [r for r in rows if r.termination != "infrastructure_error"]
    return kept, [r for r in rows if r.termination == "infrastructure_error"]


def _model_factory(spec: str, **options: Any) -> Model:
    # Looked up at call time, so tests can substitute `mcp_resili.client.runner.create_model`.
    return create_model(spec, **options)


async def _flush_every(seconds: float, flush: Callable[[], None]) -> None:
    """Write finished episodes at least every ``seconds`` (a killed run then loses only that much)."""
    while True:
        await anyio.sleep(seconds)
        flush()


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
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


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
    """Run the matrix and store every episode; returns the run's stored rows.

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
    planned = plan.episodes()
    _check_prices(config, load_price_table(config.prices))
    if executor is None:
        if _needs_harness(config):
            raise RunConfigError(
                "agent_cmd and llm_faults are played by the harness session: pass "
                "executor=local_executor(session_factory=mcp_resili.harness.session_factory)"
            )
        executor = local_executor(model_options)
    store = Store(config.db)
    run_id = resume or f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    result = RunResult(run_id, config, executor=executor.name)
    replacing: frozenset[str] = frozenset()
    try:
        if resume is None:
            store.add_run(run_id, datetime.now(UTC).isoformat(), suite.name, config.seed, config.to_dict())
        else:
            kept, void = _kept_and_void(store.episodes(run_id))
            result.rows.extend(kept)
            result.resumed = len(kept)
            # Infrastructure errors measured nothing: a resume plays them again, its rows in their place.
            result.replayed_infrastructure_errors = len(void)
            result.replaced_cost_usd = sum(r.cost_usd or 0.0 for r in void)
            replacing = frozenset(r.episode_id for r in void)
        if on_run is not None:
            on_run(run_id)
        stored = {r.episode_id for r in result.rows}
        todo = [p for p in planned if episode_id(run_id, p) not in stored]
        if on_planned is not None:
            on_planned(len(todo))
        if on_estimate is not None and todo:
            on_estimate(await _estimate_planned(plan, todo))
        memory = _stored_memory(result.rows)
        unwritten: list[EpisodeRow] = []

        def flush() -> None:
            # One transaction per batch of episodes: a commit per episode was a few % of the CPU.
            if unwritten:
                store.add_episodes(unwritten, replacing=replacing)
                unwritten.clear()

        items = [WorkItem(tuple(c), memory.get(chain_key(c[0]), ())) for c in chains(config, todo)]

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
            if row.episode_id in stored:
                # A replayed episode (its worker died after playing it): the first copy stands.
                logger.info("episode %s delivered twice; kept the stored one", row.episode_id)
                return
            stored.add(row.episode_id)
            unwritten.append(row)
            if len(unwritten) >= WRITE_BATCH:
                flush()
            result.rows.append(row)
            if on_episode is not None:
                on_episode(row)

        limits = LimitSpec(
            max_cost=config.max_cost,
            spent=result.cost_usd + result.replaced_cost_usd,
            requests_per_minute=config.requests_per_minute,
            tokens_per_minute=config.tokens_per_minute,
        )
        try:
            if items:
                with _long_lived_objects_frozen():
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_flush_every, WRITE_EVERY, flush)
                        await executor.run(RunJob(plan, run_id, limits), items, deliver)
                        tg.cancel_scope.cancel()
        finally:
            flush()  # episodes already delivered are stored even if the run stops early
        spent = executor.spent()
        result.spent_usd = spent if spent is not None else result.cost_usd
    finally:
        store.close()
    if result.stopped == "max_cost":
        logger.warning(
            "--max-cost %.2f reached: %d episodes budget-stopped, %d not started; "
            "finish with --resume %s --max-cost HIGHER",
            config.max_cost,
            result.budget_stopped,
            result.skipped,
            run_id,
        )
    result.rows.sort(key=lambda r: (r.model, r.architecture, r.faults, r.variant, r.task_id, r.trial))
    return result
