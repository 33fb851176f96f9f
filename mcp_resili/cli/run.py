"""``run``: play models against a suite through MCP, score every episode, store and summarise."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sqlite3
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from mcp_resili.cli.common import (
    Commands,
    add_seed,
    one_line,
    sigterm_stops_like_ctrl_c,
    stdout_console,
    user_error_in,
)
from mcp_resili.constants import DEFAULT_SUITE
from mcp_resili.errors import UserError

if TYPE_CHECKING:
    from rich.console import Console

    from mcp_resili.client.executor import Executor
    from mcp_resili.client.runner import RunConfig, RunResult
    from mcp_resili.registry.suites import Suite

#: Hosted runs of at least this many episodes print their cost estimate before starting.
ESTIMATE_THRESHOLD = 20
#: Exit status of a run none of whose episodes says anything about the agent (infrastructure only).
EXIT_NOTHING_SCORED = 2
#: Exit status of a run stopped by Ctrl-C or SIGTERM (128 + the signal, what a shell reports).
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
#: The model an agent program asks for when ``--model`` is not given (offline: the model server's).
AGENT_CMD_MODELS = ("scripted:oracle",)
#: Episodes in flight when ``--concurrency`` is not given (but see `with_default_concurrency`).
DEFAULT_CONCURRENCY = 8
#: Options that may change on ``--resume`` (how episodes play, not which).
RESUMABLE = (
    "concurrency",
    "provider_concurrency",
    "ramp_up",
    "max_cost",
    "requests_per_minute",
    "tokens_per_minute",
)


def register(commands: Commands) -> None:
    """Add ``run``."""
    run = commands.add_parser(
        "run",
        help="play agents against the server and score them (offline by default)",
        description="Play every model × fault spec × variant × task × trial through MCP, score each "
        "episode, store it in SQLite and print a summary table.",
    )
    # Options that define the run matrix default to None so that `--resume` can refuse them.
    _add_matrix_options(run)
    _add_program_options(run)
    _add_selection_options(run)
    _add_execution_options(run)
    _add_limit_options(run)
    _add_output_options(run)
    run.set_defaults(handler=run_command)


def _add_matrix_options(run: argparse.ArgumentParser) -> None:
    """What plays: suite, models, fault specs, prompt variants, architecture."""
    from mcp_resili.agents.model import ARCHITECTURES
    from mcp_resili.report.ladder import LADDERS

    run.add_argument("--suite", help=f"the benchmark suite to play (default: {DEFAULT_SUITE})")
    run.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="SPEC",
        help="repeatable: scripted:NAME, anthropic:MODEL, openai:MODEL, text:SPEC (keys from "
        "ANTHROPIC_API_KEY / OPENAI_API_KEY); default: scripted:oracle scripted:naive",
    )
    run.add_argument(
        "--faults", action="append", metavar="SPEC", help="repeatable fault spec; default: the suite's own"
    )
    run.add_argument(
        "--ladder",
        action="append",
        choices=sorted(LADDERS),
        metavar="FAMILY",
        help="repeatable: play a fault family's standard ladder, from none to harsh, and draw each model's "
        f"robustness curve ({', '.join(sorted(LADDERS))}); instead of --faults",
    )
    run.add_argument(
        "--variant",
        action="append",
        dest="variants",
        metavar="VARIANT",
        help="repeatable prompt variant: baseline | cot | optimal | flawed:TYPE[:SEVERITY[:METHOD]] "
        "(resilibench), hint (toolmaze); default: baseline",
    )
    run.add_argument(
        "--perturb",
        action="append",
        metavar="VARIANT",
        help="repeatable; perturbation levels to sweep, e.g. eps=0 eps=0.1 (reliabilitybench)",
    )
    run.add_argument(
        "--architecture",
        choices=ARCHITECTURES,
        help="react (default), or reflexion: the model's reflections on failed trials feed later trials",
    )
    run.add_argument(
        "--stop-rules",
        metavar="NAME",
        help="rules that end an episode early: resilibench, none (default: the suite's own)",
    )


def _add_program_options(run: argparse.ArgumentParser) -> None:
    """Agent programs instead of the built-in loop, and faults at the model API."""
    run.add_argument(
        "--agent-cmd",
        metavar="CMD",
        help="benchmark an agent program: started per episode with the prompt on stdin and the MCP and "
        "model endpoints in its environment (docs/harnesses.md); --model names the model it asks for "
        "(default: scripted:oracle, offline)",
    )
    run.add_argument(
        "--llm-faults",
        metavar="SPEC",
        help="model-API faults on every model call, through a gateway: none | llm:light | llm:medium | "
        "llm:heavy | PATH.toml|.json (docs/llm.md)",
    )


def _add_selection_options(run: argparse.ArgumentParser) -> None:
    """Which tasks, how many trials, with which seed."""
    run.add_argument("--trials", type=int, help="trials per task (default: 3)")
    run.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="N tasks of the suite's full list, sampled across its (task type, complexity) strata "
        "with --seed: every stratum gets one, the rest in proportion to its size "
        "(default: the suite's default set)",
    )
    run.add_argument(
        "--first", action="store_true", default=None, help="with --limit: take the list's first N instead"
    )
    run.add_argument("--all-tasks", action="store_true", default=None, help="use every task of the full list")
    run.add_argument("--task", action="append", dest="tasks", metavar="ID", help="repeatable; run only these")
    add_seed(run, default=None, what="faults")


def _add_execution_options(run: argparse.ArgumentParser) -> None:
    """Where and how episodes play: server, endpoint, executor, concurrency, time scale."""
    run.add_argument(
        "--server", help="any MCP server: 'CMD ARGS' (stdio) or http://HOST:PORT/mcp; default: in-process"
    )
    run.add_argument("--base-url", help="endpoint for hosted models, e.g. http://localhost:11434/v1 (Ollama)")
    run.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: this process (default); ray: a Ray cluster's workers (pip install 'mcp-resili[ray]')",
    )
    run.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --executor ray: the cluster to join from one of its nodes, e.g. auto or HOST:6379 "
        "(default: start or join a local Ray instance)",
    )
    run.add_argument(
        "--ray-workers",
        type=int,
        metavar="N",
        help="with --executor ray: worker actors (default: one per CPU; never more than --concurrency)",
    )
    run.add_argument(
        "--concurrency",
        type=int,
        help="episodes in flight, across all workers (default: 8; only scripted agents on a suite's "
        "own real servers, in this process: one per CPU, at most 8)",
    )
    run.add_argument("--provider-concurrency", type=int, help="episodes in flight per provider")
    run.add_argument(
        "--ramp-up",
        type=float,
        metavar="SECONDS",
        help="open the concurrency slots over this time, not all at once (0: at once; default: one "
        "slot every 4 ms)",
    )
    run.add_argument(
        "--time-scale",
        type=float,
        help="multiply injected delays (latency faults) of the in-process server; 0 = no waiting",
    )


def _add_limit_options(run: argparse.ArgumentParser) -> None:
    """Per-episode limits, and the run-wide cost cap and rate limits."""
    run.add_argument("--max-turns", type=int, help="model turns per episode (default: the task's)")
    run.add_argument("--max-tokens", type=int, help="input+output tokens per episode")
    run.add_argument("--time-limit", type=float, help="seconds per episode (default: the task's timeout)")
    run.add_argument(
        "--max-cost",
        type=float,
        metavar="USD",
        help="cap the run's spend: once reached no model call starts; episodes in flight stop "
        "(budget-stopped: not stored, not scored, played by --resume)",
    )
    run.add_argument(
        "--requests-per-minute", type=float, metavar="N", help="model requests per minute per provider key"
    )
    run.add_argument(
        "--tokens-per-minute", type=float, metavar="N", help="model tokens per minute per provider key"
    )
    run.add_argument("--prices", type=Path, help="TOML price table overriding the built-in one")


def _add_output_options(run: argparse.ArgumentParser) -> None:
    """Storage, resume, estimate and what is printed."""
    from mcp_resili.constants import BREAKDOWN_KEYS

    run.add_argument("--db", type=Path, default=Path("mcp-resili.db"), help="results database (SQLite)")
    run.add_argument(
        "--resume",
        metavar="RUN_ID",
        help="play only the episodes RUN_ID has not stored, and again those stored as infrastructure errors",
    )
    run.add_argument("--estimate", action="store_true", help="print the token/cost estimate and exit")
    run.add_argument("--trace-dir", type=Path, metavar="DIR", help="also write each episode's trace there")
    run.add_argument(
        "--by",
        action="append",
        choices=BREAKDOWN_KEYS,
        default=[],
        help="repeatable: also break the summary down by this key",
    )
    run.add_argument("--json", action="store_true", help="print a machine-readable summary on stdout")
    run.add_argument(
        "--baseline",
        metavar="SPEC",
        help="with two fault specs or more: the one degradation is measured from (default: none, else "
        "the mildest spec)",
    )


def suite_argument(name: str) -> str:
    """A suite name as given, or a task directory's absolute path (other processes find it too)."""
    from mcp_resili.registry.loader import is_suite_path

    return str(Path(name).expanduser().resolve()) if is_suite_path(name) else name


def run_config(args: argparse.Namespace) -> RunConfig:
    """The run's configuration: from the options, or the stored one of ``--resume RUN_ID``."""
    from mcp_resili.client.runner import MATRIX_FIELDS, RunConfigError, load_run_config

    if args.resume is not None:
        given = [
            f"--{name.replace('_', '-')}" for name in MATRIX_FIELDS if getattr(args, name, None) is not None
        ]
        given += ["--first"] if args.first else []
        given += ["--ladder"] if args.ladder else []
        if given:
            raise RunConfigError(
                f"--resume replays the stored configuration of {args.resume}; drop {', '.join(given)}"
            )
        config = load_run_config(args.db, args.resume)
        overrides = {name: getattr(args, name) for name in RESUMABLE if getattr(args, name) is not None}
        return replace(config, db=args.db, **overrides)
    return _new_config(args)


def _new_config(args: argparse.Namespace) -> RunConfig:
    from mcp_resili.client.runner import RunConfig, RunConfigError

    if args.ladder and args.faults:
        raise RunConfigError(
            "--ladder plays a family's standard fault specs; drop --faults (or name every spec with --faults)"
        )
    if args.first and args.limit is None:
        raise RunConfigError("--first goes with --limit N (take the first N tasks instead of a sample)")
    # No --model: the agent program's default, else the suite's own defaults (`with_suite_models`).
    default_models = AGENT_CMD_MODELS if args.agent_cmd is not None else ()
    return RunConfig(
        suite=suite_argument(args.suite or DEFAULT_SUITE),
        models=tuple(args.models or default_models),
        faults=tuple(args.faults or ()) or ladder_specs(args.ladder or ()),
        variants=tuple(args.variants or ()),
        perturb=tuple(args.perturb or ()),
        architecture=args.architecture or "react",
        stop_rules=args.stop_rules,
        time_scale=1.0 if args.time_scale is None else args.time_scale,
        trials=3 if args.trials is None else args.trials,
        limit=args.limit,
        stratified=args.limit is not None and not args.first,
        all_tasks=bool(args.all_tasks),
        tasks=tuple(args.tasks or ()),
        concurrency=DEFAULT_CONCURRENCY if args.concurrency is None else args.concurrency,
        ramp_up=args.ramp_up,
        seed=0 if args.seed is None else args.seed,
        server=args.server,
        db=args.db,
        base_url=args.base_url,
        provider_concurrency=args.provider_concurrency,
        max_cost=args.max_cost,
        requests_per_minute=args.requests_per_minute,
        tokens_per_minute=args.tokens_per_minute,
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        time_limit=args.time_limit,
        prices=args.prices,
        agent_cmd=args.agent_cmd,
        llm_faults=args.llm_faults,
    )


def with_suite_models(config: RunConfig, suite: Suite) -> RunConfig:
    """``config``, playing the suite's default models when it names none (else the generic pair)."""
    from mcp_resili.client.providers import DEFAULT_MODELS

    if config.models:
        return config
    return replace(config, models=suite.default_models or DEFAULT_MODELS)


def with_default_concurrency(config: RunConfig, suite: Suite, executor: str = "local") -> RunConfig:
    """``config`` with the concurrency a run that names none gets (``executor``: ``local`` or ``ray``).

    Scripted agents on a suite's own real servers wait for nothing but CPU, and every slot starts
    each server anew: more slots than CPUs only add server starts (on 2 cores, the example task
    suite's 30 episodes took 3x the CPU and the time at 8 slots as at 2: `bench/taskfile_slots.py`).
    Such a run in this process gets one slot per CPU (agent programs too, when a scripted model
    drives them); any other keeps `DEFAULT_CONCURRENCY` (a hosted model's episodes mostly wait for
    it; a Ray cluster's CPUs are not this machine's to count).
    """
    from mcp_resili.client.providers import provider_of

    scripted = all(provider_of(model) == "scripted" for model in config.models)
    if executor == "local" and config.server is None and suite.environment is not None and scripted:
        return replace(config, concurrency=min(DEFAULT_CONCURRENCY, usable_cpus()))
    return config


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system says, else the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def ladder_specs(families: Sequence[str]) -> tuple[str, ...]:
    """The fault specs of the families' standard ladders, in order, each once (``none`` is shared)."""
    from mcp_resili.report.ladder import LADDERS

    specs: list[str] = []
    for family in families:
        specs.extend(spec for spec in LADDERS[family].specs if spec not in specs)
    return tuple(specs)


def make_executor(args: argparse.Namespace) -> Executor:
    """The executor ``--executor`` names (Ray is imported only when a run starts on it)."""
    from mcp_resili.client.runner import RunConfigError, local_executor

    if args.executor == "local":
        if args.ray_address is not None or args.ray_workers is not None:
            raise RunConfigError("--ray-address and --ray-workers go with --executor ray")
        from mcp_resili.harness import session_factory

        return local_executor(session_factory=session_factory)
    from mcp_resili.integrations.ray import RayExecutor, import_ray
    from mcp_resili.integrations.ray.executor import check_reachable, prepare_local_env

    executor = RayExecutor(args.ray_address, workers=args.ray_workers)  # checks them, imports nothing
    prepare_local_env(args.ray_address)
    # Fail now, in one line, rather than after planning: without the extra, or with no cluster there.
    import_ray()
    check_reachable(args.ray_address)
    return executor


def run_command(args: argparse.Namespace) -> int:
    """Play the run (or print its estimate), then print the summary."""
    from rich.console import Console

    from mcp_resili.client.runner import estimate_run
    from mcp_resili.registry.loader import get_suite

    config = run_config(args)
    suite = get_suite(config.suite)  # the top: the suite is resolved once, here, and handed down
    config = with_suite_models(config, suite)
    if args.resume is None and args.concurrency is None:
        config = with_default_concurrency(config, suite, args.executor)
    check_baseline(args.baseline, config.faults or (suite.default_faults,))
    if args.estimate:
        from mcp_resili.cli.estimate import describe_extras, estimate_extras
        from mcp_resili.client.runner import resolve_run

        estimate = anyio.run(estimate_run, config, args.resume, suite)
        extras = estimate_extras(resolve_run(config, suite, args.resume))
        if args.json:
            print(json.dumps({**asdict(estimate), **extras}, indent=2))
        else:
            print("\n".join([estimate.describe(), *describe_extras(extras)]))
        return 0
    executor = make_executor(args)
    err = Console(stderr=True, markup=False)  # specs and paths are text, never markup
    err.soft_wrap = not err.is_terminal  # a log or a pipe gets each line whole, never cut at 80 columns
    _say_if_faults_wait(config, suite, err)
    run_ids: list[str] = []
    with sigterm_stops_like_ctrl_c() as terminated:
        try:
            result = _execute_with_progress(config, suite, args, err, executor, run_ids.append)
        except KeyboardInterrupt:
            how, status = (
                ("stopped by SIGTERM", EXIT_TERMINATED)
                if terminated.is_set()
                else ("interrupted", EXIT_INTERRUPTED)
            )
            db = shlex.quote(str(config.db))
            resume = f" (resume: mcp-resili run --resume {run_ids[0]} --db {db})" if run_ids else ""
            print(f"mcp-resili: {how}; finished episodes are stored{resume}", file=sys.stderr)
            return status
        except Exception as exc:
            # A mistake met after episodes were stored (a suite's scorer that fails, a full disk): one
            # line, as any other, which also says how to finish the run once it is fixed.
            mistake = user_error_in(exc)
            stored = _stored_episodes(config.db, run_ids[0]) if mistake is not None and run_ids else 0
            if mistake is None or not stored:
                raise
            db = shlex.quote(str(config.db))
            kept = f"{stored} finished {'episode is' if stored == 1 else 'episodes are'} stored"
            raise UserError(
                f"{one_line(mistake)}; {kept} (resume: mcp-resili run --resume {run_ids[0]} --db {db})"
            ) from None
    _print_summary(config, suite, result, args, err)
    return _exit_status(result, err)


def _say_if_faults_wait(config: RunConfig, suite: Suite, err: Console) -> None:
    """One line before the run when its faults wait in real time and ``--time-scale 0`` would not."""
    from mcp_resili.faults import parse_fault_spec
    from mcp_resili.faults.waits import waits_in_real_time

    if config.time_scale == 0 or config.server is not None:  # an outside server keeps its own time
        return
    try:
        if config.fault_plans:  # a resumed run plays the plans it froze when it started
            plans = {spec: json.loads(plan) for spec, plan in config.fault_plans}
        else:
            plans = {
                spec: parse_fault_spec(spec, suite.spec_scope).model_dump(mode="json")
                for spec in config.faults or (suite.default_faults,)
            }
    except (UserError, ValueError):  # resolving the run refuses it in a line of its own, before it starts
        return
    waiting = [spec for spec, plan in plans.items() if waits_in_real_time(plan)]
    if waiting:
        err.print(
            f"note: {', '.join(waiting)} {'delays or holds' if len(waiting) == 1 else 'delay or hold'} "
            "answers in real time (a held call waits for the agent's timeout), so episodes can take "
            "minutes; --time-scale 0 makes injected waits instant",
            highlight=False,
            soft_wrap=True,
        )


def check_baseline(baseline: str | None, faults: tuple[str, ...]) -> None:
    """Refuse, before anything runs, a ``--baseline`` that is not one of the run's fault specs."""
    from mcp_resili.client.runner import RunConfigError

    if baseline is not None and baseline not in faults:
        raise RunConfigError(
            f"--baseline {baseline!r} is not one of the run's fault specs: {', '.join(faults)}"
        )


def _stored_episodes(db: Path, run_id: str) -> int:
    """How many episodes of ``run_id`` are stored in ``db`` (0 when it cannot be read)."""
    from mcp_resili.store.sqlite import Store

    try:
        store = Store(db, read_only=True)
    except (OSError, UserError, sqlite3.Error):
        return 0
    try:
        return store.episode_count(run_id)
    except sqlite3.Error:
        return 0
    finally:
        store.close()


def _execute_with_progress(
    config: RunConfig,
    suite: Suite,
    args: argparse.Namespace,
    err: Console,
    executor: Executor,
    on_run: Callable[[str], None],
) -> RunResult:
    from mcp_resili.cli.progress import RunProgress
    from mcp_resili.client.pricing import CostEstimate
    from mcp_resili.client.providers import provider_of
    from mcp_resili.client.runner import execute
    from mcp_resili.store.export import with_trace_file

    hosted = any(provider_of(m.removeprefix("text:")) != "scripted" for m in config.models)

    def show_estimate(estimate: CostEstimate) -> None:
        if estimate.episodes >= ESTIMATE_THRESHOLD:
            err.print(estimate.describe())

    progress = RunProgress(err, spent=executor.spent, interactive=err.is_terminal and not args.json)
    with progress:
        return anyio.run(
            lambda: execute(
                config,
                suite=suite,
                resume=args.resume,
                on_planned=progress.on_planned,
                on_episode=with_trace_file(args.trace_dir, progress.on_episode),
                on_estimate=show_estimate if hosted else None,
                executor=executor,
                on_run=on_run,
            )
        )


def _exit_status(result: RunResult, err: Console) -> int:
    """0, or `EXIT_NOTHING_SCORED` with the cause when every episode played was an infrastructure error."""
    from collections import Counter

    from mcp_resili.client.providers.retry import explain_failure
    from mcp_resili.trace import Trace, trace_lines

    if not result.episodes or result.infrastructure_errors < result.episodes:
        return 0
    details: Counter[str] = Counter()
    for row in result.iter_rows():
        end = Trace.from_lines(trace_lines(row.trace), origin=row.episode_id).end
        details[end.detail if end is not None else ""] += 1
    cause = max(sorted(details), key=lambda detail: details[detail])
    err.print(
        f"every episode was an infrastructure error (nothing about the agent was measured): "
        f"{explain_failure(cause)}",
        highlight=False,
        soft_wrap=True,
    )
    return EXIT_NOTHING_SCORED


def _harness_hint(result: RunResult, err: Console) -> None:
    """When every agent program crashed the same way, say how (a missing package, a bad path...)."""
    from mcp_resili.trace import Trace, trace_lines

    # Read from the store one row at a time: first whether every episode crashed, then how.
    if not result.episodes or any(r.termination != "harness_failure" for r in result.iter_rows(traces=False)):
        return
    details: set[str] = set()
    for row in result.iter_rows():
        end = Trace.from_lines(trace_lines(row.trace), origin=row.episode_id).end
        details.add(end.detail if end is not None else "")
        if len(details) > 1:
            return
    (detail,) = details
    if detail:
        err.print(
            f"every episode's agent program failed the same way: {detail}",
            highlight=False,
            soft_wrap=True,
        )


def _spend_line(config: RunConfig, result: RunResult) -> str | None:
    spent = result.spent_usd if result.spent_usd is not None else result.cost_usd
    if config.max_cost is None and not spent:
        return None
    cap = f" of the ${config.max_cost:.2f} cap" if config.max_cost is not None else ""
    return f"spent ${spent:.4f}{cap}"


def _summary_payload(config: RunConfig, result: RunResult, summaries: list[Any]) -> dict[str, Any]:
    return {
        "run_id": result.run_id,
        "suite": config.suite,
        "seed": config.seed,
        "db": str(config.db),
        "architecture": config.architecture,
        "executor": result.executor,
        "episodes": result.episodes,
        "resumed": result.resumed,
        "replayed_infrastructure_errors": result.replayed_infrastructure_errors,
        "infrastructure_errors": result.infrastructure_errors,
        "stopped": result.stopped,
        "budget_stopped": result.budget_stopped,
        "not_started": result.skipped,
        "cost_usd": round(result.cost_usd, 6),
        "spent_usd": None if result.spent_usd is None else round(result.spent_usd, 6),
        "max_cost": config.max_cost,
        "groups": [s.to_dict() for s in summaries],
    }


def _print_summary(
    config: RunConfig, suite: Suite, result: RunResult, args: argparse.Namespace, err: Console
) -> None:
    from mcp_resili.report import summarize, summary_table
    from mcp_resili.report.build import damaged_scores
    from mcp_resili.report.coping import coping_section
    from mcp_resili.report.degradation import degradation, degradation_section
    from mcp_resili.report.model_coping import model_coping_section
    from mcp_resili.report.robustness import robustness, robustness_section
    from mcp_resili.report.terminal import section_summaries, section_tables
    from mcp_resili.store import StoredRows

    # Read from the store, without traces, one pass each: a run of any size takes the same memory.
    rows = StoredRows(config.db, result.run_id)
    summaries = summarize(rows, args.by, suite.task_info if args.by else None, suite.summary_columns)
    try:
        suite_summary = suite.summarize(rows) if suite.summarize is not None else None
    except Exception as exc:  # a suite's hook (possibly a third party's) met scores it cannot read
        raise damaged_scores(suite.name, exc) from None
    coping = coping_section(rows)  # protocol faults: recovery per fault type
    model_coping = model_coping_section(rows)  # model-API faults: survival per fault type
    degraded = degradation(rows, args.baseline)  # two fault specs or more: paired drops
    curves = robustness(rows)  # two rungs of a fault ladder or more: robustness curves
    if args.json:
        payload = _summary_payload(config, result, summaries)
        if suite_summary is not None:
            payload["suite_summary"] = suite_summary
        if coping is not None:
            payload["coping"] = coping.data["cells"]
        if model_coping is not None:
            payload["model_coping"] = model_coping.data["cells"]
        if degraded is not None:
            payload["degradation"] = degraded.to_dict()
        if curves is not None:
            payload["robustness"] = robustness_section(curves).data
        print(json.dumps(payload, indent=2))
        return
    out = stdout_console()
    out.print(summary_table(result.run_id, summaries, suite.summary_columns))
    if suite_summary is not None and suite.summary_table is not None:
        out.print(suite.summary_table(suite_summary))
    for section in (coping, model_coping):
        if section is not None:
            for table in section_tables([section]):
                out.print(table)
    sections = [
        *([robustness_section(curves)] if curves is not None else []),
        *([degradation_section(degraded)] if degraded is not None else []),
    ]
    for table in section_tables(sections):
        out.print(table)
    for line in section_summaries(sections):
        out.print(line, highlight=False, soft_wrap=True)
    sys.stdout.flush()
    _print_stored(config, result, err)


def _print_stored(config: RunConfig, result: RunResult, err: Console) -> None:
    """What was stored, spent and left (on stderr, after the tables)."""
    _harness_hint(result, err)
    err.print(f"stored {result.episodes} episodes of run {result.run_id} in {config.db}", soft_wrap=True)
    spend = _spend_line(config, result)
    if spend is not None:
        err.print(spend, highlight=False)
    if result.stopped == "max_cost":
        err.print(
            f"stopped at --max-cost {config.max_cost}: {result.budget_stopped} episodes budget-stopped "
            f"in flight (not stored, not scored), {result.skipped} not started; continue with: "
            f"mcp-resili run --resume {result.run_id} --db {config.db} --max-cost HIGHER",
            highlight=False,
            soft_wrap=True,
        )
