"""``report``: tables, JSON, HTML or SVG figures of a stored run, or a comparison of several runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mcp_resili.cli.common import Commands


def register(commands: Commands) -> None:
    """Add ``report``."""
    from mcp_resili.constants import BREAKDOWN_KEYS

    report = commands.add_parser(
        "report",
        help="tables, JSON, HTML or SVG figures of a stored run; several runs: compared side by side",
    )
    report.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="run id (default: the latest run in the database); two or more: compare them",
    )
    report.add_argument("--run", dest="run_option", metavar="RUN", help="one run id, as an option")
    report.add_argument("--db", type=Path, default=Path("mcp-resili.db"), help="results database (SQLite)")
    report.add_argument(
        "--by",
        action="append",
        choices=BREAKDOWN_KEYS,
        default=[],
        help="also break the outcome table down by this key (repeatable; one run only)",
    )
    report.add_argument("--json", action="store_true", help="print every section's data as JSON")
    report.add_argument(
        "--html",
        type=Path,
        metavar="PATH",
        help="write the HTML report: FILE.html (one self-contained file, up to 10 MB) or a folder "
        "(index.html plus episodes loaded on demand; any size)",
    )
    report.add_argument("--svg", type=Path, metavar="DIR", help="write every chart as its own SVG file here")
    report.add_argument(
        "--baseline",
        metavar="SPEC",
        help="the fault spec degradation is measured from (default: none, else the mildest spec)",
    )
    report.set_defaults(handler=report_command)


def report_command(args: argparse.Namespace) -> int:
    """Print (or write) the report of one stored run, or the comparison of several."""
    from mcp_resili.cli.common import refuse_database_as_output, stdout_console
    from mcp_resili.registry.loader import find_suite
    from mcp_resili.report.build import ReportError, load_report
    from mcp_resili.report.compare import load_comparison
    from mcp_resili.report.episodes import DetailSpool
    from mcp_resili.report.html import write_figures, write_html
    from mcp_resili.report.terminal import section_summaries, section_tables

    refuse_database_as_output(args.html, args.db, "--html")
    runs = [*args.runs, *([args.run_option] if args.run_option else [])]
    if len(set(runs)) < len(runs):
        raise ReportError(f"a run is named twice in {' '.join(runs)}: compare different runs")
    if len(runs) > 1 and args.by:
        raise ReportError("--by breaks down one run's outcome table; drop it to compare runs")
    # The HTML's episode details are made in the same pass over the traces as the workflow metrics.
    spool = DetailSpool() if args.html is not None else None
    report = (
        load_comparison(args.db, runs, find_suite, args.baseline, spool)
        if len(runs) > 1
        else load_report(
            args.db,
            runs[0] if runs else None,
            by=args.by,
            find_suite=find_suite,
            baseline=args.baseline,
            observer=spool,
        )
    )
    if args.html is not None:
        print(f"wrote {write_html(report, args.html)}", file=sys.stderr)
    if args.svg is not None:
        figures = write_figures(report, args.svg)
        print(f"wrote {len(figures)} SVG figures to {args.svg}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    elif args.html is None and args.svg is None:
        out = stdout_console()
        if report.comparison:
            out.print(f"comparing {len(report.runs)} runs · {report.episodes} episodes")
        else:
            out.print(f"run {report.run.id} · suite {report.run.suite} · {report.episodes} episodes")
        for table in section_tables(report.sections):
            out.print(table)
        for line in section_summaries(report.sections):
            out.print(line, highlight=False, soft_wrap=True)
    return 0
