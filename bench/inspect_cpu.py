"""inspect_ai against ``mcp-resili run`` on the same episodes: CPU, wall time and identical scores.

In one process, after a warm-up of each (inspect's first ``eval()`` costs seconds of its own imports,
and both load the suite once), the same tasks × epochs are played three ways:

* ``mcp-resili run`` (the runner, in process): ``execute`` with the same tasks, trials and faults;
* ``inspect eval`` with the task's shared server (the default: one server per eval, in process);
* ``inspect eval -T server=process``: a ``mcp-resili serve`` process per sample (the former default).

CPU is this process's (every thread, the shared server's included) plus its children's (the serve
processes); the scores of every (task, trial) are compared label for label and component for component.

    python bench/inspect_cpu.py --suite toolmaze --tasks 5 --epochs 3 --faults toolmaze:P1 --write-docs
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchdocs import write_section

DOCS = Path(__file__).resolve().parents[1] / "docs" / "inspect.md"


def cpu() -> float:
    """CPU seconds of this process (all threads) and of its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measured(play: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, CPU seconds, wall seconds) of ``play()``."""
    cpu0, wall0 = cpu(), time.perf_counter()
    result = play()
    return result, cpu() - cpu0, time.perf_counter() - wall0


def run_runner(
    suite: str, tasks: list[str], epochs: int, faults: str, db: Path
) -> dict[tuple[str, int], Any]:
    """The runner's scores by (task, trial)."""
    from mcp_resili.client.runner import RunConfig, execute
    from mcp_resili.store import Store

    config = RunConfig(
        suite=suite,
        models=("scripted:oracle",),
        tasks=tuple(tasks),
        trials=epochs,
        faults=(faults,),
        time_scale=0,
        db=db,
    )
    result = anyio.run(lambda: execute(config))
    store = Store(db, read_only=True)
    try:
        return {(r.task_id, r.trial): (r.label, r.score) for r in store.episodes(result.run_id)}
    finally:
        store.close()


def run_inspect(
    suite: str,
    tasks: list[str],
    epochs: int,
    faults: str,
    logs: Path,
    quiet_log: bool = False,
    **task_args: Any,
) -> dict[tuple[str, int], Any]:
    """inspect's scores by (task, trial) (none with ``quiet_log``: samples not logged)."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.log import read_eval_log

    from mcp_resili.integrations.inspect.tasks import SUITE_TASKS

    (log,) = inspect_eval(
        SUITE_TASKS[suite](faults=faults, time_scale=0, **task_args),
        model="mcp_resili/oracle",
        sample_id=tasks,
        epochs=epochs,
        log_dir=str(logs),
        display="none",
        **({"log_samples": False, "log_realtime": False} if quiet_log else {}),
    )
    full = read_eval_log(log.location)
    assert full.status == "success", full.error
    out = {}
    for sample in full.samples or []:
        score = sample.scores["resili_scorer"]
        out[(str(sample.id), sample.epoch - 1)] = (score.answer, score.metadata["score"])
    return out


def main() -> None:
    """Measure the three ways and print (optionally write into docs/inspect.md) the comparison."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--suite", default="toolmaze")
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--faults", default="toolmaze:P1")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    from mcp_resili.registry.loader import get_suite

    tasks = [t.id for t in get_suite(args.suite).default_tasks[: args.tasks + 1]]
    warm, tasks = tasks[0], tasks[1:]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # Warm-up: imports, the suite, inspect's first eval.
        run_runner(args.suite, [warm], 1, args.faults, work / "warm.db")
        run_inspect(args.suite, [warm], 1, args.faults, work / "warm-logs")
        runner, runner_cpu, runner_wall = measured(
            lambda: run_runner(args.suite, tasks, args.epochs, args.faults, work / "run.db")
        )
        shared, shared_cpu, shared_wall = measured(
            lambda: run_inspect(args.suite, tasks, args.epochs, args.faults, work / "logs")
        )
        _, quiet_cpu, quiet_wall = measured(
            lambda: run_inspect(args.suite, tasks, args.epochs, args.faults, work / "qlogs", quiet_log=True)
        )
        process, process_cpu, process_wall = measured(
            lambda: run_inspect(args.suite, tasks, args.epochs, args.faults, work / "plogs", server="process")
        )
    episodes = len(tasks) * args.epochs
    start, end = f"<!-- inspect-cpu:{args.suite}:start -->", f"<!-- inspect-cpu:{args.suite}:end -->"
    same_shared = sum(shared.get(k) == v for k, v in runner.items())
    same_process = sum(process.get(k) == v for k, v in runner.items())
    lines = [
        start,
        f"{args.suite}, `scripted:oracle` / `mcp_resili/oracle`, {len(tasks)} tasks × {args.epochs} epochs "
        f"({episodes} episodes), faults `{args.faults}`, time scale 0; one process after a warm-up of each; "
        "CPU of the process (every thread) and its children:",
        "",
        "| how | CPU (s) | CPU vs `mcp-resili run` | wall (s) | scores identical to `mcp-resili run` |",
        "|---|---|---|---|---|",
        f"| `mcp-resili run` | {runner_cpu:.2f} | 1.00× | {runner_wall:.2f} | – |",
        f"| `inspect eval` (one shared server per eval, the default) | {shared_cpu:.2f} | "
        f"{shared_cpu / runner_cpu:.2f}× | {shared_wall:.2f} | {same_shared}/{episodes} |",
        f"| the same, `--no-log-samples --no-log-realtime` (inspect logs no sample) | {quiet_cpu:.2f} | "
        f"{quiet_cpu / runner_cpu:.2f}× | {quiet_wall:.2f} | (not logged) |",
        f"| `inspect eval -T server=process` (a serve process per sample) | {process_cpu:.2f} | "
        f"{process_cpu / runner_cpu:.2f}× | {process_wall:.2f} | {same_process}/{episodes} |",
        "",
        f"Reproduce: `python bench/inspect_cpu.py --suite {args.suite} --tasks {args.tasks} --epochs "
        f"{args.epochs} --faults {args.faults} --write-docs`.",
        end,
    ]
    text = "\n".join(lines)
    print(text)
    print(json.dumps({"differences": [k for k, v in runner.items() if shared.get(k) != v]}, default=str))
    if args.write_docs:
        write_section(text, start, end, DOCS)


if __name__ == "__main__":
    main()
