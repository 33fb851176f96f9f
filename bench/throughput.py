"""Runner throughput against a fake model of fixed latency: how close to the ideal concurrency ÷ model time?

Each episode is two model turns (call one tool, then ``finish``) through the real openai SDK to a fake
Chat Completions server in a separate process that waits ``--latency`` seconds before each answer, and
two MCP tool calls to the in-process ResiliBench server, stored in SQLite like any run. Model time per
episode is ``2 × latency``, so the ideal throughput at concurrency C is ``C / (2 × latency)`` episodes
per second. The fake is ``bench/lean_model.py`` (plain asyncio; ``--fake starlette`` uses the tests'
``tests/fakes/model_server.py``, whose own CPU then competes with the runner's on a small machine).

Same-run baseline: the same matrix with a zero-latency model, i.e. the harness's own ceiling on this
machine (CPU-bound), measured right before the latency runs. Every row also gives the runner's CPU per
episode and the fake's.

Peak memory (``--rss``): a fresh process per concurrency level plays ``waves`` × C episodes at 2 s per
turn and reports its peak RSS; the same-run baseline is the same at concurrency 8.

    python bench/throughput.py                 # concurrency 64 and 512 at 2 s (512 also with
                                               # every slot opened at once); 64 at 5 s
    python bench/throughput.py --rss 1000      # peak RSS at 1,000 episodes in flight
    python bench/throughput.py --write-docs    # also update the throughput section of docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from benchdocs import BENCHMARKS_PAGE, write_section

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- throughput:start -->", "<!-- throughput:end -->"
TURNS_PER_EPISODE = 2
FAKES = {
    "lean": ROOT / "bench" / "lean_model.py",
    "starlette": ROOT / "tests" / "fakes" / "model_server.py",
}
_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of another process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


@dataclass
class Measurement:
    concurrency: int
    latency: float
    episodes: int
    seconds: float
    completed: int
    #: CPU seconds of the runner (this process) and of the fake model server during the run.
    runner_cpu: float = 0.0
    fake_cpu: float = 0.0
    reps: list[float] = field(default_factory=list)
    #: ``RunConfig.ramp_up`` of the run: None = the default ramp, 0 = every slot opened at once.
    ramp_up: float | None = None
    #: Seconds from the start of the run at which each episode was delivered, in order.
    finished_at: list[float] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return self.episodes / self.seconds

    @property
    def steady(self) -> float | None:
        """Episodes/s once the slots are full and before they drain: between the end of the first
        ``concurrency`` episodes and the start of the last ``concurrency`` (None under 3 waves)."""
        done, c = self.finished_at, self.concurrency
        if len(done) < 3 * c or done[-c - 1] <= done[c - 1]:
            return None
        return (len(done) - 2 * c) / (done[-c - 1] - done[c - 1])

    @property
    def steady_efficiency(self) -> float | None:
        return None if self.ideal is None or self.steady is None else self.steady / self.ideal

    @property
    def ideal(self) -> float | None:
        if self.latency == 0:
            return None
        return self.concurrency / (TURNS_PER_EPISODE * self.latency)

    @property
    def efficiency(self) -> float | None:
        return None if self.ideal is None else self.throughput / self.ideal


def start_fake(latency: float, kind: str = "lean") -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(FAKES[kind]), "--latency", str(latency)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}/v1"


async def measure(
    concurrency: int,
    latency: float,
    waves: int,
    fake: str = "lean",
    task_set: str = "full",
    ramp_up: float | None = None,
) -> Measurement:
    from mcp_resili.client.runner import RunConfig, execute
    from mcp_resili.registry.loader import get_suite

    # Exactly waves × concurrency episodes, so the last wave is full and no tail skews the rate.
    # The fake answers the same whatever the task: "full" draws the tasks from the suite's full list
    # (5,040 tasks, each built when an episode uses it), "default" from its 40 default tasks.
    wanted = concurrency * waves
    suite = get_suite()
    pool = suite.tasks if task_set == "full" else suite.default_tasks
    count = next(n for n in range(len(pool), 0, -1) if wanted % n == 0)
    tasks = tuple(t.id for t in pool[:count])
    trials = wanted // count
    proc, url = start_fake(latency, fake)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = RunConfig(
                db=Path(tmp) / "bench.db",
                models=("openai:bench",),
                faults=("none",),
                trials=trials,
                tasks=tasks,
                concurrency=concurrency,
                base_url=url,
                max_turns=TURNS_PER_EPISODE,
                # Only when set: the RSS rows' baseline revision has no ramp (it opened slots at once).
                **({} if ramp_up is None else {"ramp_up": ramp_up}),
            )
            fake_cpu = process_cpu(proc.pid)
            runner_cpu = time.process_time()
            started = time.perf_counter()
            finished_at: list[float] = []
            result = await execute(
                config, on_episode=lambda row: finished_at.append(time.perf_counter() - started)
            )
            seconds = time.perf_counter() - started
            runner_cpu = time.process_time() - runner_cpu
            fake_cpu = process_cpu(proc.pid) - fake_cpu
    finally:
        proc.kill()
        proc.wait()
    completed = sum(1 for r in result.rows if r.termination == "completed")
    return Measurement(
        concurrency,
        latency,
        len(result.rows),
        seconds,
        completed,
        runner_cpu=runner_cpu,
        fake_cpu=fake_cpu,
        finished_at=finished_at,
        ramp_up=ramp_up,
    )


def slots_open_over(m: Measurement) -> str:
    """How the row's run opened its slots (`executor.opening_delay` of its last slot)."""
    from mcp_resili.client.executor import opening_delay
    from mcp_resili.client.runner import RunConfig

    if m.ramp_up == 0:
        return "at once (`--ramp-up 0`)"
    last = opening_delay(RunConfig(ramp_up=m.ramp_up), m.concurrency - 1, m.concurrency)
    return f"{last:.2f} s" + (" (default)" if m.ramp_up is None else "")


def _median(runs: list[Measurement]) -> Measurement:
    """The run of median throughput, with every run's rate kept for the table."""
    ordered = sorted(runs, key=lambda m: m.throughput)
    middle = ordered[len(ordered) // 2]
    middle.reps = [m.throughput for m in runs]
    return middle


def section(
    results: list[Measurement], baseline: list[Measurement], rss: list[dict[str, float]], fake: str
) -> str:
    from mcp_resili.client.executor import SLOT_OPENING_INTERVAL

    load = os.getloadavg()
    lines = [
        START,
        "## Runner throughput against a fixed-latency model (`bench/throughput.py`)",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} CPUs"
        f" ({platform.processor() or platform.machine()}), Python {platform.python_version()},"
        f" load average at the end {load[0]:.1f}. The machine is shared with other people's jobs, which"
        " lower every wall-clock figure: each row is the median of the repeats shown.",
        "",
        f"Each episode: {TURNS_PER_EPISODE} model turns through the real openai SDK to a fake Chat"
        f" Completions server (`{FAKES[fake].relative_to(ROOT)}`, a separate process on the same CPUs)"
        " answering after the row's latency, two MCP calls to the in-process ResiliBench server, scoring,"
        " storage. Ideal = concurrency ÷ model time per episode"
        f" ({TURNS_PER_EPISODE} × latency), Little's law for a full system. *Whole run*: episodes ÷ the"
        " wall time of the whole `execute()` call, startup included (MCP connection, tool listing, the"
        " first connections to the model), and the filling and draining of the slots. *Steady state*:"
        " the rate between the first `concurrency` deliveries and the start of the last `concurrency`,"
        " when every slot is busy, which is the regime Little's law describes. *Slots open over*: the"
        " run opens its `concurrency` slots one by one (by default one every"
        f" {SLOT_OPENING_INTERVAL * 1000:g} ms, `--ramp-up` sets the"
        " whole ramp); the `--ramp-up 0` row opens them all at once, as the runner did before.",
        "",
        "| concurrency | model latency | slots open over | episodes | wall s"
        " | episodes/s, whole run (repeats) | ideal/s | % of ideal, whole run | % of ideal, steady state"
        " | runner CPU ms/episode | fake CPU ms/episode |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in baseline + results:
        ideal = "—" if m.ideal is None else f"{m.ideal:.1f}"
        efficiency = (
            "— (baseline: harness ceiling)" if m.efficiency is None else f"**{100 * m.efficiency:.1f}%**"
        )
        steady = "—" if m.steady_efficiency is None else f"**{100 * m.steady_efficiency:.1f}%**"
        reps = " ".join(f"{r:.0f}" for r in m.reps)
        cells = [str(m.concurrency), f"{m.latency:g} s", slots_open_over(m), str(m.episodes)]
        cells += [f"{m.seconds:.1f}"]
        cells += [f"{m.throughput:.1f} ({reps})", ideal, efficiency, steady]
        cells += [f"{1000 * m.runner_cpu / m.episodes:.2f}", f"{1000 * m.fake_cpu / m.episodes:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "The zero-latency row is the same-run baseline: the harness's own ceiling (CPU-bound: SDK request"
        " building and parsing, the MCP pipeline, scoring, SQLite) on this machine, with the fake's CPU"
        " beside it. As the ideal approaches that ceiling, the shortfall is CPU, not waiting.",
        "",
        "Why the slots open one by one: opened all at once, the episodes start in the same instant and,"
        " with a fixed latency, stay in step for the whole run. Every turn's answers come back together"
        " and queue behind each other's CPU, and the runner idles between the bursts (compare the"
        " `--ramp-up 0` row). Opened one by one, they stay spread over the model's latency. Which"
        " episodes play and their results are the same either way (`tests/test_slot_ramp.py`).",
    ]
    if rss:
        lines += [
            "",
            "Peak resident memory of the runner process (a fresh process per row, 2 s per turn), for this"
            " revision and the baseline revision in the same run. *Tasks*: `default` plays the suite's 40"
            " default tasks; `full` draws from its full 5,040-task list (kept compressed, each task built"
            " when an episode uses it, so every episode in flight holds a task of its own; before the"
            " lazy task list, all 5,040 were built at load, ~157 MB). *In-flight cost*: the row minus"
            " the same revision and task set at concurrency 8.",
            "",
            "| revision | tasks | episodes in flight | episodes | peak RSS MB | in-flight cost MB |",
            "|---|---|---:|---:|---:|---:|",
        ]
        floor = {(r["revision"], r["task_set"]): r["rss_mb"] for r in rss if r["concurrency"] == 8}
        for r in rss:
            extra = r["rss_mb"] - floor[(r["revision"], r["task_set"])]
            cells = [
                str(r["revision"]),
                str(r["task_set"]),
                f"{r['concurrency']:.0f}",
                f"{r['episodes']:.0f}",
            ]
            cells += [f"**{r['rss_mb']:.0f}**", f"{extra:.0f}"]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Reproduce: `python bench/throughput.py --rss 1000 --write-docs`.", END]
    return "\n".join(lines)


def rss_child(
    concurrency: int, waves: int, fake: str, task_set: str, tree: Path | None = None
) -> dict[str, float]:
    """Peak RSS of a fresh process playing ``waves`` × ``concurrency`` episodes at 2 s per turn.

    ``tree``: import mcp-resili from that source tree (a baseline revision) instead of this one.
    """
    argv = [sys.executable, __file__, "--rss-child", str(concurrency), "--waves", str(waves)]
    argv += ["--fake", fake, "--task-set", task_set]
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree is not None else None
    proc = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=tree or ROOT, env=env)
    data: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


def measure_rss(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Peak RSS for this revision and ``--rss-base``, both task sets, concurrency 8 and ``--rss``."""
    sys.path.insert(0, str(ROOT / "bench"))
    from episode_cpu import export_revision

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = {
            "this revision": None,
            f"baseline `{args.rss_base}`": export_revision(args.rss_base, Path(tmp)),
        }
        for task_set in ("default", "full"):
            for revision, tree in trees.items():
                for c in [8, *args.rss]:
                    row: dict[str, Any] = dict(rss_child(c, args.rss_waves, args.fake, task_set, tree))
                    row.update(revision=revision, task_set=task_set)
                    rows.append(row)
                    print(f"peak RSS {revision} {task_set} c={c}: {row['rss_mb']:.0f} MB", flush=True)
    return rows


async def _rss_child_main(args: argparse.Namespace) -> None:
    m = await measure(args.rss_child, 2.0, args.waves, args.fake, args.task_set)
    # VmHWM, not getrusage's ru_maxrss: the latter keeps the parent's peak across fork and exec.
    with open("/proc/self/status") as status:
        peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(json.dumps({"concurrency": m.concurrency, "episodes": m.episodes, "rss_mb": peak_kb / 1024}))


async def main_async(args: argparse.Namespace) -> None:
    import openai  # noqa: F401  # a one-off import cost (~1-2 s) of the process, not of a run

    if args.rss_child:
        await _rss_child_main(args)
        return
    baseline = []
    for c in args.baseline:
        baseline.append(_median([await measure(c, 0.0, args.waves, args.fake) for _ in range(args.repeat)]))
        m = baseline[-1]
        print(f"baseline  c={m.concurrency}: {m.throughput:.1f} episodes/s {m.reps}", flush=True)
    results = []
    rows: list[tuple[int, float, float | None]] = [(c, args.latency[0], None) for c in args.concurrency]
    rows += [(c, args.latency[0], 0.0) for c in args.at_once]
    rows += [(c, latency, None) for latency in args.latency[1:] for c in args.concurrency if c <= 64]
    for concurrency, latency, ramp_up in rows:
        waves = args.waves if concurrency <= 64 else args.waves_large
        runs = [
            await measure(concurrency, latency, waves, args.fake, ramp_up=ramp_up) for _ in range(args.repeat)
        ]
        m = _median(runs)
        results.append(m)
        print(
            f"latency {m.latency}s c={m.concurrency} ramp-up {m.ramp_up}:"
            f" {m.throughput:.1f}/s vs ideal {m.ideal:.1f}/s"
            f" = {100 * (m.efficiency or 0):.1f}%, steady state {100 * (m.steady_efficiency or 0):.1f}%"
            f" ({m.completed}/{m.episodes} completed) {m.reps}"
            f" runner {1000 * m.runner_cpu / m.episodes:.2f} ms/ep,"
            f" fake {1000 * m.fake_cpu / m.episodes:.2f}",
            flush=True,
        )
    rss = measure_rss(args) if args.rss else []
    text = section(results, baseline, rss, args.fake)
    if args.write_docs:
        write_section(text, START, END)
        print(f"updated {BENCHMARKS_PAGE}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 512])
    parser.add_argument(
        "--baseline", type=int, nargs="+", default=[64], help="zero-latency concurrency levels"
    )
    parser.add_argument(
        "--latency",
        type=float,
        nargs="+",
        default=[2.0, 5.0],
        help="seconds per model answer; the first for every concurrency, the others up to 64",
    )
    parser.add_argument(
        "--at-once",
        type=int,
        nargs="*",
        default=[512],
        help="concurrency levels measured again with every slot opened at once (--ramp-up 0)",
    )
    parser.add_argument("--waves", type=int, default=10, help="episodes = waves × concurrency")
    parser.add_argument("--waves-large", type=int, default=6, help="waves above concurrency 64 (CPU-bound)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row (the median is reported)")
    parser.add_argument("--fake", choices=sorted(FAKES), default="lean", help="the fake model server")
    parser.add_argument("--rss", type=int, nargs="*", default=[], help="concurrency levels for peak RSS")
    parser.add_argument("--rss-child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--task-set", choices=("default", "full"), default="full", help=argparse.SUPPRESS)
    parser.add_argument("--rss-base", default="afbcb14", help="baseline revision for the RSS rows")
    parser.add_argument("--rss-waves", type=int, default=2, help="waves of the RSS runs")
    parser.add_argument("--write-docs", action="store_true")
    anyio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    main()
