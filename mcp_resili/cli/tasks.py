"""``suites`` (what is installed), ``tasks list|stats`` and ``score`` (a trace file against its task)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mcp_resili.cli.common import Commands
from mcp_resili.constants import DEFAULT_SUITE
from mcp_resili.errors import UserError


def register(commands: Commands) -> None:
    """Add ``suites``, ``tasks`` and ``score``."""
    suites = commands.add_parser("suites", help="list the installed suites and the package of each")
    suites.add_argument("--json", action="store_true", help="a JSON list, one object per suite")
    suites.set_defaults(handler=suites_command)

    tasks = commands.add_parser("tasks", help="inspect tasks")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", required=True)
    listing = tasks_sub.add_parser("list", help="list a suite's tasks")
    listing.add_argument("--suite", default=DEFAULT_SUITE)
    listing.add_argument("--json", action="store_true", help="a JSON list of task objects")
    listing.set_defaults(handler=tasks_list_command)
    stats = tasks_sub.add_parser(
        "stats", help="per-level statistics (length, valid paths, width, tools, groups, domains)"
    )
    stats.add_argument("--suite", default=DEFAULT_SUITE)
    stats.add_argument("--json", action="store_true", help="a JSON list, one object per level")
    stats.set_defaults(handler=tasks_stats_command)
    check = tasks_sub.add_parser(
        "check",
        help="validate task files and solve every task with its ground truth on the real servers (no faults)",
    )
    check.add_argument("path", help="a directory of task files (with its suite.toml), or one task file")
    check.add_argument(
        "--task", action="append", dest="tasks", metavar="ID", help="repeatable: check only these"
    )
    check.add_argument("--json", action="store_true", help="one JSON object per task")
    check.set_defaults(handler=tasks_check_command)

    score = commands.add_parser(
        "score", help="score a trace file written by `serve --trace-dir` or the runner"
    )
    score.add_argument("trace", type=Path)
    score.add_argument("--task", help="task id, when the trace header has none")
    score.add_argument(
        "--max-turns",
        type=int,
        help="score under this call budget instead of the trace header's (or the task's): "
        "e.g. the ResiliBench paper's 10 for an outside agent's trace",
    )
    score.set_defaults(handler=score_command)


def suites_command(args: argparse.Namespace) -> int:
    """Every registered suite with its source package; a broken one shows why, the others still list."""
    from rich.table import Table
    from rich.text import Text

    from mcp_resili.cli.common import stdout_console
    from mcp_resili.registry.loader import get_suite, registered_suites
    from mcp_resili.registry.suites import SuiteLoadError

    rows = []
    for name, entry in registered_suites().items():
        row: dict[str, object] = {
            "name": name,
            "package": entry.distribution,
            "version": entry.version,
            "entry_point": entry.target,
        }
        try:
            suite = get_suite(name)
            row.update(
                status="ok",
                tools=len(suite.library),
                default_tasks=len(suite.default_tasks),
                description=suite.description,
            )
        except SuiteLoadError as exc:
            row.update(status="broken", error=str(exc))
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="installed suites", title_justify="left")
    for column in ("suite", "package", "tools", "default tasks", "description"):
        table.add_column(column)
    for row in rows:
        ok = row["status"] == "ok"
        table.add_row(
            str(row["name"]),
            f"{row['package']} {row['version']}",
            str(row.get("tools", "-")),
            str(row.get("default_tasks", "-")),
            Text(str(row["description"])) if ok else Text.assemble(("broken: ", "red"), str(row["error"])),
        )
    stdout_console().print(table)
    return 0


def tasks_list_command(args: argparse.Namespace) -> int:
    """A suite's tasks as a table, or as JSON task objects."""
    from mcp_resili.registry.loader import get_suite
    from mcp_resili.tasks.listing import copied_listing, model_listing

    suite = get_suite(args.suite)
    if args.json and (copied := copied_listing(suite.tasks)) is not None:
        # The full ResiliBench suite's 5,040 tasks, copied from its file's text: none is built.
        sys.stdout.flush()
        sys.stdout.buffer.write(copied + b"\n")
        sys.stdout.buffer.flush()
        return 0
    tasks = list(suite.tasks)  # built once: a big suite's list builds each task when it is read
    if args.json:
        if any("domain" in t.metadata for t in tasks):
            # Suites with domains keep them in metadata; show them up front.
            listing = [{"domain": t.metadata.get("domain"), **t.model_dump(mode="json")} for t in tasks]
            json.dump(listing, sys.stdout)
            sys.stdout.write("\n")
            return 0
        sys.stdout.flush()
        sys.stdout.buffer.write(model_listing(tasks) + b"\n")
        sys.stdout.buffer.flush()
        return 0
    from rich.table import Table

    from mcp_resili.cli.common import stdout_console

    table = Table(title=f"{suite.name}: {len(tasks)} tasks", title_justify="left")
    for column in ("id", "type", "complexity", "tools", "description"):
        table.add_column(column)
    for t in tasks:
        table.add_row(t.id, t.task_type, t.complexity, str(len(t.required_tools)), t.description[:70])
    stdout_console().print(table)
    return 0


def tasks_check_command(args: argparse.Namespace) -> int:
    """``tasks check``: its module (the whole run machinery) is imported only when the command runs."""
    from mcp_resili.cli.taskcheck import tasks_check_command as check_command

    return check_command(args)


def tasks_stats_command(args: argparse.Namespace) -> int:
    """Per-level task statistics (ToolMaze's Table 1 columns) for any suite."""
    from rich.console import Console
    from rich.table import Table

    from mcp_resili.registry.loader import get_suite
    from mcp_resili.tasks.stats import level_statistics

    rows = level_statistics(get_suite(args.suite).tasks)
    if args.json:
        json.dump([r.to_dict() for r in rows], sys.stdout)
        sys.stdout.write("\n")
        return 0
    table = Table(title=f"{args.suite}: task statistics per level", title_justify="left")
    columns = (
        "level",
        "tasks",
        "mean length",
        "min/max",
        "valid paths",
        "width",
        "tools",
        "groups",
        "domains",
    )
    for column in columns:
        table.add_column(column)
    for r in rows:
        table.add_row(
            r.level,
            str(r.tasks),
            f"{r.mean_length:.2f}",
            f"{r.min_length}/{r.max_length}",
            f"{r.mean_valid_paths:g}",
            f"{r.mean_width:g}",
            str(r.tools),
            " ".join(f"{k}={v}" for k, v in r.groups.items()) or "-",
            " ".join(f"{k}={v}" for k, v in r.domains.items()),
        )
    Console(width=160, markup=False).print(table)
    return 0


def score_command(args: argparse.Namespace) -> int:
    """Score a trace file with its suite's scorer; print the score as JSON."""
    from mcp_resili.registry.loader import get_suite
    from mcp_resili.registry.suites import UnknownTaskError
    from mcp_resili.scoring.coping import score_episode
    from mcp_resili.trace import Trace

    if args.max_turns is not None and args.max_turns < 1:
        raise UserError(f"--max-turns must be at least 1, got {args.max_turns}")
    trace = Trace.read(args.trace)
    if args.max_turns is not None:
        trace = trace.model_copy(
            update={"header": trace.header.model_copy(update={"max_turns": args.max_turns})}
        )
    suite = get_suite(trace.header.suite)
    task_id = args.task or trace.header.task
    if task_id is None:
        raise UnknownTaskError(f"{args.trace} names no task; pass --task ID")
    result = score_episode(suite, suite.task(task_id), trace)
    print(json.dumps(result.model_dump(mode="json"), indent=2))
    return 0
