"""The ``mcp-resili`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mcp_resili import __version__
from mcp_resili.client.providers import UnknownModelError
from mcp_resili.client.runner import DEFAULT_MODELS, RunConfig, RunConfigError, execute
from mcp_resili.faults import FaultSpecError, parse_fault_spec
from mcp_resili.report import summarize, summary_table
from mcp_resili.store import DEFAULT_DB, EpisodeRow
from mcp_resili.suites import DEFAULT_SUITE, UnknownSuiteError, UnknownTaskError, get_suite, suite_names
from mcp_resili.trace import Trace, TraceError

#: Errors that mean "the user asked for something that cannot work": exit 2 with the message.
USER_ERRORS = (
    FaultSpecError,
    RunConfigError,
    UnknownTaskError,
    UnknownSuiteError,
    UnknownModelError,
    TraceError,
)


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
        "--faults",
        help="none | resilibench[:key=value,...] | toolmaze:NP|P1..P4 | PATH.toml|.json (default: suite's)",
    )
    serve.add_argument("--seed", type=int, default=0, help="fault seed for episodes that do not send one")
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--trace-dir", type=Path, help="write one JSONL trace per episode here")

    run = sub.add_parser("run", help="play agents against the server and score them (offline by default)")
    run.add_argument("--suite", default=DEFAULT_SUITE)
    run.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="SPEC",
        help=f"repeatable; default: {' '.join(DEFAULT_MODELS)}",
    )
    run.add_argument("--faults", action="append", metavar="SPEC", help="repeatable; default: the suite's")
    run.add_argument("--variant", default="baseline", help="prompt variant")
    run.add_argument("--trials", type=int, default=3)
    run.add_argument("--limit", type=int, help="use the first N tasks")
    run.add_argument("--task", action="append", dest="tasks", metavar="ID", help="repeatable; run only these")
    run.add_argument("--concurrency", type=int, default=8)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--server", help="'CMD ARGS' (stdio) or http://HOST:PORT/mcp; default: in-process")
    run.add_argument("--db", type=Path, default=DEFAULT_DB)
    run.add_argument("--json", action="store_true", help="print a machine-readable summary on stdout")

    tasks = sub.add_parser("tasks", help="inspect tasks")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", required=True)
    listing = tasks_sub.add_parser("list", help="list a suite's tasks")
    listing.add_argument("--suite", default=DEFAULT_SUITE)
    listing.add_argument("--json", action="store_true", help="a JSON list of task objects")
    stats = tasks_sub.add_parser("stats", help="per-level statistics (length, valid paths, groups, domains)")
    stats.add_argument("--suite", default=DEFAULT_SUITE)
    stats.add_argument("--json", action="store_true", help="a JSON list, one object per level")

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
    if getattr(plan, "kind", None) == "toolmaze" and args.task is None:
        # Its faults live in the task's profile: episodes that name no task see none.
        print(
            "mcp-resili: note: toolmaze faults fire only in episodes bound to a task "
            "(--task ID, or the runner's _meta)",
            file=sys.stderr,
        )
    try:
        if args.transport == "stdio":
            anyio.run(serve_stdio, server)
        else:
            print(f"serving MCP at http://{args.host}:{args.port}/mcp", file=sys.stderr)
            anyio.run(lambda: serve_http(server, args.host, args.port))
    except KeyboardInterrupt:
        pass
    return 0


def _run(args: argparse.Namespace) -> int:
    config = RunConfig(
        suite=args.suite,
        models=tuple(args.models or DEFAULT_MODELS),
        faults=tuple(args.faults or ()),
        variant=args.variant,
        trials=args.trials,
        limit=args.limit,
        tasks=tuple(args.tasks or ()),
        concurrency=args.concurrency,
        seed=args.seed,
        server=args.server,
        db=args.db,
    )
    err = Console(stderr=True)
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
                on_planned=lambda n: progress.update(bar, total=n),
                on_episode=lambda _row: progress.advance(bar),
            )
        )
    summaries = summarize(result.rows)
    toolmaze = _toolmaze_metrics(result.rows) if config.suite == "toolmaze" else []
    if args.json:
        payload = {
            "run_id": result.run_id,
            "suite": config.suite,
            "seed": config.seed,
            "db": str(config.db),
            "groups": [s.to_dict() for s in summaries],
        }
        if toolmaze:
            payload["toolmaze"] = toolmaze
        print(json.dumps(payload, indent=2))
    else:
        out = Console()
        if not out.is_terminal:
            out = Console(width=140)
        out.print(summary_table(result.run_id, summaries))
        if toolmaze:
            from mcp_resili.report.toolmaze import toolmaze_table

            out.print(toolmaze_table(toolmaze))
        sys.stdout.flush()
        err.print(f"stored {len(result.rows)} episodes of run {result.run_id} in {config.db}")
    return 0


def _toolmaze_metrics(rows: Sequence[EpisodeRow]) -> list[dict[str, Any]]:
    from mcp_resili.report.toolmaze import toolmaze_metrics

    return toolmaze_metrics(rows)


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


def _tasks_stats(args: argparse.Namespace) -> int:
    from mcp_resili.tasks.stats import level_statistics

    rows = level_statistics(get_suite(args.suite).tasks)
    if args.json:
        json.dump([r.to_dict() for r in rows], sys.stdout)
        sys.stdout.write("\n")
        return 0
    table = Table(title=f"{args.suite}: task statistics per level", title_justify="left")
    for column in ("level", "tasks", "mean length", "min/max", "valid paths", "groups", "domains"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            r.level,
            str(r.tasks),
            f"{r.mean_length:.2f}",
            f"{r.min_length}/{r.max_length}",
            f"{r.mean_valid_paths:g}",
            " ".join(f"{k}={v}" for k, v in r.group_kinds.items()) or "-",
            " ".join(f"{k}={v}" for k, v in r.domains.items()),
        )
    Console(width=160).print(table)
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
            return _tasks_stats(args) if args.tasks_command == "stats" else _tasks_list(args)
        return handlers[args.command](args)
    except USER_ERRORS as exc:
        print(f"mcp-resili: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mcp-resili: interrupted; finished episodes are stored", file=sys.stderr)
        return 130
