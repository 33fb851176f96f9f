"""The ``mcp-resili`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
from pydantic import TypeAdapter
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mcp_resili import __version__
from mcp_resili.client.providers import DEFAULT_MODELS, UnknownModelError
from mcp_resili.faults import FaultSpecError, parse_fault_spec
from mcp_resili.report import BREAKDOWN_KEYS, summarize, summary_table
from mcp_resili.store import DEFAULT_DB, Store
from mcp_resili.suites import DEFAULT_SUITE, UnknownSuiteError, UnknownTaskError, get_suite, suite_names
from mcp_resili.tasks.model import Task
from mcp_resili.tasks.resilibench.flaws import FlawError
from mcp_resili.trace import Trace, TraceError


#: Errors that mean "the user asked for something that cannot work": exit 2 with the message.
class UnknownRunError(LookupError):
    """A run id (or results database) that does not exist."""


USER_ERRORS = (
    FaultSpecError,
    UnknownTaskError,
    UnknownSuiteError,
    UnknownModelError,
    TraceError,
    FlawError,
    UnknownRunError,
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
        "--faults", help="none | resilibench[:key=value,...] | PATH.toml|.json (default: suite's)"
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
    run.add_argument(
        "--variant",
        action="append",
        dest="variants",
        metavar="VARIANT",
        help="repeatable prompt variant: baseline | cot | optimal | flawed:TYPE[:SEVERITY[:METHOD]] "
        "(default: baseline)",
    )
    run.add_argument(
        "--by",
        action="append",
        choices=BREAKDOWN_KEYS,
        default=[],
        help="repeatable: also break the summary down by this key",
    )
    run.add_argument("--trials", type=int, default=3)
    run.add_argument(
        "--limit", type=int, help="use the first N tasks of the suite's full list (default: its default set)"
    )
    run.add_argument(
        "--max-turns", type=int, help="turn budget of every episode (default: each task's; the paper used 10)"
    )
    run.add_argument("--all-tasks", action="store_true", help="use every task of the suite's full list")
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

    report = sub.add_parser("report", help="summarise a stored run (default: the latest)")
    report.add_argument("--run", help="run id (default: the latest run in the database)")
    report.add_argument("--db", type=Path, default=DEFAULT_DB)
    report.add_argument("--by", action="append", choices=BREAKDOWN_KEYS, default=[], help="repeatable")
    report.add_argument("--json", action="store_true")

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


def _run(args: argparse.Namespace) -> int:
    # Imported here: the runner pulls in the MCP SDK, which `tasks list` does not need.
    from mcp_resili.client.runner import RunConfig, execute

    config = RunConfig(
        suite=args.suite,
        models=tuple(args.models or DEFAULT_MODELS),
        faults=tuple(args.faults or ()),
        variants=tuple(args.variants or ()),
        trials=args.trials,
        limit=args.limit,
        tasks=tuple(args.tasks or ()),
        all_tasks=args.all_tasks,
        max_turns=args.max_turns,
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
    summaries = summarize(result.rows, args.by, _task_info(config.suite) if args.by else None)
    if args.json:
        payload = {
            "run_id": result.run_id,
            "suite": config.suite,
            "seed": config.seed,
            "db": str(config.db),
            "groups": [s.to_dict() for s in summaries],
        }
        print(json.dumps(payload, indent=2))
    else:
        out = Console()
        if not out.is_terminal:
            out = Console(width=200)
        out.print(summary_table(result.run_id, summaries))
        sys.stdout.flush()
        err.print(f"stored {len(result.rows)} episodes of run {result.run_id} in {config.db}")
    return 0


_TASK_LIST: TypeAdapter[list[Task]] = TypeAdapter(list[Task])


def _tasks_list(args: argparse.Namespace) -> int:
    suite = get_suite(args.suite)
    if args.json:
        # One pydantic serialisation of the whole list: the full ResiliBench suite has 5,040 tasks.
        sys.stdout.flush()
        sys.stdout.buffer.write(_TASK_LIST.dump_json(list(suite.tasks)) + b"\n")
        sys.stdout.buffer.flush()
        return 0
    table = Table(title=f"{suite.name}: {len(suite.tasks)} tasks", title_justify="left")
    for column in ("id", "type", "complexity", "tools", "description"):
        table.add_column(column)
    for t in suite.tasks:
        table.add_row(t.id, t.task_type, t.complexity, str(len(t.required_tools)), t.description[:70])
    Console().print(table)
    return 0


def _task_info(suite_name: str) -> Callable[[str], dict[str, str]]:
    suite = get_suite(suite_name)

    def info(task_id: str) -> dict[str, str]:
        try:
            task = suite.task(task_id)
        except UnknownTaskError:
            return {}
        return {"task_type": task.task_type, "complexity": task.complexity}

    return info


def _report(args: argparse.Namespace) -> int:
    if not args.db.exists():
        raise UnknownRunError(f"no results database at {args.db}; run `mcp-resili run` first")
    store = Store(args.db)
    try:
        run_id = args.run or store.latest_run()
        if run_id is None:
            raise UnknownRunError(f"{args.db} holds no runs")
        rows = store.episodes(run_id)
        if not rows:
            raise UnknownRunError(f"run {run_id!r} has no episodes in {args.db}")
        suite_name = store.run_suite(run_id)
    finally:
        store.close()
    summaries = summarize(rows, args.by, _task_info(suite_name) if args.by else None)
    if args.json:
        print(json.dumps({"run_id": run_id, "groups": [s.to_dict() for s in summaries]}, indent=2))
    else:
        Console(width=200).print(summary_table(run_id, summaries))
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


def _run_config_error() -> type[Exception]:
    if "mcp_resili.client.runner" in sys.modules:
        from mcp_resili.client.runner import RunConfigError

        return RunConfigError
    return FaultSpecError  # already caught; the runner (and its error type) was never loaded


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    handlers = {"serve": _serve, "run": _run, "score": _score, "report": _report}
    try:
        if args.command == "tasks":
            return _tasks_list(args)
        return handlers[args.command](args)
    except (*USER_ERRORS, _run_config_error()) as exc:
        print(f"mcp-resili: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mcp-resili: interrupted; finished episodes are stored", file=sys.stderr)
        return 130
