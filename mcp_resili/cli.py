"""The ``mcp-resili`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

import anyio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mcp_resili import __version__
from mcp_resili.client.pricing import CostEstimate, PriceTableError
from mcp_resili.client.providers import MissingAPIKeyError, UnknownModelError, provider_of
from mcp_resili.client.runner import (
    DEFAULT_MODELS,
    MATRIX_FIELDS,
    RunConfig,
    RunConfigError,
    estimate_run,
    execute,
    load_run_config,
)
from mcp_resili.faults import FaultSpecError, parse_fault_spec
from mcp_resili.report import summarize, summary_table
from mcp_resili.store import DEFAULT_DB
from mcp_resili.suites import DEFAULT_SUITE, UnknownSuiteError, UnknownTaskError, get_suite, suite_names
from mcp_resili.trace import Trace, TraceError

#: Errors that mean "the user asked for something that cannot work": exit 2 with the message.
USER_ERRORS = (
    FaultSpecError,
    RunConfigError,
    UnknownTaskError,
    UnknownSuiteError,
    UnknownModelError,
    MissingAPIKeyError,
    PriceTableError,
    TraceError,
)
#: Print a cost estimate before runs with at least this many hosted-model episodes.
ESTIMATE_THRESHOLD = 20


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-resili",
        description="Chaos engineering and robustness benchmarking for tool-using LLM agents over MCP.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve a suite's tools over MCP, with faults injected")
    serve.add_argument("--suite", default=DEFAULT_SUITE, help=f"one of: {', '.join(suite_names())}")
    serve.add_argument("--task", help="task bound to episodes that do not name one (e.g. a person's session)")
    serve.add_argument(
        "--faults", help="none | resilibench[:key=value,...] | PATH.toml|.json (default: suite's)"
    )
    serve.add_argument("--seed", type=int, default=0, help="fault seed for episodes that do not send one")
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--trace-dir", type=Path, help="write one JSONL trace per episode here")

    run = sub.add_parser("run", help="play agents against the server and score them (offline by default)")
    run.add_argument("--suite")
    run.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="SPEC",
        help="repeatable: scripted:NAME, anthropic:MODEL, openai:MODEL (keys from ANTHROPIC_API_KEY / "
        f"OPENAI_API_KEY); default: {' '.join(DEFAULT_MODELS)}",
    )
    run.add_argument("--faults", action="append", metavar="SPEC", help="repeatable; default: the suite's")
    run.add_argument("--variant", help="prompt variant (default: baseline)")
    run.add_argument("--trials", type=int, help="trials per task (default: 3)")
    run.add_argument("--limit", type=int, help="use the first N tasks")
    run.add_argument("--task", action="append", dest="tasks", metavar="ID", help="repeatable; run only these")
    run.add_argument("--concurrency", type=int, help="episodes in flight (default: 8)")
    run.add_argument("--provider-concurrency", type=int, help="episodes in flight per provider")
    run.add_argument("--seed", type=int)
    run.add_argument(
        "--server", help="any MCP server: 'CMD ARGS' (stdio) or http://HOST:PORT/mcp; default: in-process"
    )
    run.add_argument("--base-url", help="endpoint for hosted models, e.g. http://localhost:11434/v1 (Ollama)")
    run.add_argument("--max-turns", type=int, help="model turns per episode (default: the task's)")
    run.add_argument("--max-tokens", type=int, help="input+output tokens per episode")
    run.add_argument("--time-limit", type=float, help="seconds per episode (default: the task's timeout)")
    run.add_argument("--max-cost", type=float, metavar="USD", help="stop starting episodes past this spend")
    run.add_argument("--prices", type=Path, help="TOML price table overriding the built-in one")
    run.add_argument("--resume", metavar="RUN_ID", help="play only the episodes RUN_ID has not stored")
    run.add_argument("--estimate", action="store_true", help="print the token/cost estimate and exit")
    run.add_argument("--db", type=Path, default=DEFAULT_DB)
    run.add_argument("--json", action="store_true", help="print a machine-readable summary on stdout")

    tasks = sub.add_parser("tasks", help="inspect tasks")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", required=True)
    listing = tasks_sub.add_parser("list", help="list a suite's tasks")
    listing.add_argument("--suite", default=DEFAULT_SUITE)
    listing.add_argument("--json", action="store_true", help="a JSON list of task objects")

    score = sub.add_parser("score", help="score a trace file written by `serve --trace-dir` or the runner")
    score.add_argument("trace", type=Path)
    score.add_argument("--task", help="task id, when the trace header has none")
    return parser


def _serve(args: argparse.Namespace) -> int:
    from mcp_resili.server.app import ResiliServer
    from mcp_resili.server.transports import serve_http, serve_stdio

    suite = get_suite(args.suite)
    plan = parse_fault_spec(args.faults or suite.default_faults)
    server = ResiliServer(suite, plan, seed=args.seed, task=args.task, trace_dir=args.trace_dir)
    try:
        if args.transport == "stdio":
            anyio.run(serve_stdio, server)
        else:
            print(f"serving MCP at http://{args.host}:{args.port}/mcp", file=sys.stderr)
            anyio.run(lambda: serve_http(server, args.host, args.port))
    except KeyboardInterrupt:
        pass
    return 0


def _run_config(args: argparse.Namespace) -> RunConfig:
    if args.resume is not None:
        given = [f"--{name.replace('_', '-')}" for name in MATRIX_FIELDS if getattr(args, name) is not None]
        if given:
            raise RunConfigError(
                f"--resume replays the stored configuration of {args.resume}; drop {', '.join(given)}"
            )
        config = load_run_config(args.db, args.resume)
        overrides = {
            name: getattr(args, name)
            for name in ("concurrency", "provider_concurrency", "max_cost")
            if getattr(args, name) is not None
        }
        return replace(config, db=args.db, **overrides)
    return RunConfig(
        suite=args.suite or DEFAULT_SUITE,
        models=tuple(args.models or DEFAULT_MODELS),
        faults=tuple(args.faults or ()),
        variant=args.variant or "baseline",
        trials=3 if args.trials is None else args.trials,
        limit=args.limit,
        tasks=tuple(args.tasks or ()),
        concurrency=8 if args.concurrency is None else args.concurrency,
        seed=0 if args.seed is None else args.seed,
        server=args.server,
        db=args.db,
        base_url=args.base_url,
        provider_concurrency=args.provider_concurrency,
        max_cost=args.max_cost,
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        time_limit=args.time_limit,
        prices=args.prices,
    )


def _run(args: argparse.Namespace) -> int:
    config = _run_config(args)
    err = Console(stderr=True)
    if args.estimate:
        estimate = anyio.run(estimate_run, config)
        if args.json:
            print(json.dumps(asdict(estimate), indent=2))
        else:
            print(estimate.describe())
        return 0
    hosted = any(provider_of(m) != "scripted" for m in config.models)

    def show_estimate(estimate: CostEstimate) -> None:
        if hosted and estimate.episodes >= ESTIMATE_THRESHOLD:
            err.print(estimate.describe())

    progress = Progress(
        TextColumn("episodes"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=args.json or not err.is_terminal,
    )
    bar = progress.add_task("run", total=None)
    with progress:
        result = anyio.run(
            lambda: execute(
                config,
                resume=args.resume,
                on_planned=lambda n: progress.update(bar, total=n),
                on_episode=lambda _row: progress.advance(bar),
                on_estimate=show_estimate,
            )
        )
    summaries = summarize(result.rows)
    if args.json:
        payload = {
            "run_id": result.run_id,
            "suite": config.suite,
            "seed": config.seed,
            "db": str(config.db),
            "episodes": len(result.rows),
            "resumed": result.resumed,
            "stopped": result.stopped,
            "not_started": result.skipped,
            "cost_usd": round(result.cost_usd, 6),
            "groups": [s.to_dict() for s in summaries],
        }
        print(json.dumps(payload, indent=2))
    else:
        out = Console()
        if not out.is_terminal:
            out = Console(width=160)
        out.print(summary_table(result.run_id, summaries))
        sys.stdout.flush()
        err.print(f"stored {len(result.rows)} episodes of run {result.run_id} in {config.db}")
        if result.stopped == "max_cost":
            err.print(
                f"stopped at --max-cost {config.max_cost}: {result.skipped} episodes not started; "
                f"continue with: mcp-resili run --resume {result.run_id} --db {config.db} --max-cost HIGHER"
            )
    return 0


def _tasks_list(args: argparse.Namespace) -> int:
    suite = get_suite(args.suite)
    if args.json:
        json.dump([t.model_dump(mode="json") for t in suite.tasks], sys.stdout)
        sys.stdout.write("\n")
        return 0
    table = Table(title=f"{suite.name}: {len(suite.tasks)} tasks", title_justify="left")
    for column in ("id", "type", "complexity", "tools", "description"):
        table.add_column(column)
    for t in suite.tasks:
        table.add_row(t.id, t.task_type, t.complexity, str(len(t.required_tools)), t.description[:70])
    Console().print(table)
    return 0


def _score(args: argparse.Namespace) -> int:
    trace = Trace.read(args.trace)
    suite = get_suite(trace.header.suite)
    task_id = args.task or trace.header.task
    if task_id is None:
        raise UnknownTaskError(f"{args.trace} names no task; pass --task ID")
    result = suite.score(suite.task(task_id), trace)
    print(json.dumps(result.model_dump(mode="json"), indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    handlers = {"serve": _serve, "run": _run, "score": _score}
    try:
        if args.command == "tasks":
            return _tasks_list(args)
        return handlers[args.command](args)
    except USER_ERRORS as exc:
        print(f"mcp-resili: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mcp-resili: interrupted; finished episodes are stored", file=sys.stderr)
        return 130
