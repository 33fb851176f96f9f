"""Episodes per second on Ray with 1 and 2 workers against one process, on this machine.

One Ray instance (``num_cpus`` = the machine's CPUs, started once, loopback only) serves every Ray
measurement. Each round plays the same run three ways, in rotating order: the local executor (one
process, the same-run baseline), then `RayExecutor` with 1 and with 2 workers. The workload is
``--episodes`` ResiliBench episodes (the full list's first N tasks × 1 trial, ``scripted:oracle``,
default fault plan, ``--time-scale 0``): CPU-bound, so the ratio shows how much a second worker process
adds on this machine. Reported per setting: the median over rounds of the whole ``execute()`` wall
time (Ray's include starting the worker processes), the rate over the second half of the episodes (warm),
and CPU seconds of every process involved (this one, Ray's and its workers') per episode.

    python bench/scaling.py [--episodes N] [--rounds R] [--concurrency C] [--write-docs]
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import anyio
from benchdocs import write_section

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- scaling:start -->", "<!-- scaling:end -->"
_TICK = os.sysconf("SC_CLK_TCK")


def _tree(root: int) -> dict[int, float]:
    """CPU seconds (user + system) of ``root`` and each of its live descendants, from /proc."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICK)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out[pid] = stats[pid][1]
        todo.extend(children.get(pid, []))
    return out


class TreeCPU:
    """CPU used by this process tree between `start` and `stop`, sampled every 0.2 s.

    Ray's worker processes end with the run; a process's CPU is its last sample, so one that exits
    between two samples loses at most 0.2 s of its time.
    """

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _take(self, initial: bool = False) -> None:
        for pid, cpu in _tree(os.getpid()).items():
            # A process born during the run counts from zero.
            self.first.setdefault(pid, cpu if initial else 0.0)
            self.last[pid] = cpu

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self._take()

    def start(self) -> None:
        self._take(initial=True)
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self._take()
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


@dataclass
class Setting:
    name: str
    workers: int | None  # None: the local executor
    wall: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    episodes: int = 0


async def play(setting: Setting, tasks: tuple[str, ...], concurrency: int, tmp: Path) -> None:
    from mcp_resili.client.runner import RunConfig, execute, local_executor
    from mcp_resili.integrations.ray import RayExecutor

    config = RunConfig(
        db=tmp / f"{setting.name}-{secrets.token_hex(3)}.db",
        models=("scripted:oracle",),
        tasks=tasks,
        trials=1,
        time_scale=0.0,
        concurrency=concurrency,
    )
    executor = local_executor() if setting.workers is None else RayExecutor(workers=setting.workers)
    stamps: list[float] = []

    def on_episode(_row: object) -> None:
        stamps.append(time.perf_counter())

    meter = TreeCPU()
    meter.start()
    t0 = time.perf_counter()
    result = await execute(config, executor=executor, on_episode=on_episode)
    t1 = time.perf_counter()
    cpu = meter.stop()
    n = len(result.rows)
    setting.episodes = n
    setting.wall.append(t1 - t0)
    half = stamps[len(stamps) // 2] if stamps else t0
    setting.warm.append((n - len(stamps) // 2) / (t1 - half) if t1 > half else float("nan"))
    setting.cpu.append(cpu / n)


def section(settings: list[Setting], args: argparse.Namespace, load: float) -> str:
    local = settings[0]
    rate = {s.name: s.episodes / statistics.median(s.wall) for s in settings}
    warm = {s.name: statistics.median(s.warm) for s in settings}
    lines = [
        START,
        "## Scaling on Ray (`bench/scaling.py`)",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} CPUs"
        f" ({platform.processor() or platform.machine()}), Python {platform.python_version()},"
        f" load average at the start {load:.1f}: a machine shared with other people's jobs, so rates"
        f" move from round to round; medians of {args.rounds} rounds.",
        "",
        f"{local.episodes} ResiliBench episodes (the full list's first {local.episodes} tasks,"
        " `scripted:oracle`, default fault plan, `--time-scale 0`, i.e. CPU-bound),"
        f" `--concurrency {args.concurrency}`; one local Ray instance with {os.cpu_count()} CPUs for"
        " every Ray row. *Whole run*: episodes ÷ the wall time of `execute()` (for Ray, starting the"
        " worker processes included: each imports mcp-resili, loads the suite and opens its servers);"
        " *warm*: the rate over the second half of the episodes. CPU: every process involved (driver,"
        " Ray's own processes, workers) per episode, start-up included.",
        "",
        "| executor | whole run episodes/s | × one process | warm episodes/s | × one process"
        " | CPU ms / episode | rounds (wall s) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for s in settings:
        lines.append(
            f"| {s.name} | {rate[s.name]:.1f} | {rate[s.name] / rate[local.name]:.2f}× | {warm[s.name]:.1f}"
            f" | {warm[s.name] / warm[local.name]:.2f}× | {1000 * statistics.median(s.cpu):.1f}"
            f" | {' '.join(f'{w:.1f}' for w in s.wall)} |"
        )
    lines += [
        "",
        "On 2 cores a second worker can at most double the CPU available to episodes, minus what the"
        " driver (storing, progress) and Ray's own processes take from the same cores; on a cluster each"
        " worker brings its own CPU. A Ray call carries a batch of episodes"
        " (`mcp_resili/integrations/ray/executor.py`), which amortises its ~1–2 ms of overhead here.",
        "",
        "Reproduce: `python bench/scaling.py --write-docs`.",
        END,
    ]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> None:
    from mcp_resili.integrations.ray.executor import import_ray, prepare_local_env
    from mcp_resili.registry.loader import get_suite

    load = os.getloadavg()[0]
    prepare_local_env(None)
    ray = import_ray()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
    tasks = tuple(t.id for t in get_suite("resilibench").tasks[: args.episodes])
    settings = [
        Setting("local (one process)", None),
        Setting("Ray, 1 worker", 1),
        Setting("Ray, 2 workers", 2),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        await play(settings[0], tasks[:8], args.concurrency, Path(tmp))  # warm-up: imports, suite
        for s in settings:
            s.wall.clear(), s.warm.clear(), s.cpu.clear()
        for r in range(args.rounds):
            order = settings[r % 3 :] + settings[: r % 3]
            for s in order:
                await play(s, tasks, args.concurrency, Path(tmp))
                print(
                    f"round {r + 1} {s.name}: {s.episodes / s.wall[-1]:.1f} episodes/s whole run,"
                    f" {s.warm[-1]:.1f} warm, {1000 * s.cpu[-1]:.1f} ms CPU/episode",
                    flush=True,
                )
    ray.shutdown()
    text = section(settings, args, load)
    print(text)
    if args.write_docs:
        write_section(text, START, END)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=1600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--write-docs", action="store_true")
    anyio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    main()
