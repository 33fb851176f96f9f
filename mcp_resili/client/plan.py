"""The run matrix: a run's configuration, resolved once against its suite, and the episodes it plays.

The top (`runner.execute`, a Ray worker, the CLI) resolves a `RunConfig` and its `Suite` into a
`RunPlan` once (`RunPlan.resolve`): fault plans parsed, stop rules and scripted agents chosen, variants
and tasks checked. Everything below is handed the plan. Every executor (in this process, or Ray
workers) plays exactly the episodes `RunPlan.episodes` returns, identified by `episode_id`; results go
back to the one driver that stores them.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qsl, urlsplit

from pydantic import TypeAdapter, ValidationError

from mcp_resili.agents.model import ARCHITECTURES, Model
from mcp_resili.agents.scripted import SCRIPTED_AGENTS
from mcp_resili.client.providers import DEFAULT_MODELS, validate_model_spec
from mcp_resili.constants import AUTH_TOKEN_ENV, DEFAULT_SUITE
from mcp_resili.errors import UserError
from mcp_resili.faults import BasePlan, FaultSpecParser, FaultSpecScope, parse_fault_spec
from mcp_resili.faults.base import FaultSpecError, parse_plan
from mcp_resili.faults.model_api import ModelFaultPlan, parse_model_fault_spec
from mcp_resili.faults.rng import derive_rng
from mcp_resili.faults.rules import check_rule_tools
from mcp_resili.registry.suites import Suite
from mcp_resili.scoring.termination import NO_STOP_RULES, StopRules
from mcp_resili.store import DEFAULT_DB, Store
from mcp_resili.tasks.model import Task

#: How a run against someone else's server labels its fault configuration.
EXTERNAL_FAULTS = "server"

#: `RunConfig` fields that define which episodes a run has and how they play: fixed for a resume.
MATRIX_FIELDS = (
    "suite",
    "models",
    "faults",
    "variant",
    "variants",
    "perturb",
    "architecture",
    "stop_rules",
    "all_tasks",
    "trials",
    "limit",
    "stratified",
    "tasks",
    "seed",
    "server",
    "base_url",
    "max_turns",
    "max_tokens",
    "time_limit",
    "prices",
    # Injected delays decide which calls outlast a time limit: part of what the episodes measured.
    "time_scale",
    "agent_cmd",
    "llm_faults",
)


#: The longest ``--ramp-up`` (an hour): past it, a typo rather than a plan.
MAX_RAMP_UP = 3600.0


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
    #: This many tasks of the suite's full list: its first N, or with ``stratified`` a sample.
    limit: int | None = None
    #: ``limit`` draws a sample stratified by (task type, complexity) with ``seed`` (`select_tasks`);
    #: the CLI's ``--limit`` sets it (``--first`` does not).
    stratified: bool = False
    tasks: tuple[str, ...] = ()
    #: Use the suite's full task list rather than its default run set (``--limit`` implies it).
    all_tasks: bool = False
    #: Turn budget for every episode (None: each task's own ``constraints.max_turns``).
    max_turns: int | None = None
    concurrency: int = 8
    #: Seconds over which the ``concurrency`` slots open (0: all at once; None: one every
    #: `executor.SLOT_OPENING_INTERVAL`), so the first episodes do not all start in one instant.
    ramp_up: float | None = None
    seed: int = 0
    server: str | None = None
    db: Path = DEFAULT_DB
    #: ReliabilityBench perturbation levels to sweep (``eps=0``, ``eps=0.2``...): prompt variants too.
    perturb: tuple[str, ...] = ()
    #: ``react`` (plain loop) or ``reflexion`` (after a failed trial the model writes a reflection that
    #: the next trials of the same task start with; those trials then run in order).
    architecture: str = "react"
    #: Stop rules ending episodes early: None (the suite's own), or a set by name (``resilibench``,
    #: ``none``; see `mcp_resili.scoring.termination`).
    stop_rules: str | None = None
    #: Multiplies injected delays (latency faults) of the in-process server; 0 makes them instant.
    time_scale: float = 1.0
    #: Endpoint for hosted models (an OpenAI-compatible server, a proxy); keys come from the environment.
    base_url: str | None = None
    #: Per-provider concurrency (e.g. a provider's rate limit); ``None``: the run's ``concurrency``.
    provider_concurrency: int | None = None
    #: A cap on the run's spend in USD: once reached no model call starts (see `client.limits`).
    max_cost: float | None = None
    #: Requests and tokens per minute per provider key, for the whole run (all workers together).
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    #: Episode limits overriding the task's constraints (``timeout``) when set.
    max_tokens: int | None = None
    time_limit: float | None = None
    #: A TOML price file overriding the built-in table.
    prices: Path | None = None
    #: (fault spec, its plan as JSON) for every fault spec, fixed when the run started
    #: (`freeze_fault_plans`): a resume and every worker play these plans, whatever a fault file
    #: holds by then and wherever they run.
    fault_plans: tuple[tuple[str, str], ...] = ()
    #: An agent program to benchmark instead of the built-in loop (``run --agent-cmd``): started once per
    #: episode with the task prompt on stdin and the endpoints in its environment (docs/harnesses.md).
    agent_cmd: str | None = None
    #: Model-API faults (``run --llm-faults``: ``llm:light|medium|heavy``, ``none`` or a rules file) a
    #: gateway injects into every model call, the agent program's or a built-in model's.
    llm_faults: str | None = None
    #: The model-API fault plan as JSON, fixed when the run started (as ``fault_plans``).
    llm_fault_plan: str | None = None

    def all_variants(self) -> tuple[str, ...]:
        """The prompt variants this run sweeps: ``variants`` and ``perturb`` levels, else ``variant``."""
        return (*self.variants, *self.perturb) or (self.variant,)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (paths as strings)."""
        data = asdict(self)
        data["db"] = str(self.db)
        data["prices"] = None if self.prices is None else str(self.prices)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Rebuild a stored config (the inverse of `to_dict`); unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RunConfigError(
                f"stored run config has unknown keys {unknown} (written by a newer version?)"
            )
        try:  # types checked and JSON's lists made tuples, strings paths
            return TypeAdapter(cls).validate_python(data)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(part) for part in problem["loc"])
            raise RunConfigError(f"stored run config is damaged: {where}: {problem['msg']}") from None


@dataclass(frozen=True)
class PlannedEpisode:
    """One cell of the run matrix."""

    model: str
    faults: str
    task_id: str
    trial: int
    variant: str = "baseline"


def episode_id(run_id: str, planned: PlannedEpisode) -> str:
    """The stored id of ``planned`` in run ``run_id`` (also what seeds nothing: faults use task/trial)."""
    return f"{run_id}/{planned.faults}/{planned.model}/{planned.variant}/{planned.task_id}/{planned.trial}"


class Stratified(Protocol):
    """A task, or its `TaskSummary`: what a ``--limit`` sample needs of it."""

    @property
    def id(self) -> str:
        """The task's id."""

    @property
    def task_type(self) -> str:
        """The task's type."""

    @property
    def complexity(self) -> str:
        """The task's complexity."""


StratifiedT = TypeVar("StratifiedT", bound=Stratified)


def stratum(task: Stratified) -> tuple[str, str]:
    """The stratum a task belongs to in a ``--limit`` sample: (task type, complexity)."""
    return (task.task_type, task.complexity)


def select_tasks(tasks: Sequence[StratifiedT], limit: int, seed: int) -> list[StratifiedT]:
    """A sample of ``limit`` tasks, stratified by (task type, complexity), in the list's order.

    ``tasks`` may be tasks or their summaries (`Suite.task_summaries`: no task is built).

    Every stratum gets one task first (in the order strata appear, while the limit lasts); the rest of
    the limit is shared out in proportion to the strata's remaining sizes (largest remainders first,
    ties to the stratum that appears first). Within a stratum the tasks are drawn with an RNG derived
    from ``seed`` and the stratum's name, so the same seed gives the same sample on every machine.
    """
    if limit >= len(tasks):
        return list(tasks)
    strata: dict[tuple[str, str], list[StratifiedT]] = {}
    for task in tasks:
        strata.setdefault(stratum(task), []).append(task)
    quota = {key: 0 for key in strata}
    for key in list(strata)[:limit]:
        quota[key] = 1
    rest = limit - sum(quota.values())
    spare = {key: len(members) - quota[key] for key, members in strata.items()}
    pool = sum(spare.values())
    if rest > 0 and pool > 0:
        shares = {key: rest * n / pool for key, n in spare.items()}
        for key, share in shares.items():
            quota[key] += int(share)
        order = sorted(strata, key=lambda k: (-(shares[k] - int(shares[k])), list(strata).index(k)))
        for key in order[: limit - sum(quota.values())]:
            quota[key] += 1
    chosen: set[str] = set()
    for key, members in strata.items():
        rng = derive_rng(seed, "task-sample", "/".join(key), 0)
        chosen.update(t.id for t in rng.sample(members, quota[key]))
    return [t for t in tasks if t.id in chosen]


def _check_limits(config: RunConfig) -> None:
    if config.trials < 1:
        raise RunConfigError(f"--trials must be at least 1, got {config.trials}")
    if config.concurrency < 1:
        raise RunConfigError(f"--concurrency must be at least 1, got {config.concurrency}")
    for name in ("provider_concurrency", "max_turns", "max_tokens"):
        value = getattr(config, name)
        if value is not None and value < 1:
            raise RunConfigError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    for name in ("max_cost", "time_limit", "requests_per_minute", "tokens_per_minute"):
        value = getattr(config, name)
        # Written so that NaN fails too (every comparison with it is false).
        if value is not None and not value > 0:
            raise RunConfigError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if not (0 <= config.time_scale < math.inf):
        raise RunConfigError(f"--time-scale must be a finite number >= 0, got {config.time_scale}")
    if config.ramp_up is not None and not 0 <= config.ramp_up <= MAX_RAMP_UP:
        raise RunConfigError(f"--ramp-up must be between 0 and {MAX_RAMP_UP:g} seconds, got {config.ramp_up}")
    if config.limit is not None and config.limit < 1:
        raise RunConfigError(f"--limit must be at least 1, got {config.limit}")
    if not -(2**63) <= config.seed < 2**63:  # the store keeps the seed as a 64-bit integer
        raise RunConfigError(f"--seed must fit in 64 bits (-2**63 to 2**63 - 1), got {config.seed}")


def _check_endpoints(config: RunConfig, agents: Mapping[str, Callable[[], Model]]) -> None:
    if config.base_url is not None:
        parts = urlsplit(config.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RunConfigError(f"--base-url must be an http(s) URL, got {config.base_url!r}")
        if parts.username or parts.password:
            # The URL is stored with the run; credentials in it would be a secret on disk.
            raise RunConfigError("--base-url must not embed credentials; put the key in the environment")
    if config.server is not None and config.server.startswith(("http://", "https://")):
        _check_server_url(config.server)
    if config.server is not None and config.faults:
        raise RunConfigError(
            "--faults cannot be combined with --server: that server decides its own faults "
            '(e.g. --server "mcp-resili serve --faults resilibench")'
        )
    for model in config.models:
        # Fail now, with the list of known models or the missing key's variable, rather than mid-run.
        validate_model_spec(model, base_url=config.base_url, agents=agents)


#: Query parameter names that carry a credential (`_check_server_url`).
_SECRET_PARAMETER = re.compile(
    r"^(?:.*[_-])?(?:token|key|apikey|secret|passw(?:or)?d|auth|authorization|sig|signature|"
    r"credentials?|session(?:[_-]?id)?)$",
    re.IGNORECASE,
)


def _check_server_url(url: str) -> None:
    """A ``--server`` URL is stored with the run and in every trace header: no credentials in it."""
    parts = urlsplit(url)
    instead = f"set {AUTH_TOKEN_ENV} (sent as a bearer token)"
    if parts.username or parts.password:
        raise RunConfigError(
            f"--server must not embed credentials (they would be stored with the run); {instead}"
        )
    secret = next((name for name, _ in parse_qsl(parts.query) if _SECRET_PARAMETER.search(name)), None)
    if secret is not None:
        raise RunConfigError(
            f"--server carries what looks like a credential in its query ({secret!r}), which would be "
            f"stored with the run; {instead}"
        )


#: The other installed suites, by name: asked only on an unusual path (an agent or stop rules that
#: belong to another suite), so that an ordinary run never loads them.
OtherSuites = Callable[[], Mapping[str, Suite]]


def _no_other_suites() -> Mapping[str, Suite]:
    return {}


def _check_suite_agents(config: RunConfig, suite: Suite, others: OtherSuites) -> None:
    """A scripted agent a suite brings plays that suite's tasks only (the generic ones play any)."""
    for model in config.models:
        provider, _, name = model.removeprefix("text:").partition(":")
        if provider != "scripted" or name in SCRIPTED_AGENTS or name in suite.agents:
            continue
        owners = sorted(other.name for other in others().values() if name in other.agents)
        if not owners:
            continue  # not an agent of any suite: the model check names what is available
        usable = ", ".join(f"scripted:{n}" for n in sorted({*SCRIPTED_AGENTS, *suite.agents}))
        raise RunConfigError(
            f"{model} is an agent of the {' and '.join(owners)} suite and plays its tasks only; "
            f"with --suite {suite.name} use one of: {usable}"
        )


def run_task_ids(config: RunConfig, suite: Suite) -> list[str]:
    """The ids of the tasks a run plays: named ones, a ``--limit`` sample, the full list, or the default set.

    The full list is read through its summaries, so no more than one task is held at a time; each
    task drawn from it is built once here, so a broken one stops the run before any episode. They are
    built last to first: the run plays them first to last, and the task cache keeps the last built.
    """
    if config.tasks:
        return [suite.task(t).id for t in reversed(config.tasks)][::-1][: config.limit]
    if config.limit is None and not config.all_tasks:
        return [t.id for t in suite.default_tasks]
    if config.limit is not None and config.stratified:
        ids = [s.id for s in select_tasks(suite.task_summaries, config.limit, config.seed)]
    else:
        ids = [s.id for s in suite.task_summaries][: config.limit]
    for task_id in reversed(ids):
        suite.task(task_id)
    return ids


def run_tasks(config: RunConfig, suite: Suite) -> list[Task]:
    """The tasks a run plays (`run_task_ids`, built)."""
    return [suite.task(t) for t in run_task_ids(config, suite)]


def stop_rules_for(config: RunConfig, suite: Suite, others: OtherSuites = _no_other_suites) -> StopRules:
    """The stop rules episodes of ``config`` run under: the suite's own unless the run names others.

    A run may name ``none``, or the rules of another installed suite by their name.
    """
    own = suite.own_stop_rules
    if config.stop_rules is None or config.stop_rules == own.name:
        return own
    if config.stop_rules == NO_STOP_RULES.name:
        return NO_STOP_RULES
    named = {o.own_stop_rules.name: o.own_stop_rules for o in others().values()}
    if config.stop_rules in named:
        return named[config.stop_rules]
    choices = ", ".join(dict.fromkeys([own.name, NO_STOP_RULES.name, *sorted(named)]))
    raise RunConfigError(
        f"unknown --stop-rules {config.stop_rules!r}; choose from {choices} "
        f"(default: the suite's own, {own.name})"
    )


@dataclass(frozen=True)
class RunPlan:
    """A run resolved once against its suite: what every layer below the top is handed.

    Built by `RunPlan.resolve`, which checks everything that can be checked before an episode
    starts (limits, endpoints, models, fault specs, architecture, stop rules, variants, tasks).
    """

    #: The configuration, its fault plans frozen (``RunConfig.fault_plans``).
    config: RunConfig
    suite: Suite
    #: Fault spec -> the plan its episodes play (empty against an external ``--server``).
    fault_plans: Mapping[str, BasePlan]
    stop_rules: StopRules
    #: The scripted agents this run may play: the generic ones and the suite's own.
    agents: Mapping[str, Callable[[], Model]]
    #: The tasks the run plays, in order.
    task_ids: tuple[str, ...]
    #: The model-API fault plan of ``--llm-faults`` (None: no gateway before the models).
    model_fault_plan: ModelFaultPlan | None = None

    @classmethod
    def resolve(cls, config: RunConfig, suite: Suite, others: OtherSuites = _no_other_suites) -> RunPlan:
        """Check ``config`` against ``suite`` and resolve it.

        Raises `RunConfigError` (or another `UserError`) in one line before anything runs. ``others``
        is asked only to name another suite's agent or stop rules.
        """
        _check_limits(config)
        _check_suite_agents(config, suite, others)
        agents = {**SCRIPTED_AGENTS, **suite.agents}
        _check_endpoints(config, agents)
        _check_agent_command(config)
        model_fault_plan = _model_fault_plan(config)
        if model_fault_plan is not None:
            config = replace(config, llm_fault_plan=model_fault_plan.model_dump_json())
        specs = () if config.server else (config.faults or (suite.default_faults,))
        scope = suite.spec_scope.with_elsewhere(lambda: _spec_parsers(others))
        plans = {spec: _fault_plan(config, spec, scope) for spec in specs}
        for spec, plan in plans.items():  # a rule whose pattern matches no tool would never fire
            check_rule_tools(plan, (t.name for t in suite.library.specs), spec, f"suite {suite.name!r}")
        if config.architecture not in ARCHITECTURES:
            raise RunConfigError(
                f"unknown architecture {config.architecture!r}; choose from {', '.join(ARCHITECTURES)}"
            )
        stop_rules = stop_rules_for(config, suite, others)
        for variant in config.all_variants():
            try:
                suite.prompt(suite.default_tasks[0], variant)  # validates the variant
            except ValueError as exc:
                raise RunConfigError(str(exc)) from None
        task_ids = tuple(run_task_ids(config, suite))
        # Keys keep their order (no sort_keys): a plan may draw from a mapping in order, e.g. a fault
        # type by cumulative weight, so a reordered plan would meet other faults for the same rolls.
        frozen = tuple((spec, json.dumps(plan.to_dict())) for spec, plan in plans.items())
        config = replace(config, fault_plans=frozen) if frozen else config
        return cls(config, suite, plans, stop_rules, agents, task_ids, model_fault_plan)

    @property
    def fault_specs(self) -> tuple[str, ...]:
        """The run's fault configurations (``server`` against an external one)."""
        return tuple(self.fault_plans) or (EXTERNAL_FAULTS,)

    def episodes(self) -> list[PlannedEpisode]:
        """The run matrix: every fault spec, task, model, variant and trial (see `iter_cells`)."""
        return [episode for cell in self.iter_cells() for episode in cell]

    def episode_count(self) -> int:
        """How many episodes the run has, without listing them."""
        config = self.config
        return (
            len(self.fault_specs) * len(config.models) * len(config.all_variants()) * len(self.task_ids)
        ) * config.trials

    def iter_cells(self, models: Sequence[str] | None = None) -> Iterator[list[PlannedEpisode]]:
        """The matrix one (fault spec, task, model, variant) at a time, its trials in order.

        A task's models and variants are neighbours: a run a cost cap stops early has played every
        model and variant on the same tasks but for the few in flight (its comparisons stay paired),
        and the task is built and its bounds searched once for all of them. Nothing is listed ahead:
        a run of 200,000 episodes holds one cell at a time. ``models`` restricts it to some of the
        run's models (an executor's share per provider).
        """
        config = self.config
        trials = range(config.trials)
        variants = config.all_variants()
        chosen = [m for m in config.models if models is None or m in models]
        for spec in self.fault_specs:
            for task_id in self.task_ids:
                for model in chosen:
                    for variant in variants:
                        yield [PlannedEpisode(model, spec, task_id, trial, variant) for trial in trials]

    def index(self, planned: PlannedEpisode) -> int | None:
        """The position of ``planned`` in `episodes` (None if the run has no such episode)."""
        positions = self._positions()
        try:
            spec = positions[0][planned.faults]
            task = positions[1][planned.task_id]
            model = positions[2][planned.model]
            variant = positions[3][planned.variant]
        except KeyError:
            return None
        trials = self.config.trials
        if not 0 <= planned.trial < trials:
            return None
        sizes = [len(p) for p in positions]
        return (((spec * sizes[1] + task) * sizes[2] + model) * sizes[3] + variant) * trials + planned.trial

    def _positions(self) -> tuple[dict[str, int], ...]:
        cached = self.__dict__.get("_positions_cache")
        if cached is None:
            cached = tuple(
                {value: n for n, value in enumerate(values)}
                for values in (
                    self.fault_specs,
                    self.task_ids,
                    self.config.models,
                    self.config.all_variants(),
                )
            )
            object.__setattr__(self, "_positions_cache", cached)
        return cached


ChainKey = tuple[str, str, str, str]


def chain_key(p: PlannedEpisode) -> ChainKey:
    """The episodes that share Reflexion memory: one (faults, model, variant, task)."""
    return (p.faults, p.model, p.variant, p.task_id)


def chains(config: RunConfig, todo: Sequence[PlannedEpisode]) -> list[list[PlannedEpisode]]:
    """Episodes that must run one after another, as lists.

    Under Reflexion, the trials of one (faults, model, variant, task) in trial order: each starts with
    the reflections of the earlier ones. Otherwise every episode on its own.
    """
    if config.architecture != "reflexion":
        return [[p] for p in todo]
    grouped: dict[ChainKey, list[PlannedEpisode]] = {}
    for p in todo:
        grouped.setdefault(chain_key(p), []).append(p)
    return [sorted(chain, key=lambda p: p.trial) for chain in grouped.values()]


#: Programs an agent command may start with that mean "this Python": the runner's own interpreter.
PYTHON_NAMES = ("python", "python3")


def agent_argv(command: str) -> list[str]:
    """``--agent-cmd`` split into argv; a leading ``python`` is the runner's own interpreter.

    So a harness sees the packages the runner was installed with, whichever ``python`` the shell finds
    first. `RunConfigError` when the command is empty or cannot be split.
    """
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise RunConfigError(f"--agent-cmd cannot be split into words: {exc}") from None
    if not argv:
        raise RunConfigError("--agent-cmd is empty")
    if argv[0] in PYTHON_NAMES:
        argv[0] = sys.executable
    return argv


def _check_agent_command(config: RunConfig) -> None:
    """An agent command that can start, with options that go with it (refused in one line)."""
    if config.agent_cmd is None:
        return
    program = agent_argv(config.agent_cmd)[0]
    if shutil.which(program) is None:
        raise RunConfigError(f"--agent-cmd: program {program!r} not found (or not executable)")
    if config.server is not None:
        raise RunConfigError(
            "--agent-cmd plays against the runner's own MCP server (the agent gets its URL); drop --server"
        )
    if config.architecture != "react":
        raise RunConfigError("--architecture goes with the built-in agent loop, not --agent-cmd")
    text = [m for m in config.models if m.startswith("text:")]
    if text:
        raise RunConfigError(
            f"--agent-cmd asks the model API directly; {text[0]} (the built-in text protocol) "
            "cannot be played"
        )


def _model_fault_plan(config: RunConfig) -> ModelFaultPlan | None:
    """The model-API fault plan: the one the run started with, else parsed from ``--llm-faults`` now."""
    if config.llm_faults is None:
        return None
    if config.llm_fault_plan is not None:
        try:
            return ModelFaultPlan.model_validate_json(config.llm_fault_plan)
        except ValueError as exc:  # a stored config edited or corrupted
            raise RunConfigError(f"the run's stored --llm-faults plan is damaged: {exc}") from None
    return parse_model_fault_spec(config.llm_faults)


def _spec_parsers(others: OtherSuites) -> dict[str, FaultSpecParser]:
    """The other suites' fault SPEC names (a suite can play under another's failure model)."""
    parsers: dict[str, FaultSpecParser] = {}
    for other in others().values():
        for name, parser in other.fault_specs.items():
            parsers.setdefault(name, parser)
    return parsers


def _fault_plan(config: RunConfig, spec: str, scope: FaultSpecScope) -> BasePlan:
    """The plan of fault spec ``spec``: the one the run started with, else parsed from the spec now."""
    frozen = dict(config.fault_plans).get(spec)
    if frozen is None:
        return parse_fault_spec(spec, scope)
    try:
        return parse_plan(json.loads(frozen))
    except (ValueError, FaultSpecError) as exc:  # a stored config edited or corrupted
        raise RunConfigError(f"the run's stored plan of fault spec {spec!r} is damaged: {exc}") from None


def plans_of_stored_episodes(db: Path, run_id: str, specs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The fault plan each spec's stored episodes played, from their trace headers.

    For runs stored before the config kept its plans: a resume then plays what the run started with
    too, not a fault file as it is now. Specs with no stored episode yet are left out.
    """
    wanted, found = set(specs), {}
    store = Store(db)
    try:
        for row in store.iter_episodes(run_id):
            if row.faults in wanted and row.faults not in found:
                header = json.loads(row.trace.split("\n", 1)[0] or "{}")
                if isinstance(header, dict) and isinstance(header.get("fault_plan"), dict):
                    found[row.faults] = json.dumps(header["fault_plan"])  # key order kept
                if len(found) == len(wanted):
                    break
    finally:
        store.close()
    return tuple((spec, found[spec]) for spec in specs if spec in found)


def load_run_config(db: Path, run_id: str) -> RunConfig:
    """The stored configuration of ``run_id`` in ``db`` (to resume it)."""
    if not db.exists():
        raise RunConfigError(f"--resume {run_id}: no results database at {db}")
    store = Store(db)
    try:
        data = store.run_config(run_id)
        known = store.run_ids(limit=5)
    finally:
        store.close()
    if data is None:
        hint = f"; recent runs in {db}: {', '.join(known)}" if known else f"; {db} holds no runs"
        raise RunConfigError(f"--resume: no run {run_id!r}{hint}")
    return RunConfig.from_dict(data)
