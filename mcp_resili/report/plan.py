"""How many tasks and trials a comparison needs to see a given difference (``mcp-resili plan-size``).

The variance of a mean paired difference over G tasks of R trials each is
``σ²_task/G + σ²_within/(G·R)``, with the difference's own between-task and within-task components
(`mcp_resili.report.clustered.variance_components`). A pilot run (or two) gives them per comparison:
every pair of models on a cell, every model's drop under every fault spec, every "who degrades more",
every pair across runs. Without a pilot the plan assumes the worst case for a rate: two independent
sides at 50% (a paired difference of variance 0.5 per episode), split between tasks and trials by a
within-task correlation of 0.16, what issue 36 measured for greedy-retry at ``--limit 200 --trials 3``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from mcp_resili.report.clustered import Components, PairedDifference, tasks_needed
from mcp_resili.report.degradation import degradation_from_runs
from mcp_resili.report.noise import compare, paired_rows
from mcp_resili.store import EpisodeRow, RunRow

#: The assumed within-task correlation of a paired difference without a pilot run.
ASSUMED_CORRELATION = 0.16
#: Variance of a paired difference of two independent 50% outcomes.
ASSUMED_VARIANCE = 0.5
ASSUMED = Components(
    task=0.25 * ASSUMED_CORRELATION,
    fault_draw=0.0,
    trial=0.25 * (1 - ASSUMED_CORRELATION),
    difference_task=ASSUMED_VARIANCE * ASSUMED_CORRELATION,
    difference_within=ASSUMED_VARIANCE * (1 - ASSUMED_CORRELATION),
    trials=3,
)
#: Trials per task the plan is given for, unless the caller names others.
DEFAULT_TRIALS = (1, 2, 3, 5, 10)


@dataclass(frozen=True)
class PlanRow:
    """One comparison: what the pilot measured, and the tasks needed at each trial count."""

    comparison: str
    #: The pilot's tasks and trials per task (None without a pilot).
    tasks: int | None
    trials: float | None
    #: The detectable difference at the pilot's size (None without a pilot).
    detectable: float | None
    components: Components
    needed: dict[int, int]

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "comparison": self.comparison,
            "pilot_tasks": self.tasks,
            "pilot_trials": None if self.trials is None else round(self.trials, 3),
            "pilot_detectable": None if self.detectable is None else round(self.detectable, 4),
            "difference_variance": {
                "task": round(self.components.difference_task, 6),
                "within": round(self.components.difference_within, 6),
            },
            "tasks_needed": {str(r): g for r, g in self.needed.items()},
        }


def plan(effect: float, components: Components, trials: Sequence[int]) -> dict[int, int]:
    """Trials per task → tasks needed to detect ``effect`` (α 0.05, power 0.8)."""
    return {r: tasks_needed(effect, components, r) for r in trials}


def assumed_plan(effect: float, trials: Sequence[int] = DEFAULT_TRIALS) -> PlanRow:
    """The plan without a pilot run (see the module)."""
    return PlanRow(
        "assumed: two independent sides at 50%, within-task correlation 0.16",
        None,
        None,
        None,
        ASSUMED,
        plan(effect, ASSUMED, trials),
    )


def _row(name: str, d: PairedDifference, effect: float, trials: Sequence[int]) -> PlanRow | None:
    """The plan of one pilot comparison; None when the pilot shows no spread to plan from."""
    parts = d.components
    if d.clusters < 2 or parts.difference_task + parts.difference_within <= 0:
        return None
    return PlanRow(
        name, d.clusters, d.components.trials, d.mde, d.components, plan(effect, d.components, trials)
    )


def pilot_plans(
    runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]],
    effect: float,
    trials: Sequence[int] = DEFAULT_TRIALS,
    metric: str = "full",
) -> list[PlanRow]:
    """A plan for every comparison the pilot runs hold (models, degradation, runs), on ``metric``.

    Comparisons whose pilot pairs never differ (identical outcomes) give no variance to plan from and
    are left out.
    """
    out: list[PlanRow | None] = []
    for run, rows in runs:
        cells: dict[tuple[str, str], dict[str, list[EpisodeRow]]] = {}
        for row in rows:
            cells.setdefault((row.faults, row.variant), {}).setdefault(row.model, []).append(row)
        for (faults, variant), models in sorted(cells.items()):
            for a, b in itertools.combinations(sorted(models), 2):
                pairs = paired_rows(models[a], models[b])
                if pairs:
                    name = f"{run.id}: {b} vs {a} ({faults}, {variant})"
                    out.append(_row(name, compare(pairs).differences[metric], effect, trials))
    if len(runs) > 1:
        for (run_a, rows_a), (run_b, rows_b) in itertools.combinations(runs, 2):
            for model in sorted({r.model for r in rows_a} & {r.model for r in rows_b}):
                pairs = paired_rows(
                    [r for r in rows_a if r.model == model], [r for r in rows_b if r.model == model]
                )
                shared = [(a, b) for a, b in pairs if (a.faults, a.variant) == (b.faults, b.variant)]
                if shared:
                    name = f"{model}: {run_b.id} vs {run_a.id}"
                    out.append(_row(name, compare(shared).differences[metric], effect, trials))
    degraded = degradation_from_runs(runs)
    if degraded is not None:
        for drop in degraded.drops:
            name = f"{drop.arm[0]}: drop under {drop.faults} from {degraded.baseline}"
            out.append(_row(name, drop.drops[metric], effect, trials))
        for diff in degraded.differences:
            name = f"{diff.b[0]} vs {diff.a[0]}: who degrades more under {diff.faults}"
            out.append(_row(name, diff.differences[metric], effect, trials))
    return [row for row in out if row is not None]
