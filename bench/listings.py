"""CPU of ``mcp-resili --help`` and ``tasks list --suite resilibench --json``, against a baseline revision.

Each command runs in a fresh child process (``python -m mcp_resili``) from each side's own source
tree, measured from outside: the child's user + system CPU (``os.wait4``). Rounds alternate baseline
and this checkout, so other jobs on the machine weigh on both alike; the median of each side is
reported, with the ratio. The two listings must be byte-identical (checked on every round).

    python bench/listings.py [--base REV] [--rounds R] [--write-docs]

The default baseline is where this checkout left ``main`` (``git merge-base HEAD main``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from benchdocs import write_section
from trees import ROOT, checkout, revision_of, tree_env

START, END = "<!-- listings:start -->", "<!-- listings:end -->"
#: (name, arguments of ``python -m mcp_resili``, goal in CPU seconds from issue 37 item 4).
COMMANDS = (
    ("--help", ["--help"], 0.3),
    ("tasks list --suite resilibench --json", ["tasks", "list", "--suite", "resilibench", "--json"], 1.0),
)


def cpu_of(tree: Path, arguments: list[str]) -> tuple[float, str, int]:
    """(user + system CPU seconds, sha256 of stdout, its bytes) of one run of the command from ``tree``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mcp_resili", *arguments],
            cwd=tree,
            env=tree_env(tree),
            stdout=out,
            stderr=err,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        out.seek(0)
        data = out.read()
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{arguments} failed in {tree}: {err.read().decode().strip().splitlines()[-1:]}")
    return usage.ru_utime + usage.ru_stime, hashlib.sha256(data).hexdigest(), len(data)


def imported_from(tree: Path) -> Path:
    """Where ``import mcp_resili`` finds the package with ``tree``'s environment (it must be ``tree``)."""
    found = subprocess.run(
        [sys.executable, "-c", "import mcp_resili; print(mcp_resili.__file__)"],
        cwd=tree,
        env=tree_env(tree),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(found).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base", default=None, help="the baseline revision (default: git merge-base HEAD main)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="runs of each command on each side")
    parser.add_argument("--write-docs", action="store_true", help="rewrite its section of docs/benchmarks.md")
    args = parser.parse_args()
    base = (
        args.base
        or subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], capture_output=True, text=True, check=True
        ).stdout.strip()[:10]
    )
    cpu: dict[tuple[str, str], list[float]] = {}
    sizes: dict[str, int] = {}
    with checkout(base) as base_tree, checkout(".") as ours:
        trees = {"base": base_tree, "this": ours}
        for side, tree in trees.items():
            if imported_from(tree) != tree.resolve():
                raise SystemExit(f"{side}: mcp_resili imports from {imported_from(tree)}, not from {tree}")
        names = {
            "base": f"baseline `{base}` ({revision_of(base_tree)})",
            "this": f"this ({revision_of(ours)})",
        }
        for name, arguments, _ in COMMANDS:
            for _ in range(args.rounds):
                digests = {}
                for side, tree in trees.items():
                    seconds, digests[side], sizes[name] = cpu_of(tree, arguments)
                    cpu.setdefault((name, side), []).append(seconds)
                if name != "--help" and digests["base"] != digests["this"]:
                    raise SystemExit(f"{name}: the output differs from the baseline's")
            medians = {side: statistics.median(cpu[(name, side)]) for side in trees}
            print(
                f"{name:40} baseline {medians['base']:.3f} s  this {medians['this']:.3f} s  "
                f"ratio {medians['this'] / medians['base']:.2f}",
                flush=True,
            )
    if args.write_docs:
        lines = [
            "| command | baseline CPU s | this CPU s | this ÷ baseline | goal | met |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for name, _, goal in COMMANDS:
            old, new = (statistics.median(cpu[(name, side)]) for side in ("base", "this"))
            lines.append(
                f"| `mcp-resili {name}` | {old:.2f} | {new:.2f} | **{new / old:.2f}** | < {goal:g} s "
                f"| {'yes' if new < goal else 'no'} |"
            )
        listing = COMMANDS[1][0]
        section = "\n".join(
            [
                START,
                "## Listings: `--help` and `tasks list --json` (`bench/listings.py`)",
                "",
                f"Each command in a fresh `python -m mcp_resili` process from each side's source tree, "
                f"{args.rounds} runs per side alternating with the other, median user + system CPU of the "
                f"child. {names['base']} against {names['this']}; {datetime.now(UTC):%Y-%m-%d}, Python "
                f"{platform.python_version()}, {os.cpu_count()} shared cores ({platform.machine()}). "
                f"The listing ({sizes[listing]:,} bytes) was byte-identical on both sides in every run.",
                "",
                *lines,
                END,
            ]
        )
        write_section(section, START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
