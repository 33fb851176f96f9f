"""``export``: stored episodes as JSONL, CSV or Parquet rows, or their traces as JSONL (reads only)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mcp_resili.cli.common import Commands


def register(commands: Commands) -> None:
    """Add ``export``."""
    export = commands.add_parser(
        "export",
        help="one row per episode (score components, fault ledger, tokens, cost) as JSONL, CSV or Parquet",
        description="Write every episode of the given runs as one flat row (docs/reports.md lists the "
        "columns), or with --traces every episode's trace as JSONL.",
    )
    export.add_argument("runs", nargs="*", metavar="RUN", help="run ids (default: the latest run)")
    export.add_argument(
        "--format",
        choices=("jsonl", "csv", "parquet"),
        default="jsonl",
        help="row format (default: jsonl); parquet needs the [parquet] extra (pyarrow) and --out",
    )
    export.add_argument("--out", type=Path, metavar="PATH", help="output file (default: stdout)")
    export.add_argument("--db", type=Path, default=Path("mcp-resili.db"), help="results database (SQLite)")
    export.add_argument(
        "--traces", action="store_true", help="write the episodes' traces (JSONL, one event per line) instead"
    )
    export.set_defaults(handler=export_command)


def export_command(args: argparse.Namespace) -> int:
    """Write the rows (or traces) of the runs to ``--out`` or stdout."""
    from mcp_resili.cli.common import refuse_database_as_output
    from mcp_resili.report.build import open_store
    from mcp_resili.store import export

    if args.traces and args.format != "jsonl":
        raise export.ExportError("--traces writes JSONL; drop --format or use --format jsonl")
    if args.format == "parquet" and args.out is None:
        raise export.ExportError("Parquet is a binary file: give --out FILE.parquet")
    refuse_database_as_output(args.out, args.db, "--out")
    runs = list(args.runs) or [None]
    store = open_store(args.db)
    try:
        for run_id in runs:  # every run exists before anything is written
            store.require_run(run_id)
        if args.format == "parquet":
            count = export.write_parquet(list(export.export_records(store, runs)), args.out)
        else:
            out = sys.stdout if args.out is None else args.out.open("w", encoding="utf-8", newline="")
            try:
                if args.traces:
                    count = export.write_traces(store, runs, out)
                elif args.format == "csv":
                    count = export.write_csv(list(export.export_records(store, runs)), out)
                else:
                    count = export.write_jsonl(export.export_records(store, runs), out)
            finally:
                if out is not sys.stdout:
                    out.close()
    finally:
        store.close()
    what = "traces" if args.traces else f"{args.format} rows"
    print(f"wrote {count} episodes' {what} to {args.out or 'stdout'}", file=sys.stderr)
    return 0
