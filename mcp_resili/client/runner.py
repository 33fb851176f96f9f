"""The runner: plays (model × fault plan × task × trial) episodes concurrently through MCP and stores them."""

from __future__ import annotations

import secrets
import shlex
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from mcp_resili.client.agent import EpisodeSpec, play_episode
from mcp_resili.client.model import ARCHITECTURES
from mcp_resili.client.providers import DEFAULT_MODELS, create_model
from mcp_resili.errors import UserError
from mcp_resili.faults import parse_fault_spec, plan_to_dict
from mcp_resili.server.app import ResiliServer
from mcp_resili.store import DEFAULT_DB, EpisodeRow, Store
from mcp_resili.suites import DEFAULT_SUITE, Suite, get_suite
from mcp_resili.trace import Trace, TraceHeader

#: How a run against someone else's server labels its fault configuration.
EXTERNAL_FAULTS = "server"


class RunConfigError(UserError):
    """A run configuration that cannot work; raised before anything starts."""


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run (stored with it, so it can be reproduced)."""

    suite: str = DEFAULT_SUITE
    models: tuple[str, ...] = DEFAULT_MODELS
    faults: tuple[str, ...] = ()
    variant: str = "baseline"
    #: Several prompt variants in one run (overrides ``variant``); every variant meets the same faults.
    variants: tuple[str, ...] = ()
    trials: int = 3
    limit: int | None = None
    tasks: tuple[str, ...] = ()
    #: Use the suite's full task list rather than its default run set (``--limit`` implies it).
    all_tasks: bool = False
    #: Turn budget for every episode (None: each task's own ``constraints.max_turns``).
    max_turns: int | None = None
    concurrency: int = 8
    seed: int = 0
    server: str | None = None
    db: Path = DEFAULT_DB
    #: ReliabilityBench perturbation levels to sweep (``eps=0``, ``eps=0.2``...): prompt variants too.
    perturb: tuple[str, ...] = ()
    #: ``react`` (plain loop) or ``reflexion`` (a reflection prompt after every failed tool call).
    architecture: str = "react"
    #: Multiplies injected delays (latency faults) of the in-process server; 0 makes them instant.
    time_scale: float = 1.0

    def all_variants(self) -> tuple[str, ...]:
        """The prompt variants this run sweeps: ``variants`` and ``perturb`` levels, else ``variant``."""
        return (*self.variants, *self.perturb) or (self.variant,)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (paths as strings)."""
        data = asdict(self)
        data["db"] = str(self.db)
        return data


@dataclass(frozen=True)
class PlannedEpisode:
    """One cell of the run matrix."""

    model: str
    faults: str
    task_id: str
    trial: int
    variant: str = "baseline"


@dataclass
class RunResult:
    """What a finished run produced."""

    run_id: str
    config: RunConfig
    rows: list[EpisodeRow] = field(default_factory=list)


def plan_episodes(config: RunConfig, suite: Suite) -> list[PlannedEpisode]:
    """The run matrix, validated: every model, fault spec, task and trial."""
    if config.trials < 1:
        raise RunConfigError(f"--trials must be at least 1, got {config.trials}")
    if config.max_turns is not None and config.max_turns < 2:
        raise RunConfigError(
            f"--max-turns must be at least 2 (a call and the finish), got {config.max_turns}"
        )
    if config.concurrency < 1:
        raise RunConfigError(f"--concurrency must be at least 1, got {config.concurrency}")
    if config.server is not None and config.faults:
        raise RunConfigError(
            "--faults cannot be combined with --server: that server decides its own faults "
            '(e.g. --server "mcp-resili serve --faults resilibench")'
        )
    for model in config.models:
        create_model(model)  # fail now, with the list of known models, rather than mid-run
    faults = (EXTERNAL_FAULTS,) if config.server else (config.faults or (suite.default_faults,))
    if config.server is None:
        for spec in faults:
            parse_fault_spec(spec)
    if config.architecture not in ARCHITECTURES:
        raise RunConfigError(
            f"unknown architecture {config.architecture!r}; choose from {', '.join(ARCHITECTURES)}"
        )
    if config.time_scale < 0:
        raise RunConfigError(f"--time-scale must be >= 0, got {config.time_scale}")
    variants = config.all_variants()
    for variant in variants:
        try:
            suite.prompt(suite.default_tasks[0], variant)  # validates the variant
        except ValueError as exc:
            raise RunConfigError(str(exc)) from None
    if config.tasks:
        tasks = [suite.task(t) for t in config.tasks]
    elif config.all_tasks or config.limit is not None:
        tasks = list(suite.tasks)
    else:
        tasks = list(suite.default_tasks)
    if config.limit is not None:
        if config.limit < 1:
            raise RunConfigError(f"--limit must be at least 1, got {config.limit}")
        tasks = tasks[: config.limit]
    return [
        PlannedEpisode(model, spec, task.id, trial, variant)
        for spec in faults
        for model in config.models
        for variant in variants
        for task in tasks
        for trial in range(config.trials)
    ]


@asynccontextmanager
async def connect(config: RunConfig, suite: Suite, fault_spec: str) -> AsyncIterator[Client]:
    """An MCP client for one fault configuration: in-process, a stdio subprocess, or a URL."""
    if config.server is None:
        server = ResiliServer(
            suite, parse_fault_spec(fault_spec), seed=config.seed, time_scale=config.time_scale
        )
        async with Client(server.mcp) as client:
            yield client
    elif config.server.startswith(("http://", "https://")):
        async with Client(config.server, read_timeout_seconds=60) as client:
            yield client
    else:
        argv = shlex.split(config.server)
        if not argv:
            raise RunConfigError("--server is empty")
        params = StdioServerParameters(command=argv[0], args=argv[1:])
        async with Client(params, read_timeout_seconds=60) as client:
            yield client


def _episode_id(run_id: str, planned: PlannedEpisode) -> str:
    return f"{run_id}/{planned.faults}/{planned.model}/{planned.variant}/{planned.task_id}/{planned.trial}"


async def execute(
    config: RunConfig,
    *,
    on_episode: Callable[[EpisodeRow], None] | None = None,
    on_planned: Callable[[int], None] | None = None,
) -> RunResult:
    """Run the whole matrix and store every episode; returns the stored rows."""
    suite = get_suite(config.suite)
    planned = plan_episodes(config, suite)
    if on_planned is not None:
        on_planned(len(planned))
    run_id = f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    store = Store(config.db)
    result = RunResult(run_id, config)
    try:
        store.add_run(run_id, datetime.now(UTC).isoformat(), suite.name, config.seed, config.to_dict())
        limiter = anyio.CapacityLimiter(config.concurrency)
        by_fault: dict[str, list[PlannedEpisode]] = {}
        for p in planned:
            by_fault.setdefault(p.faults, []).append(p)
        async with AsyncExitStack() as stack:
            clients = {
                spec: await stack.enter_async_context(connect(config, suite, spec)) for spec in by_fault
            }
            tools = {spec: (await client.list_tools()).tools for spec, client in clients.items()}
            plans = {
                spec: (
                    {"kind": "external", "server": config.server}
                    if config.server
                    else plan_to_dict(parse_fault_spec(spec))
                )
                for spec in by_fault
            }

            async def one(p: PlannedEpisode) -> None:
                async with limiter:
                    row = await _play(
                        config, suite, run_id, p, clients[p.faults], tools[p.faults], plans[p.faults]
                    )
                store.add_episode(row)
                result.rows.append(row)
                if on_episode is not None:
                    on_episode(row)

            async with anyio.create_task_group() as tg:
                for p in planned:
                    tg.start_soon(one, p)
    finally:
        store.close()
    result.rows.sort(key=lambda r: (r.model, r.faults, r.variant, r.task_id, r.trial))
    return result


async def _play(
    config: RunConfig,
    suite: Suite,
    run_id: str,
    planned: PlannedEpisode,
    client: Client,
    tools: Sequence[Any],
    fault_plan: dict[str, Any],
) -> EpisodeRow:
    task = suite.task(planned.task_id)
    model = create_model(planned.model)
    fault_key = f"{task.id}/{planned.trial}"
    spec = EpisodeSpec(
        id=_episode_id(run_id, planned),
        fault_key=fault_key,
        seed=config.seed,
        task=task,
        prompt=suite.prompt(task, planned.variant),
        max_turns=config.max_turns or task.constraints.max_turns,
        architecture=config.architecture,
        stop_rules=suite.stop_rules,
    )
    outcome = await play_episode(client, model, spec, tools)
    header = TraceHeader(
        suite=suite.name,
        task=task.id,
        episode=spec.id,
        seed=config.seed,
        fault_plan=fault_plan,
        fault_key=fault_key,
        model=planned.model,
        variant=planned.variant,
        trial=planned.trial,
        max_turns=config.max_turns,
    )
    trace = Trace(header=header, events=outcome.events)
    score = None if outcome.termination == "infrastructure_error" else suite.score(task, trace)
    tokens_in = sum(getattr(e, "input_tokens", 0) for e in outcome.events)
    tokens_out = sum(getattr(e, "output_tokens", 0) for e in outcome.events)
    return EpisodeRow(
        run_id=run_id,
        episode_id=spec.id,
        model=planned.model,
        faults=planned.faults,
        variant=planned.variant,
        task_id=task.id,
        trial=planned.trial,
        termination=outcome.termination,
        label=None if score is None else score.label,
        value=None if score is None else score.value,
        score=None if score is None else score.model_dump(mode="json"),
        trace=trace.to_jsonl(),
        input_tokens=tokens_in,
        output_tokens=tokens_out,
    )
