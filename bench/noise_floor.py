"""How much the same-faults-per-trial design shrinks the noise floor, measured on scripted agents.

Two scripted ResiliBench agents (greedy-retry and naive, the suite's default faults) play the same
first N tasks × T trials. For each pair of seeds (s, s + 1000):

* **same faults**: both agents in the run with seed s, paired on task and trial: they met the same
  fault draws (the project's design: the draws derive from seed, task, trial, tool and call);
* **independent faults**: greedy-retry from the run with seed s against naive from the run with seed
  s + 1000, paired on task and trial as well (the task still cancels), at the same cost (the same
  episodes per side), but each agent met its own draws;
* **run to run**: greedy-retry against itself across the two seeds, the floor of "did my agent
  change between two runs?".

For each the minimum detectable difference of full success (power 0.8, α 0.05, clustered by task;
`mcp_resili.report.clustered`), the variance split, and how many tasks the independent design would
need for the same floor. Writes its table into docs/benchmarks.md with ``--write-docs``.

    python bench/noise_floor.py --limit 200 --trials 3 --seeds 3 --write-docs
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchdocs import write_section

from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.report.noise import compare, paired_rows
from mcp_resili.store import EpisodeRow, Store

MODELS = ("scripted:greedy-retry", "scripted:plan-follower")
START = "<!-- noise-floor:start -->"
END = "<!-- noise-floor:end -->"


def play(
    db: Path, models: tuple[str, ...], seed: int, limit: int, trials: int
) -> dict[str, list[EpisodeRow]]:
    """One run of both agents at ``seed``; its stored episodes by model."""
    config = RunConfig(
        db=db, models=models, limit=limit, stratified=False, trials=trials, seed=seed, time_scale=0
    )
    result = anyio.run(lambda: execute(config))
    store = Store(db, read_only=True)
    try:
        rows = store.episodes(result.run_id)
    finally:
        store.close()
    by_model: dict[str, list[EpisodeRow]] = {}
    for row in rows:
        by_model.setdefault(row.model, []).append(row)
    return by_model


def main() -> None:
    """Measure and print (optionally write into docs/benchmarks.md) the floors of the three designs."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3, help="seed pairs")
    parser.add_argument("--models", nargs=2, default=MODELS, metavar="MODEL")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    designs: dict[str, list[tuple[float, float, dict[str, float | None]]]] = {
        "same": [],
        "independent": [],
        "run to run": [],
    }
    deltas: dict[str, list[float]] = {key: [] for key in designs}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.seeds):
            models = tuple(args.models)
            a = play(Path(tmp) / f"a{n}.db", models, n, args.limit, args.trials)
            b = play(Path(tmp) / f"b{n}.db", models, n + 1000, args.limit, args.trials)
            first, second = models
            for name, left, right in (
                ("same", a[second], a[first]),
                ("independent", b[second], a[first]),
                ("run to run", a[first], b[first]),
            ):
                d = compare(paired_rows(left, right)).differences["full"]
                designs[name].append((d.mde, d.se, d.components.shares()))
                deltas[name].append(d.delta)
    seconds = time.perf_counter() - started
    mean_floor = {name: statistics.fmean(m for m, _, _ in values) for name, values in designs.items()}
    first, second = (m.removeprefix("scripted:") for m in args.models)
    lines = [
        START,
        f"Two scripted ResiliBench agents ({first}, {second}; default faults), the first {args.limit} "
        f"tasks × {args.trials} trials, {args.seeds} seed pairs (s, s + 1000); full success, power 0.8, "
        "α 0.05, tasks as clusters. Mean over the seed pairs:",
        "",
        "| design | Δ full (pp, per seed pair) | detectable Δ (pp) | variance: task · fault draw · trial |",
        "|---|---|---|---|",
    ]
    for name, label in (
        ("same", f"{first} vs {second}, **same faults** (one run)"),
        ("independent", f"{first} vs {second}, **independent faults** (other seed), equal cost"),
        ("run to run", f"{first} vs itself, two seeds (run-to-run floor)"),
    ):
        shares = [s for _, _, s in designs[name]]
        split = " · ".join(
            f"{100 * statistics.fmean(s[key] or 0.0 for s in shares):.0f}%"
            for key in ("task", "fault_draw", "trial")
        )
        per_seed = ", ".join(f"{100 * d:+.1f}" for d in deltas[name])
        lines.append(f"| {label} | {per_seed} | {100 * mean_floor[name]:.1f} | {split} |")
    ratio = mean_floor["independent"] / mean_floor["same"]
    lines += [
        "",
        f"The same-faults design shrinks the floor by {100 * (1 - 1 / ratio):.0f}% "
        f"({100 * mean_floor['same']:.1f} against {100 * mean_floor['independent']:.1f} points): with "
        f"independent faults the same floor would need {ratio**2:.2f}× the tasks "
        f"({round(ratio**2 * args.limit)} instead of {args.limit}) at the same trials. "
        f"Reproduce: `python bench/noise_floor.py --limit {args.limit} --trials {args.trials} "
        f"--seeds {args.seeds} --models {' '.join(args.models)} --write-docs` ({seconds:.0f} s here).",
        END,
    ]
    text = "\n".join(lines)
    print(text)
    if args.write_docs:
        write_section(text, START, END)


if __name__ == "__main__":
    main()
