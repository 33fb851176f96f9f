"""``export``: stored episodes as JSONL, CSV or Parquet rows, or their traces as JSONL (reads only)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from mcp_resili.cli.common import Commands

if TYPE_CHECKING:
    from mcp_resili.store.export import TextSink
    from mcp_resili.store.sqlite import Store


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
    """Write the rows (or traces) of the runs to ``--out`` or stdout.

    ``--out`` is written beside itself and replaces the file only once every row is written: a
    failed export leaves an existing file as it was. Stdout gets UTF-8 whatever its encoding (the
    same bytes as ``--out``); a reader that stops early (``| head``) ends the export quietly, with
    status 141 (128 + SIGPIPE, as a shell reports a command killed by it).
    """
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
        named: set[str] = set()
        for run_id in runs:  # every run exists before anything is written
            stored = store.require_run(run_id).id
            if stored in named:  # its rows would be written twice
                raise export.ExportError(
                    f"a run is named twice in {' '.join(args.runs)}: export different runs"
                )
            named.add(stored)
        if args.out is None:
            count = _write_stdout(args, store, runs)
            if count is None:
                return 141
        else:
            with export.replacing(args.out) as path:
                if args.format == "parquet":
                    count = export.write_parquet(list(export.export_records(store, runs)), path)
                else:
                    with path.open("w", encoding="utf-8", newline="") as out:
                        count = _write_text(args, store, runs, out)
    finally:
        store.close()
    what = "traces" if args.traces else f"{args.format} rows"
    print(f"wrote {count} episodes' {what} to {args.out or 'stdout'}", file=sys.stderr)
    return 0


def _write_text(args: argparse.Namespace, store: Store, runs: list[str | None], out: TextSink) -> int:
    from mcp_resili.store import export

    if args.traces:
        return export.write_traces(store, runs, out)
    if args.format == "csv":
        return export.write_csv(list(export.export_records(store, runs)), out)
    return export.write_jsonl(export.export_records(store, runs), out)


class _Utf8Stdout:
    """Text written to stdout's byte stream as UTF-8: the export's encoding, not the terminal's."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        """Write ``text`` encoded as UTF-8."""
        return self.stream.write(text.encode("utf-8"))


def _write_stdout(args: argparse.Namespace, store: Store, runs: list[str | None]) -> int | None:
    """Write to stdout; the count, or None when the reader closed the pipe (nothing is printed)."""
    binary: BinaryIO | None = getattr(sys.stdout, "buffer", None)
    try:
        if binary is None:  # a stdout replaced by a text-only stream: it has its own encoding
            count = _write_text(args, store, runs, sys.stdout)
            sys.stdout.flush()
        else:
            sys.stdout.flush()  # anything already written as text goes first
            count = _write_text(args, store, runs, _Utf8Stdout(binary))
            binary.flush()
    except BrokenPipeError:
        _silence_stdout()
        return None
    return count


def _silence_stdout() -> None:
    """Point stdout's file descriptor at the null device.

    Python flushes stdout again at exit; with the reader gone that flush would fail and print
    "Exception ignored ... BrokenPipeError". A stdout without a descriptor has nothing to point.
    """
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
