"""Slots for scripted agents on real servers: the default (one per CPU) against the general default, 8.

Runs ``mcp-resili run --suite examples/tasks`` (the example task suite on its real filesystem and
SQLite servers, the suite's scripted agents, a fault on every tool's first call) as a user would, in
a fresh process each time: once with no ``--concurrency`` and once with ``--concurrency 8``,
alternating over rounds so load from other jobs hits both alike. Reported: the medians of each side's
CPU (the process and its servers) and wall time, their ratios, and whether both stored the same labels.

    python bench/taskfile_slots.py [--rounds R] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from benchdocs import write_section

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- taskfile-slots:start -->", "<!-- taskfile-slots:end -->"
FAULTS = (
    'kind = "rules"\n[[rules]]\ntool = "*"\ncalls = [1]\n'
    'fault = { type = "error", code = "UNAVAILABLE", message = "try again" }\n'
)
SIDES = {"default (one slot per CPU)": [], "--concurrency 8 (the general default)": ["--concurrency", "8"]}


def play(extra: list[str], workdir: Path, n: int) -> tuple[float, float, list[tuple[str, int]]]:
    """One run in a fresh process: (CPU of it and its children, wall seconds, full count per model)."""
    db = workdir / f"r{n}.db"
    command = [sys.executable, "-m", "mcp_resili", "run", "--suite", str(ROOT / "examples" / "tasks")]
    command += ["--faults", str(workdir / "faults.toml"), "--seed", "7", "--db", str(db), "--json", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, check=False, cwd=workdir)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"run failed: {proc.stderr.strip()[-500:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    groups = json.loads(proc.stdout)["groups"]
    return cpu, wall, sorted((g["model"], g["levels"]["full"]["count"]) for g in groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    results: dict[str, list[tuple[float, float]]] = {side: [] for side in SIDES}
    labels: dict[str, set[str]] = {side: set() for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "faults.toml").write_text(FAULTS, encoding="utf-8")
        play([], workdir, -1)  # warm-up: installs the servers on first use, outside the measurement
        n = 0
        for round_ in range(args.rounds):
            order = list(SIDES) if round_ % 2 == 0 else list(reversed(SIDES))
            for side in order:
                n += 1
                cpu, wall, full = play(SIDES[side], workdir, n)
                results[side].append((cpu, wall))
                labels[side].add(json.dumps(full))
                print(f"round {round_ + 1} {side}: {cpu:.2f} s CPU, {wall:.2f} s wall, full {full}")
    default, eight = list(SIDES)
    cpu = {side: statistics.median(c for c, _ in results[side]) for side in SIDES}
    wall = {side: statistics.median(w for _, w in results[side]) for side in SIDES}
    same = len(labels[default] | labels[eight]) == 1
    rows = "\n".join(
        f"| {side} | {cpu[side]:.2f} | {wall[side]:.2f} | "
        + " ".join(f"{c:.2f}/{w:.2f}" for c, w in results[side])
        + " |"
        for side in SIDES
    )
    section = f"""{START}
## Slots for scripted agents on real servers (`bench/taskfile_slots.py`)

Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} CPUs ({platform.machine()}), Python \
{platform.python_version()}; load average at the start {load:.1f}.

`mcp-resili run --suite examples/tasks --faults FIRST_CALL_FAILS --seed 7` (5 tasks on the real
filesystem and SQLite servers, the suite's scripted oracle and naive agents, 3 trials: 30 episodes),
each run a fresh process; {args.rounds} rounds alternating the two sides. CPU counts the runner and
every server it started.

| slots | CPU s (median) | wall s (median) | rounds (CPU/wall) |
|---|---:|---:|---|
{rows}

Default against 8 slots: **{cpu[default] / cpu[eight]:.2f}x** the CPU, \
**{wall[default] / wall[eight]:.2f}x** the wall time.
Same full counts on both sides: **{"yes" if same else "NO"}**.
Each slot starts every server of the suite once; scripted agents wait for nothing but CPU, so slots
beyond the CPUs only add server starts.

Reproduce: `python bench/taskfile_slots.py --write-docs`.
{END}"""
    print(section)
    if args.write_docs:
        write_section(section, START, END)


if __name__ == "__main__":
    main()
