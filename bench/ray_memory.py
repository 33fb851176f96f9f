"""Peak memory of `mcp-resili run --executor ray --ray-workers 2`, against a baseline revision, same run.

Each side plays the same scripted ResiliBench sweep as ``bench/runner_memory.py`` (``scripted:oracle``,
four prompt variants, 16 episodes in flight) from its own source tree in a fresh process, on a Ray
instance that process starts for itself with ``--ray-workers 2``. Ray's processes are the driver's
descendants (its GCS server and raylet, which start the worker processes), so the whole tree is
sampled from outside every half second: each process's peak resident set (``VmHWM``, exact up to its
last sample), the sum over the tree at each sample, and each process's CPU at its last sample. The
driver's own peak and CPU come from ``wait4`` exactly.

    python bench/ray_memory.py [--base REV|none] [--tasks N] [--trials T] [--write-docs]

``--trials 10`` plays the sweep ten times over (201,600 episodes); ``--base none`` measures this
checkout alone (a baseline that keeps every row needs gigabytes at that size).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from benchdocs import write_section
from trees import checkout, cpu_seconds, revision_of, rss_mib, run_measured, tree_env

START, END = "<!-- ray-memory:start -->", "<!-- ray-memory:end -->"
#: The runner before issue 37's item 3 (it kept every finished episode's row for the whole run).
DEFAULT_BASE = "94167cf"
VARIANTS = ("baseline", "cot", "optimal", "flawed:sequence_disorder")
WORKERS = 2
#: Seconds between two samples of the process tree.
EVERY = 0.5


@dataclass
class Measured:
    episodes: int
    driver_peak: float
    driver_cpu: float
    #: Peak resident set of each episode worker process (MiB), by pid.
    worker_peaks: dict[int, float]
    #: Peak of the Ray processes other than the workers, summed at each sample (MiB).
    ray_peak: float
    #: Largest sum of every process of the tree at one sample (MiB).
    tree_peak: float
    cpu: float
    wall: float
    samples: list[tuple[float, float, float]] = field(default_factory=list)


def command(db: Path, tasks: int | None, trials: int) -> list[str]:
    """The run both sides play."""
    argv = [sys.executable, "-m", "mcp_resili", "run", "--model", "scripted:oracle", "--trials", str(trials)]
    argv += ["--concurrency", "16", "--json", "--db", str(db), "--executor", "ray"]
    argv += ["--ray-workers", str(WORKERS)]
    argv += ["--limit", str(tasks)] if tasks else ["--all-tasks"]
    for variant in VARIANTS:
        argv += ["--variant", variant]
    return argv


def descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def title(pid: int) -> str:
    """The process's command line as Ray shows it (its workers rename themselves ``ray::...``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class Sampler(threading.Thread):
    """Samples the driver's descendants until stopped."""

    def __init__(self, driver: int) -> None:
        super().__init__(daemon=True)
        self.driver = driver
        self.stop = threading.Event()
        self.peaks: dict[int, float] = {}
        self.cpu: dict[int, float] = {}
        self.workers: set[int] = set()
        self.ray_peak = 0.0
        self.tree_peak = 0.0
        self.samples: list[tuple[float, float, float]] = []
        self.started = time.perf_counter()

    def run(self) -> None:
        while not self.stop.wait(EVERY):
            tree_now = ray_now = 0.0
            worker_now = 0.0
            driver_now = 0.0
            for pid in [self.driver, *descendants(self.driver)]:
                try:
                    now, peak = rss_mib(pid)
                    self.cpu[pid] = cpu_seconds(pid)
                except (OSError, ValueError):
                    continue
                self.peaks[pid] = max(self.peaks.get(pid, 0.0), peak)
                tree_now += now
                if pid == self.driver:
                    driver_now = now
                elif "EpisodeWorker" in title(pid):
                    self.workers.add(pid)
                    worker_now = max(worker_now, now)
                else:
                    ray_now += now
            self.ray_peak = max(self.ray_peak, ray_now)
            self.tree_peak = max(self.tree_peak, tree_now)
            self.samples.append((time.perf_counter() - self.started, driver_now, worker_now))


def play(tree: Path, tasks: int | None, trials: int = 1) -> Measured:
    """Play the sweep from ``tree`` on Ray in a child process and measure its whole process tree."""
    samplers: list[Sampler] = []

    def sample(pid: int) -> None:
        samplers.append(Sampler(pid))
        samplers[0].start()

    with tempfile.TemporaryDirectory(prefix="mcp-resili-ray-memory-") as tmp:
        try:
            child = run_measured(
                command(Path(tmp) / "run.db", tasks, trials), Path(tmp), tree_env(tree), sample
            )
        finally:
            for sampler in samplers:
                sampler.stop.set()
                sampler.join()
    if child.code != 0:
        raise SystemExit(f"the run of {tree} failed: {child.stderr.strip().splitlines()[-3:]}")
    sampler = samplers[0]
    driver_cpu = child.usage.ru_utime + child.usage.ru_stime
    others = sum(cpu for pid, cpu in sampler.cpu.items() if pid != sampler.driver)
    return Measured(
        episodes=int(json.loads(child.stdout)["episodes"]),
        driver_peak=child.usage.ru_maxrss / 1024,  # Linux: KiB
        driver_cpu=driver_cpu,
        worker_peaks={pid: sampler.peaks[pid] for pid in sorted(sampler.workers)},
        ray_peak=sampler.ray_peak,
        tree_peak=sampler.tree_peak,
        cpu=driver_cpu + others,
        wall=child.wall,
        samples=sampler.samples,
    )


def line(name: str, got: Measured) -> str:
    """One side's result in a line."""
    workers = " / ".join(f"{peak:.0f}" for peak in got.worker_peaks.values()) or "none seen"
    return (
        f"{name:40} {got.episodes:,} episodes: driver peak {got.driver_peak:.0f} MiB, workers' peaks "
        f"{workers} MiB, Ray's other processes {got.ray_peak:.0f} MiB, whole tree {got.tree_peak:.0f} MiB; "
        f"CPU {got.cpu:.0f} s ({1000 * got.cpu / got.episodes:.2f} ms per episode), wall {got.wall:.0f} s"
    )


def trend(got: Measured) -> str:
    """The driver's and the busiest worker's resident set at each quarter of the run (MiB)."""
    if len(got.samples) < 4:
        return "too few samples"
    picks = [got.samples[min(len(got.samples) - 1, len(got.samples) * q // 4)] for q in (1, 2, 3, 4)]
    picks[-1] = got.samples[-1]
    return ", ".join(f"{t:.0f} s: driver {d:.0f} / worker {w:.0f}" for t, d, w in picks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=DEFAULT_BASE, help="the baseline revision, or none")
    parser.add_argument("--tasks", type=int, default=None, help="first N tasks only (default: all 5,040)")
    parser.add_argument("--trials", type=int, default=1, help="trials per task and variant")
    parser.add_argument("--write-docs", action="store_true", help="rewrite its section of docs/benchmarks.md")
    args = parser.parse_args()
    results: dict[str, Measured] = {}
    names: dict[str, str] = {}
    with checkout("." if args.base == "none" else args.base) as base_tree, checkout(".") as ours:
        sides = [("this", ours)] if args.base == "none" else [("base", base_tree), ("this", ours)]
        for side, tree in sides:
            revision = revision_of(tree)
            names[side] = f"this ({revision})" if side == "this" else f"baseline `{args.base}` ({revision})"
            got = results[side] = play(tree, args.tasks, args.trials)
            print(line(names[side], got), flush=True)
            print(f"  resident set along the way: {trend(got)}", flush=True)
    if args.write_docs:
        rows = [
            "| revision | episodes | driver peak MiB | each worker's peak MiB | Ray's other processes MiB "
            "| whole tree MiB | CPU s (all processes) | CPU ms per episode |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for side, got in results.items():
            workers = " / ".join(f"{peak:.0f}" for peak in got.worker_peaks.values())
            rows.append(
                f"| {names[side]} | {got.episodes:,} | {got.driver_peak:.0f} | {workers} "
                f"| {got.ray_peak:.0f} | {got.tree_peak:.0f} | {got.cpu:.0f} "
                f"| {1000 * got.cpu / got.episodes:.2f} |"
            )
        this = results["this"]
        biggest = max([this.driver_peak, *this.worker_peaks.values()])
        verdict = "met" if biggest < 300 else "not met"
        scope = f"--limit {args.tasks}" if args.tasks else "--all-tasks"
        summary = [
            f"Largest process of this run: {biggest:.0f} MiB. Goal (issue 37 item 3, on Ray with two "
            f"workers): peak RSS under 300 MiB: **{verdict}**. Along the way: {trend(this)}."
        ]
        if "base" in results:
            base = results["base"]
            summary.insert(
                0,
                f"Driver peak, this ÷ baseline: **{this.driver_peak / base.driver_peak:.2f}**; whole tree: "
                f"**{this.tree_peak / base.tree_peak:.2f}**.",
            )
        section = "\n".join(
            [
                START,
                f"## Runner memory on Ray with {WORKERS} workers (`bench/ray_memory.py`)",
                "",
                f"`mcp-resili run --model scripted:oracle {scope} --variant {' --variant '.join(VARIANTS)} "
                f"--trials {args.trials} --concurrency 16 --json --executor ray --ray-workers {WORKERS}`, "
                "each side in a fresh process from its own source tree, on a local Ray instance the run "
                "starts for itself; its process tree sampled from outside every "
                f"{EVERY:g} s. {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, Python {platform.python_version()}, "
                f"2 shared cores (load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}).",
                "",
                *rows,
                "",
                *summary,
                END,
            ]
        )
        write_section(section, START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
