"""``plan-size``: how many tasks × trials a comparison needs to see a given difference."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mcp_resili.cli.common import Commands


def register(commands: Commands) -> None:
    """Add ``plan-size``."""
    plan = commands.add_parser(
        "plan-size",
        help="tasks × trials needed to detect a difference (power 0.8, α 0.05), from a pilot run or assumed",
        description="How many tasks and trials per task a paired comparison needs to detect a difference "
        "of --effect with power 0.8 at α 0.05 (two-sided), with tasks as the independent units. Given "
        "stored runs (a pilot), every comparison they hold is planned from its own measured variance; "
        "without, a conservative assumption is stated.",
    )
    plan.add_argument(
        "runs", nargs="*", metavar="RUN", help="pilot run id(s) in --db (none: assume the variance)"
    )
    plan.add_argument(
        "--effect",
        type=float,
        required=True,
        help="the difference to detect: a rate difference (0.05 = 5 points), or of the score value",
    )
    plan.add_argument(
        "--trials",
        type=int,
        action="append",
        metavar="R",
        help="trials per task to plan for (repeatable; default: 1 2 3 5 10)",
    )
    plan.add_argument(
        "--metric", choices=("full", "value"), default="full", help="the metric compared (default: full)"
    )
    plan.add_argument("--db", type=Path, default=Path("mcp-resili.db"), help="results database (SQLite)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(handler=plan_command)


def plan_command(args: argparse.Namespace) -> int:
    """Print the tasks needed per trial count, for each comparison of the pilot runs (or assumed)."""
    from rich.table import Table

    from mcp_resili.cli.common import stdout_console
    from mcp_resili.errors import UserError
    from mcp_resili.report.build import load_runs
    from mcp_resili.report.plan import DEFAULT_TRIALS, assumed_plan, pilot_plans

    if not args.effect > 0 or (args.metric == "full" and args.effect > 1):
        raise UserError(f"--effect must be a difference above 0 (a rate: at most 1), got {args.effect}")
    trials = tuple(sorted(set(args.trials or DEFAULT_TRIALS)))
    if trials[0] < 1:
        raise UserError(f"--trials must be at least 1, got {trials[0]}")
    if len(set(args.runs)) < len(args.runs):
        raise UserError(f"a run is named twice in {' '.join(args.runs)}")
    if args.runs:
        rows = pilot_plans(load_runs(args.db, args.runs), args.effect, trials, args.metric)
        if not rows:
            raise UserError(
                f"runs {' '.join(args.runs)} hold no paired comparison (two models, two fault specs or "
                "two runs on the same tasks and trials): nothing to plan from"
            )
    else:
        rows = [assumed_plan(args.effect, trials)]
    if args.json:
        payload = {
            "effect": args.effect,
            "metric": args.metric,
            "alpha": 0.05,
            "power": 0.8,
            "plans": [r.to_dict() for r in rows],
        }
        print(json.dumps(payload, indent=2))
        return 0
    unit = f"{100 * args.effect:g} points" if args.metric == "full" else f"{args.effect:g}"
    table = Table(
        title=f"Tasks needed to detect a difference of {unit} in {args.metric} (power 0.8, α 0.05)",
        title_justify="left",
        caption="tasks × trials per task are the episodes per side; tasks are the independent units",
        caption_justify="left",
    )
    for column in ("comparison", "pilot tasks × trials", "detectable now"):
        table.add_column(column)
    for r in trials:
        table.add_column(f"tasks at {r} trial{'s' if r > 1 else ''}", justify="right")
    for row in rows:
        pilot = "–" if row.tasks is None else f"{row.tasks} × {row.trials:g}"
        now = (
            "–"
            if row.detectable is None
            else (f"{100 * row.detectable:.1f} pts" if args.metric == "full" else f"{row.detectable:.3f}")
        )
        table.add_row(row.comparison, pilot, now, *(f"{row.needed[r]:,}" for r in trials))
    stdout_console().print(table)
    return 0
