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

**Out of sample** (`split_goldens`, `check_rules`): thresholds fitted and judged on the same variants
are judged in sample, and separate perfectly by construction. `calibrate` fits on one split of the
goldens (and seeds) and reports on the other: goldens are split by a hash of their structure, so
two tasks with the same DAG never fall on both sides, and the held-out variants use other seeds.
A rule set is then judged as a gate: a *false alert* is a mild (α = 0.1) candidate that raises any
alert, a *miss* a severe (α ≥ 0.3) candidate that raises none; each rate with its 95% Wilson
interval over the held-out candidates (one per golden and level).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from mcp_resili.scoring.passk import wilson
from mcp_resili.workflow.gate import AlertRule, compare
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
#: Seeds of the held-out variants: none of the fitting seeds (which start at 0).
HELD_OUT_SEEDS = (1000,)


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
) -> list[dict[str, float | None]]:
    """Every metric of every (golden, seed) variant at level ``alpha`` (inapplicable goldens skipped).

    A metric the variant leaves undefined (τ with fewer than two aligned steps) is None.
    """
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
            out.append({k: None if v is None else float(v) for k, v in scores.items()})
    return out


def fit_threshold(mild: Sequence[float | None], severe: Sequence[float | None]) -> tuple[float, float, float]:
    """(threshold, mild pass rate, severe alert rate) fitted as the module docstring describes.

    The best balanced accuracy on a 0.01 grid over [-1, 1], among thresholds that let at least
    `MIN_MILD_PASS` of the mild variants pass; the middle of the best band. An undefined score
    (None) never alerts, as in the gate.
    """
    if not mild or not severe:
        raise ValueError("a threshold needs mild and severe scores")
    # Scores are compared at 6 places so that 0.75 computed as 0.7499999… counts as 0.75.
    never = float("inf")  # an undefined score is never below a threshold
    mild_r = [never if v is None else round(v, 6) for v in mild]
    severe_r = [never if v is None else round(v, 6) for v in severe]
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
                    means={str(a): _mean(s[metric] for s in v) for a, v in by_level.items()},
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


def _mean(values: Iterable[float | None]) -> float:
    defined = [v for v in values if v is not None]
    return sum(defined) / len(defined) if defined else float("nan")


def split_goldens(
    goldens: Sequence[WorkflowGraph], held_out_share: float = 0.5
) -> tuple[list[WorkflowGraph], list[WorkflowGraph]]:
    """(fitting goldens, held-out goldens), split by a hash of each golden's structure.

    Equal workflows (the same tools and edges, as thousands of generated tasks share) always land on
    the same side, so a held-out golden is never one the thresholds were fitted on.
    """
    if not 0 < held_out_share < 1:
        raise ValueError(f"the held-out share must be in (0, 1), got {held_out_share}")
    fitting: list[WorkflowGraph] = []
    held_out: list[WorkflowGraph] = []
    for gold in goldens:
        digest = hashlib.sha256(gold.model_dump_json().encode()).digest()
        (held_out if int.from_bytes(digest[:8], "big") / 2**64 < held_out_share else fitting).append(gold)
    return fitting, held_out


@dataclass(frozen=True)
class GateCheck:
    """How a rule set gates one perturbation's held-out candidates: false alerts and misses."""

    perturbation: str
    mild: int  # α = 0.1 candidates
    false_alerts: int  # ... that raised any alert
    severe: int  # α ≥ 0.3 candidates
    misses: int  # ... that raised none
    #: Alerts per failure mode among the mild candidates (which rule raised the false alerts).
    mild_alerts_by_mode: dict[str, int]

    @property
    def false_alert_rate(self) -> float | None:
        """Share of mild candidates that alert (None without any)."""
        return self.false_alerts / self.mild if self.mild else None

    @property
    def miss_rate(self) -> float | None:
        """Share of severe candidates that raise no alert (None without any)."""
        return self.misses / self.severe if self.severe else None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form, with 95% Wilson intervals."""

        def rate(k: int, n: int) -> dict[str, object]:
            if not n:
                return {"count": k, "n": n, "rate": None, "ci95": None}
            low, high = wilson(k / n, n)
            return {"count": k, "n": n, "rate": round(k / n, 4), "ci95": [round(low, 4), round(high, 4)]}

        return {
            "perturbation": self.perturbation,
            "false_alerts": rate(self.false_alerts, self.mild),
            "misses": rate(self.misses, self.severe),
            "mild_alerts_by_mode": self.mild_alerts_by_mode,
        }


def check_rules(
    rules: Sequence[AlertRule],
    goldens: Sequence[WorkflowGraph],
    seeds: Iterable[int] = HELD_OUT_SEEDS,
    min_steps: int = MIN_STEPS,
) -> list[GateCheck]:
    """``rules`` as a gate on every perturbation that applies to ``goldens`` (see the module docstring)."""
    seeds = tuple(seeds)
    checks = []
    for kind in dict.fromkeys(mode_kind for mode_kind, _ in MODES.values()):
        mild = severe = false_alerts = misses = 0
        by_mode: dict[str, int] = {}
        for alpha in (MILD, *SEVERE):
            for seed in seeds:
                for index, gold in enumerate(goldens):
                    if len(gold.steps) < min_steps:
                        continue
                    try:
                        variant = perturb(gold, kind, alpha, seed * 1_000_003 + index)
                    except PerturbationError:
                        continue
                    verdict = compare(gold, variant, rules)
                    if alpha == MILD:
                        mild += 1
                        false_alerts += verdict.regression
                        for mode in {a.split(":", 1)[0] for a in verdict.alerts}:
                            by_mode[mode] = by_mode.get(mode, 0) + 1
                    else:
                        severe += 1
                        misses += not verdict.regression
        if mild or severe:
            checks.append(GateCheck(kind, mild, false_alerts, severe, misses, dict(sorted(by_mode.items()))))
    return checks
