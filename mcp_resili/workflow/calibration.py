"""Alert thresholds derived from perturbed golden workflows (WorkflowPerturb's protocol, re-run in-domain).

WorkflowPerturb places each failure mode's alert threshold "in the separating band between the
Primary metric's mean score under mild (10%) and moderate (30%) perturbation", so that candidates
consistent with ≤ 10% degradation pass and those at ~30% or worse are flagged. Here the band is
found on the score distributions, not the means:

1. Goldens with at least `MIN_STEPS` steps (the paper's |V| ≥ 5 filter: below it 10% and 30% both
   mean one change) are perturbed by the failure mode's perturbation at α = 0.1 (*mild*, should
   pass) and α ∈ {0.3, 0.5} (*severe*, should alert), once per seed.
2. For each of the mode's primary metrics (WorkflowPerturb Table 1; Graph F1 under both
   definitions), every threshold t on a 0.01
   grid over [-1, 1] that lets at least 95% of the mild variants pass (`MIN_MILD_PASS`) is scored
   by its balanced accuracy ½[P(mild ≥ t) + P(severe < t)] (the alert fires below t).
3. The threshold is the middle of the best-scoring band of the grid.

A metric whose balanced accuracy stays below 0.95 (`MIN_ACCURACY`) does not separate the levels;
`rules_from_fits` leaves it out of a derived rule set.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from mcp_resili.workflow.gate import AlertRule
from mcp_resili.workflow.metrics import evaluate
from mcp_resili.workflow.model import WorkflowGraph
from mcp_resili.workflow.perturb import PerturbationError, PerturbationType, perturb

MILD = 0.1
SEVERE = (0.3, 0.5)
MIN_STEPS = 5
#: Failure mode → (its perturbation, its primary metrics), WorkflowPerturb Table 1.
MODES: dict[str, tuple[PerturbationType, tuple[str, ...]]] = {
    "missing_steps": ("missing", ("chain_f1", "graph_f1_lcc", "graph_f1_mcs")),
    "compressed_steps": ("compressed", ("kendall_tau",)),
    "description_changes": ("description", ("bleu", "gleu")),
}
#: Share of mild variants a threshold must let pass (the false-alert budget at α = 0.1 is 5%).
MIN_MILD_PASS = 0.95
#: Minimum balanced accuracy for a metric to enter a derived rule set.
MIN_ACCURACY = 0.95


@dataclass(frozen=True)
class ThresholdFit:
    """One failure mode's metric, its derived threshold and how well it separates the levels."""

    failure_mode: str
    metric: str
    threshold: float
    mild_pass_rate: float  # share of α = 0.1 variants scoring ≥ threshold (no alert)
    severe_alert_rate: float  # share of α ≥ 0.3 variants scoring < threshold (alert)
    means: dict[str, float]  # mean score per α
    variants: dict[str, int]  # variants per α

    @property
    def balanced_accuracy(self) -> float:
        """½(mild pass rate + severe alert rate)."""
        return (self.mild_pass_rate + self.severe_alert_rate) / 2

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form, rounded to 4 places."""
        return {
            "failure_mode": self.failure_mode,
            "metric": self.metric,
            "threshold": self.threshold,
            "mild_pass_rate": round(self.mild_pass_rate, 4),
            "severe_alert_rate": round(self.severe_alert_rate, 4),
            "balanced_accuracy": round(self.balanced_accuracy, 4),
            "means": {a: round(v, 4) for a, v in self.means.items()},
            "variants": self.variants,
        }


def perturbed_scores(
    goldens: Sequence[WorkflowGraph],
    kind: PerturbationType,
    alpha: float,
    seeds: Iterable[int],
    min_steps: int = 1,
) -> list[dict[str, float]]:
    """Every metric of every (golden, seed) variant at level ``alpha`` (inapplicable goldens skipped)."""
    out = []
    for seed in seeds:
        for index, gold in enumerate(goldens):
            if len(gold.steps) < min_steps:
                continue
            try:
                variant = perturb(gold, kind, alpha, seed * 1_000_003 + index)
            except PerturbationError:
                continue
            scores = asdict(evaluate(variant, gold))  # unrounded: thresholds are fitted on these
            out.append({k: float(v) for k, v in scores.items()})
    return out


def fit_threshold(mild: Sequence[float], severe: Sequence[float]) -> tuple[float, float, float]:
    """(threshold, mild pass rate, severe alert rate) fitted as the module docstring describes.

    The best balanced accuracy on a 0.01 grid over [-1, 1], among thresholds that let at least
    `MIN_MILD_PASS` of the mild variants pass; the middle of the best band.
    """
    if not mild or not severe:
        raise ValueError("a threshold needs mild and severe scores")
    # Scores are compared at 6 places so that 0.75 computed as 0.7499999… counts as 0.75.
    mild_r = [round(v, 6) for v in mild]
    severe_r = [round(v, 6) for v in severe]
    results = []
    for step in range(-100, 101):
        t = step / 100
        passed = sum(v >= t for v in mild_r) / len(mild_r)
        alerted = sum(v < t for v in severe_r) / len(severe_r)
        # Thresholds that alert on too many mild variants are out of the running.
        score = round(passed + alerted, 9) if passed >= MIN_MILD_PASS else -1.0
        results.append((score, t, passed, alerted))
    best = max(r[0] for r in results)
    first = next(n for n, r in enumerate(results) if r[0] == best)
    last = first
    while last + 1 < len(results) and results[last + 1][0] == best:
        last += 1
    _, t, passed, alerted = results[(first + last) // 2]
    return t, passed, alerted


def derive_thresholds(
    goldens: Sequence[WorkflowGraph],
    seeds: Iterable[int] = (0, 1, 2),
    min_steps: int = MIN_STEPS,
) -> list[ThresholdFit]:
    """A `ThresholdFit` per (failure mode, primary metric) whose perturbation applies to ``goldens``."""
    seeds = tuple(seeds)
    fits = []
    for mode, (kind, metrics) in MODES.items():
        by_level = {
            alpha: perturbed_scores(goldens, kind, alpha, seeds, min_steps) for alpha in (MILD, *SEVERE)
        }
        if not all(by_level.values()):
            continue  # e.g. description changes on tool workflows
        for metric in metrics:
            mild = [s[metric] for s in by_level[MILD]]
            severe = [s[metric] for alpha in SEVERE for s in by_level[alpha]]
            threshold, passed, alerted = fit_threshold(mild, severe)
            fits.append(
                ThresholdFit(
                    failure_mode=mode,
                    metric=metric,
                    threshold=threshold,
                    mild_pass_rate=passed,
                    severe_alert_rate=alerted,
                    means={str(a): sum(s[metric] for s in v) / len(v) for a, v in by_level.items()},
                    variants={str(a): len(v) for a, v in by_level.items()},
                )
            )
    return fits


def rules_from_fits(
    fits: Sequence[ThresholdFit], min_accuracy: float = MIN_ACCURACY
) -> tuple[AlertRule, ...]:
    """One `AlertRule` per fitted metric that separates the levels (balanced accuracy ≥ ``min_accuracy``)."""
    return tuple(
        AlertRule(fit.failure_mode, (fit.metric,), fit.threshold)
        for fit in fits
        if fit.balanced_accuracy >= min_accuracy
    )
