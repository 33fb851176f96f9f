"""Peak memory and CPU of building a ten-run comparison report, against a baseline revision.

The store is made as `compare_open` makes it: one scripted ResiliBench sweep (played once, or an
existing store holding one named with ``--source``) copied into a new store as ten runs with SQL,
varying nothing but the run id and the episode ids. Each side builds
``mcp-resili report R1 ... R10 --html DIR`` from its own source tree in a fresh child process, CPU
and peak RSS measured from outside (``wait4``); rounds alternate sides. Then the two folders are
compared file by file: the same names and the same bytes (the data folder's name is a hash of its
content, so equal names already say the data is equal).

    python bench/compare_build.py --source /tmp/sweep.db --write-docs
"""

from __future__ import annotations

import filecmp
import os
import platform
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from benchdocs import write_section
from compare_open import Side, build, prepared_runs, sweep_parser
from trees import checkout, revision_of

START, END = "<!-- compare-build:start -->", "<!-- compare-build:end -->"
#: Goal of issue 37 (item 5): reports built with RSS under 300 MB; here for the ten-run comparison.
GOAL_MIB = 300


def same_folders(a: Path, b: Path) -> tuple[bool, int]:
    """Whether ``a`` and ``b`` hold the same file names with the same bytes; and how many files."""
    names = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
    if names != sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file()):
        return False, len(names)
    _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    return not mismatch and not errors, len(names)


def main() -> int:
    parser = sweep_parser(__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="builds per side")
    parser.add_argument("--base", default="4e1c713", help="baseline revision")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mcp-resili-compare-build-") as tmp:
        work = Path(tmp)
        db, run_ids, per_run = prepared_runs(work, args.source, args.episodes, args.runs, "runs.db")
        with checkout(args.base) as base_tree, checkout(args.this) as ours:
            trees = {"base": base_tree, "this": ours}
            names = {"base": f"baseline `{args.base[:10]}`", "this": f"this ({revision_of(ours)})"}
            builds: dict[str, list[Side]] = {"base": [], "this": []}
            for n in range(args.rounds):
                for key in ("base", "this") if n % 2 == 0 else ("this", "base"):
                    side = Side(names[key])
                    out = work / f"{key}-{n}"
                    build(trees[key], db, run_ids, out, side)
                    builds[key].append(side)
                    print(
                        f"{side.name:28} built in CPU {side.cpu:.1f} s, peak RSS {side.peak_mib:.0f} MiB, "
                        f"{side.bytes_on_disk / 1e6:.1f} MB",
                        flush=True,
                    )
            same, files = same_folders(work / "base-0", work / "this-0")
    print(f"the two folders: {'the same bytes' if same else 'DIFFERENT'} ({files} files)")
    cpu = {key: statistics.median(s.cpu for s in sides) for key, sides in builds.items()}
    peak = {key: statistics.median(s.peak_mib for s in sides) for key, sides in builds.items()}
    print(f"this / baseline: CPU {cpu['this'] / cpu['base']:.2f}, peak RSS {peak['this'] / peak['base']:.2f}")
    if args.write_docs:
        machine = f"Python {platform.python_version()}, {os.cpu_count()} shared cores"
        total = args.runs * per_run
        met = "**met**" if peak["this"] < GOAL_MIB else "**not met**"
        lines = [
            START,
            f"### Building the {args.runs}-run comparison (`bench/compare_build.py`)",
            "",
            f"The same store as above ({args.runs} copies of one {per_run:,}-episode scripted sweep, "
            f"{total:,} episodes); each side builds `report R1 … R{args.runs} --html DIR` from its own "
            f"source tree in a child process, measured from outside; {args.rounds} build(s) per side, "
            f"alternating, median shown. {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {machine}.",
            "",
            "| revision | build CPU s | build peak RSS MiB | folder MB |",
            "|---|---:|---:|---:|",
        ]
        for key, sides in builds.items():
            lines.append(
                f"| {names[key]} | {cpu[key]:.1f} | {peak[key]:.0f} | {sides[0].bytes_on_disk / 1e6:.1f} |"
            )
        lines += [
            "",
            f"This ÷ baseline: CPU **{cpu['this'] / cpu['base']:.2f}**, peak RSS "
            f"**{peak['this'] / peak['base']:.2f}**. Goal: under {GOAL_MIB} MiB ({met}). The two folders "
            f"are {'byte for byte the same' if same else '**not** the same'} ({files} files).",
            END,
        ]
        write_section("\n".join(lines), START, END)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
