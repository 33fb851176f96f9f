"""The ``mcp-resili`` command line."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from mcp_resili import __version__
from mcp_resili.client.model import ARCHITECTURES
from mcp_resili.clients import CLIENTS
from mcp_resili.errors import UserError
from mcp_resili.report.summary import BREAKDOWN_KEYS
from mcp_resili.suites import DEFAULT_SUITE, suite_names

if TYPE_CHECKING:
    from mcp_resili.client.runner import RunConfig


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
        help="none | resilibench[:key=value,...] | lambda=0.0|0.1|0.2|0.3 | toolmaze:NP|P1..P4 | "
        "PATH.toml|.json (default: the suite's)",
    )
    serve.add_argument("--seed", type=int, default=0, help="fault seed for episodes that do not send one")
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--trace-dir", type=Path, help="write one JSONL trace per episode here")
    serve.add_argument("--time-scale", type=float, default=1.0, help="multiply injected delays; 0 = none")

    run = sub.add_parser("run", help="play agents against the server and score them (offline by default)")
    # Options that define the run matrix default to None so that `--resume` can refuse them.
    run.add_argument("--suite", help=f"default: {DEFAULT_SUITE}")
    run.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="SPEC",
        help="repeatable: scripted:NAME, anthropic:MODEL, openai:MODEL, text:SPEC (keys from "
        "ANTHROPIC_API_KEY / OPENAI_API_KEY); default: scripted:oracle scripted:naive",
    )
    run.add_argument("--faults", action="append", metavar="SPEC", help="repeatable; default: the suite's")
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
        help="agent loop: react (default), or reflexion (a reflection prompt after each failed tool call)",
    )
    run.add_argument(
        "--by",
        action="append",
        choices=BREAKDOWN_KEYS,
        default=[],
        help="repeatable: also break the summary down by this key",
    )
    run.add_argument(
        "--time-scale",
        type=float,
        help="multiply injected delays (latency faults) of the in-process server; 0 = no waiting",
    )
    run.add_argument("--trials", type=int, help="trials per task (default: 3)")
    run.add_argument(
        "--limit", type=int, help="use the first N tasks of the suite's full list (default: its default set)"
    )
    run.add_argument("--all-tasks", action="store_true", default=None, help="use every task of the full list")
    run.add_argument("--task", action="append", dest="tasks", metavar="ID", help="repeatable; run only these")
    run.add_argument("--concurrency", type=int, help="episodes in flight (default: 8)")
    run.add_argument("--provider-concurrency", type=int, help="episodes in flight per provider")
    run.add_argument("--seed", type=int, help="default: 0")
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
    run.add_argument("--db", type=Path, default=Path("mcp-resili.db"))
    run.add_argument("--json", action="store_true", help="print a machine-readable summary on stdout")

    proxy = sub.add_parser("proxy", help="put the fault pipeline in front of any MCP server")
    proxy.add_argument("--upstream", required=True, help="'CMD ARGS' (stdio) or http(s)://HOST:PORT/mcp")
    proxy.add_argument("--faults", default="none", help="none | resilibench[:...] | PATH.toml|.json")
    proxy.add_argument("--seed", type=int, default=0)
    proxy.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    proxy.add_argument("--host", default="127.0.0.1")
    proxy.add_argument("--port", type=int, default=8766)
    proxy.add_argument("--trace-dir", type=Path, help="write one JSONL trace per episode here")

    check = sub.add_parser("check", help="contract-test any MCP server's tools (for CI)")
    check.add_argument(
        "--server", help="'CMD ARGS' (stdio) or http(s)://HOST:PORT/mcp; default: our own server"
    )
    check.add_argument("--call", action="store_true", help="also call every tool with sample arguments")
    check.add_argument("--strict", action="store_true", help="fail on warnings too")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument("--verbose", action="store_true", help="also show notes (e.g. OpenAI strict mode)")

    config = sub.add_parser("config", help="print (or write) an MCP client configuration for serve or proxy")
    config.add_argument("client", choices=sorted(CLIENTS))
    config.add_argument("--name", default="mcp-resili", help="the server's name in the client")
    config.add_argument("--upstream", help="configure `proxy --upstream UPSTREAM` instead of `serve`")
    config.add_argument("--faults", help="fault SPEC for the server")
    config.add_argument("--trace-dir", type=Path, help="where the server writes traces")
    config.add_argument("--write", action="store_true", help="merge it into the client's config file")
    config.add_argument("--path", type=Path, help="config file to write (default: the client's usual one)")

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
    report = sub.add_parser("report", help="tables, JSON or a self-contained HTML page of a stored run")
    report.add_argument("run", nargs="?", help="run id (default: the latest run in the database)")
    report.add_argument("--run", dest="run_option", metavar="RUN", help="the same, as an option")
    report.add_argument("--db", type=Path, default=Path("mcp-resili.db"))
    report.add_argument(
        "--by",
        action="append",
        choices=BREAKDOWN_KEYS,
        default=[],
        help="also break the outcome table down by this key (repeatable)",
    )
    report.add_argument("--json", action="store_true", help="print every section's data as JSON")
    report.add_argument("--html", type=Path, metavar="PATH", help="write the HTML report here")

    compare = sub.add_parser(
        "compare", help="gate a candidate workflow against its golden one (exit 1 on a regression)"
    )
    compare.add_argument("golden", type=Path, help="workflow JSON, or a trace JSONL (its executed tools)")
    compare.add_argument("candidate", type=Path, help="workflow JSON, or a trace JSONL")
    compare.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="MODE=VALUE",
        help="override an alert threshold, e.g. missing_steps=0.8 (repeatable)",
    )
    compare.add_argument("--json", action="store_true", help="print the verdict as JSON")

    perturb = sub.add_parser(
        "perturb", help="write a WorkflowPerturb variant of a workflow (for calibration)"
    )
    perturb.add_argument("workflow", type=Path)
    perturb.add_argument("--type", choices=("missing", "compressed", "description"), required=True)
    perturb.add_argument("--level", type=float, default=0.3, help="α: 0.1, 0.3 or 0.5 (any value in (0, 1))")
    perturb.add_argument("--seed", type=int, default=0)

    calibrate = sub.add_parser(
        "calibrate", help="each workflow metric's mean per perturbation and level, and its sensitivity Δ"
    )
    calibrate.add_argument("workflows", nargs="*", type=Path, help="golden workflow files (JSON or trace)")
    calibrate.add_argument("--suite", help="use every task's golden DAG of this suite instead")
    calibrate.add_argument("--seed", type=int, default=0)
    return parser


def _announce(what: str) -> Callable[[str], None]:
    return lambda url: print(f"{what} at {url}", file=sys.stderr, flush=True)


def _serve(args: argparse.Namespace) -> int:
    from mcp_resili.faults import parse_fault_spec
    from mcp_resili.server.app import ResiliServer
    from mcp_resili.server.transports import serve_http, serve_stdio
    from mcp_resili.suites import get_suite

    suite = get_suite(args.suite)
    plan = parse_fault_spec(args.faults or suite.default_faults)
    server = ResiliServer(
        suite, plan, seed=args.seed, task=args.task, trace_dir=args.trace_dir, time_scale=args.time_scale
    )
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
            anyio.run(lambda: serve_http(server, args.host, args.port, on_started=_announce("serving MCP")))
    except KeyboardInterrupt:
        pass
    return 0


def _proxy(args: argparse.Namespace) -> int:
    from mcp_resili.faults import parse_fault_spec
    from mcp_resili.proxy import ProxyServer, connect_upstream
    from mcp_resili.server.transports import serve_http, serve_stdio

    plan = parse_fault_spec(args.faults)

    async def main() -> None:
        async with connect_upstream(args.upstream) as client:
            server = await ProxyServer.create(
                client, plan, upstream=args.upstream, seed=args.seed, trace_dir=args.trace_dir
            )
            if args.transport == "stdio":
                await serve_stdio(server)
            else:
                await serve_http(
                    server, args.host, args.port, on_started=_announce(f"proxying {args.upstream}")
                )

    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(main)
    return 0


def _check(args: argparse.Namespace) -> int:
    from mcp_resili.check import check_server
    from mcp_resili.check.report import CheckReport
    from mcp_resili.proxy import connect_upstream

    target = args.server or f"{sys.executable} -m mcp_resili serve --faults none"

    async def main() -> CheckReport:
        async with connect_upstream(target) as client:
            return await check_server(client, target, call_tools=args.call)

    report = anyio.run(main)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.render(verbose=args.verbose))
    return 0 if report.ok(strict=args.strict) else 1


def _config(args: argparse.Namespace) -> int:
    from mcp_resili.clients import render_config, server_entry, write_config

    entry = server_entry(upstream=args.upstream, faults=args.faults, trace_dir=args.trace_dir)
    if not args.write:
        print(json.dumps(render_config(args.client, args.name, entry), indent=2))
        return 0
    path = write_config(args.client, args.name, entry, args.path)
    print(f"wrote server {args.name!r} into {path}", file=sys.stderr)
    return 0


#: Hosted runs of at least this many episodes print their cost estimate before starting.
ESTIMATE_THRESHOLD = 20


def _run_config(args: argparse.Namespace) -> RunConfig:
    from dataclasses import replace

    from mcp_resili.client.providers import DEFAULT_MODELS
    from mcp_resili.client.runner import MATRIX_FIELDS, RunConfig, RunConfigError, load_run_config

    if args.resume is not None:
        given = [
            f"--{name.replace('_', '-')}" for name in MATRIX_FIELDS if getattr(args, name, None) is not None
        ]
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
        variants=tuple(args.variants or ()),
        perturb=tuple(args.perturb or ()),
        architecture=args.architecture or "react",
        time_scale=1.0 if args.time_scale is None else args.time_scale,
        trials=3 if args.trials is None else args.trials,
        limit=args.limit,
        all_tasks=bool(args.all_tasks),
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
    from dataclasses import asdict

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mcp_resili.client.pricing import CostEstimate
    from mcp_resili.client.providers import provider_of
    from mcp_resili.client.runner import estimate_run, execute
    from mcp_resili.report import summarize, summary_table
    from mcp_resili.suites import get_suite

    config = _run_config(args)
    err = Console(stderr=True)
    if args.estimate:
        estimate = anyio.run(estimate_run, config)
        print(json.dumps(asdict(estimate), indent=2) if args.json else estimate.describe())
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
    suite = get_suite(config.suite)
    summaries = summarize(result.rows, args.by, suite.task_info if args.by else None)
    suite_summary = suite.summarize(result.rows) if suite.summarize is not None else None
    if args.json:
        payload = {
            "run_id": result.run_id,
            "suite": config.suite,
            "seed": config.seed,
            "db": str(config.db),
            "architecture": config.architecture,
            "episodes": len(result.rows),
            "resumed": result.resumed,
            "stopped": result.stopped,
            "not_started": result.skipped,
            "cost_usd": round(result.cost_usd, 6),
            "groups": [s.to_dict() for s in summaries],
        }
        if suite_summary is not None:
            payload["suite_summary"] = suite_summary
        print(json.dumps(payload, indent=2))
    else:
        out = Console()
        if not out.is_terminal:
            out = Console(width=200)
        out.print(summary_table(result.run_id, summaries))
        if suite_summary is not None and suite.summary_table is not None:
            out.print(suite.summary_table(suite_summary))
        sys.stdout.flush()
        err.print(f"stored {len(result.rows)} episodes of run {result.run_id} in {config.db}")
        if result.stopped == "max_cost":
            err.print(
                f"stopped at --max-cost {config.max_cost}: {result.skipped} episodes not started; "
                f"continue with: mcp-resili run --resume {result.run_id} --db {config.db} --max-cost HIGHER"
            )
    return 0


def _tasks_list(args: argparse.Namespace) -> int:
    from pydantic import TypeAdapter
    from rich.console import Console
    from rich.table import Table

    from mcp_resili.suites import get_suite
    from mcp_resili.tasks.model import Task

    suite = get_suite(args.suite)
    if args.json:
        if any("domain" in t.metadata for t in suite.tasks):
            # Suites with domains keep them in metadata; show them up front.
            listing = [{"domain": t.metadata.get("domain"), **t.model_dump(mode="json")} for t in suite.tasks]
            json.dump(listing, sys.stdout)
            sys.stdout.write("\n")
            return 0
        # One pydantic serialisation of the whole list: the full ResiliBench suite has 5,040 tasks.
        sys.stdout.flush()
        sys.stdout.buffer.write(
            TypeAdapter(list[Task]).dump_json(list(suite.tasks), serialize_as_any=True) + b"\n"
        )
        sys.stdout.buffer.flush()
        return 0
    table = Table(title=f"{suite.name}: {len(suite.tasks)} tasks", title_justify="left")
    for column in ("id", "type", "complexity", "tools", "description"):
        table.add_column(column)
    for t in suite.tasks:
        table.add_row(t.id, t.task_type, t.complexity, str(len(t.required_tools)), t.description[:70])
    Console().print(table)
    return 0


def _tasks_stats(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from mcp_resili.suites import get_suite
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
    from mcp_resili.suites import UnknownTaskError, get_suite
    from mcp_resili.trace import Trace

    trace = Trace.read(args.trace)
    suite = get_suite(trace.header.suite)
    task_id = args.task or trace.header.task
    if task_id is None:
        raise UnknownTaskError(f"{args.trace} names no task; pass --task ID")
    result = suite.score(suite.task(task_id), trace)
    print(json.dumps(result.model_dump(mode="json"), indent=2))
    return 0


def _report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from mcp_resili.report.build import load_report
    from mcp_resili.report.html import render_html
    from mcp_resili.report.terminal import section_tables

    run_id = args.run or args.run_option
    report = load_report(args.db, run_id, by=args.by)
    if args.html is not None:
        args.html.write_text(render_html(report), encoding="utf-8")
        print(f"wrote {args.html}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    elif args.html is None:
        out = Console()
        if not out.is_terminal:
            out = Console(width=200)
        out.print(f"run {report.run.id} · suite {report.run.suite} · {report.episodes} episodes")
        for table in section_tables(report.sections):
            out.print(table)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from mcp_resili.workflow import compare, load_workflow, rules_with

    overrides = {}
    for item in args.threshold:
        mode, sep, value = item.partition("=")
        try:
            overrides[mode] = float(value)
        except ValueError:
            raise UserError(f"--threshold expects MODE=NUMBER, got {item!r}") from None
        if not sep:
            raise UserError(f"--threshold expects MODE=NUMBER, got {item!r}")
    try:
        rules = rules_with(overrides)
        verdict = compare(load_workflow(args.golden), load_workflow(args.candidate), rules)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=2))
    else:
        for name, value in verdict.scores.to_dict().items():
            print(f"{name:>16}  {value}")
        for alert in verdict.alerts:
            print(f"ALERT {alert}")
        print("regression" if verdict.regression else "ok: no alert fired")
    return 1 if verdict.regression else 0


def _perturb(args: argparse.Namespace) -> int:
    from mcp_resili.workflow import load_workflow, perturb

    try:
        variant = perturb(load_workflow(args.workflow), args.type, args.level, args.seed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    print(variant.model_dump_json(indent=2))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from mcp_resili.suites import get_suite
    from mcp_resili.workflow import load_workflow, sensitivity, workflow_from_task

    if bool(args.suite) == bool(args.workflows):
        raise UserError("give golden workflow files or --suite NAME (one of the two)")
    if args.suite:
        goldens = [workflow_from_task(t) for t in get_suite(args.suite).tasks]
    else:
        goldens = [load_workflow(path) for path in args.workflows]
    print(
        json.dumps(
            {"workflows": len(goldens), "seed": args.seed, **sensitivity(goldens, args.seed)}, indent=2
        )
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    handlers = {
        "serve": _serve,
        "proxy": _proxy,
        "run": _run,
        "score": _score,
        "check": _check,
        "config": _config,
        "report": _report,
        "compare": _compare,
        "perturb": _perturb,
        "calibrate": _calibrate,
    }
    try:
        if args.command == "tasks":
            return _tasks_stats(args) if args.tasks_command == "stats" else _tasks_list(args)
        return handlers[args.command](args)
    except UserError as exc:
        print(f"mcp-resili: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. a port already in use
        print(f"mcp-resili: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mcp-resili: interrupted; finished episodes are stored", file=sys.stderr)
        return 130
