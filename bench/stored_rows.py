"""Do two versions of mcp-resili store the same rows? Plays four runs with each and compares them.

The runs cover every path a refactor can disturb: the default run (ResiliBench, two scripted agents),
a ``--faults protocol:heavy`` run, a ToolMaze ``P3`` run and a ReliabilityBench ``lambda=0.3``
Reflexion run. Each version plays them from its own source tree (a git revision checked out into a
temporary work tree, or this checkout) into its own database; the rows are compared column by column
with the run id replaced, so only a changed number, label, score component or trace line differs.

    python bench/stored_rows.py --against HEAD~5     # this checkout against an earlier revision
    python bench/stored_rows.py --against main --quick

Exit 0 when every run stores identical rows, 1 (naming the first difference) when not.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (name, arguments of ``mcp-resili run``): what each version plays.
RUNS = (
    ("default", []),
    ("protocol-heavy", ["--faults", "protocol:heavy", "--limit", "12", "--trials", "2", "--time-scale", "0"]),
    (
        "toolmaze-p3",
        [
            "--suite",
            "toolmaze",
            "--faults",
            "toolmaze:P3",
            "--limit",
            "24",
            "--trials",
            "2",
            "--model",
            "scripted:oracle",
            "--model",
            "scripted:retry",
        ],
    ),
    (
        "reliabilitybench-reflexion",
        [
            "--suite",
            "reliabilitybench",
            "--faults",
            "lambda=0.3",
            "--architecture",
            "reflexion",
            "--limit",
            "12",
            "--trials",
            "3",
            "--time-scale",
            "0",
        ],
    ),
)
QUICK = {"default": ["--limit", "8", "--trials", "2"]}


def play(tree: Path, name: str, arguments: list[str], db: Path) -> list[dict[str, object]]:
    """The rows one run of ``tree`` stores, run id replaced by ``RUN``, in episode order."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", "mcp_resili", "run", *arguments, "--db", str(db), "--json"]
    proc = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed in {tree}: {proc.stderr.strip().splitlines()[-1:]}")
    connection = sqlite3.connect(db)
    try:
        (run_id,) = connection.execute("SELECT id FROM runs ORDER BY created_at DESC LIMIT 1").fetchone()
        cursor = connection.execute("SELECT * FROM episodes WHERE run_id = ? ORDER BY episode_id", (run_id,))
        columns = [description[0] for description in cursor.description]
        rows = cursor.fetchall()
    finally:
        connection.close()
    out = []
    for row in rows:
        record = {key: value for key, value in zip(columns, row, strict=True) if key != "run_id"}
        out.append(json.loads(json.dumps(record).replace(run_id, "RUN")))
    return out


def checkout(revision: str, into: Path) -> Path:
    """A work tree of ``revision`` (the package only), for the old version's runs."""
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into), revision],
        check=True,
        capture_output=True,
    )
    return into


def first_difference(old: list[dict[str, object]], new: list[dict[str, object]]) -> str | None:
    """Where two runs' rows first differ, in words (None when identical)."""
    if len(old) != len(new):
        return f"{len(old)} rows before, {len(new)} after"
    for before, after in zip(old, new, strict=True):
        if before != after:
            keys = sorted(k for k in {*before, *after} if before.get(k) != after.get(k))
            return f"episode {before.get('episode_id')}: columns {', '.join(keys)} differ"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the git revision to compare this checkout with")
    parser.add_argument("--quick", action="store_true", help="a smaller default run")
    parser.add_argument("--only", action="append", default=[], help="play only these runs (by name)")
    args = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = checkout(args.against, Path(tmp) / "old")
        try:
            for name, arguments in RUNS:
                if args.only and name not in args.only:
                    continue
                arguments = [*arguments, *QUICK.get(name, [])] if args.quick else arguments
                old = play(old_tree, name, arguments, Path(tmp) / f"{name}-old.db")
                new = play(ROOT, name, arguments, Path(tmp) / f"{name}-new.db")
                digest = hashlib.sha256(json.dumps(new, sort_keys=True).encode()).hexdigest()[:16]
                problem = first_difference(old, new)
                failures += problem is not None
                verdict = "identical" if problem is None else f"DIFFERENT: {problem}"
                print(f"{name:28} {len(new):5} rows  sha256 {digest}  {verdict}", flush=True)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old_tree)], capture_output=True
            )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
