"""The noise floor of every comparison: paired differences per metric, clustered by task.

Two sides of a comparison (two models in one run, one model in two runs, one model under two fault
specs) are paired episode by episode on the same task and trial, so that what the task (and, with the
same seed, the fault draws) contributes cancels. Per metric the comparison gives the mean paired
difference with its task-clustered 95% interval and test, the minimum detectable difference at this
size (α 0.05 two-sided, power 0.8) and the variance split into task, fault-draw and trial components
(`mcp_resili.report.clustered`); a difference inside the floor is said to be so in words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_resili.report.clustered import PAIRED_METHOD, PairedDifference, format_p, paired_difference
from mcp_resili.report.stats import McNemar, mcnemar_exact
from mcp_resili.store import EpisodeRow

#: Where an episode sits in its cell: its task and trial (with them the fault draws of a seed).
PairKey = tuple[str, int]


@dataclass(frozen=True)
class Metric:
    """A per-episode number compared between two sides."""

    name: str
    title: str
    of: Callable[[EpisodeRow], float]
    #: A rate in [0, 1] shown in percentage points (else as a plain number).
    percent: bool

    def limits(self, differences: int = 1) -> tuple[float, float] | None:
        """The range of a difference of rates (``differences`` = 2 for a difference of differences).

        None for the score value, whose range is the suite's.
        """
        return (-float(differences), float(differences)) if self.percent else None


def _full(row: EpisodeRow) -> float:
    return 1.0 if row.label == "full" else 0.0


def _value(row: EpisodeRow) -> float:
    return float(row.value or 0.0)


#: The metrics every comparison reports: full success (the headline rate) and the suite's score value.
METRICS = (
    Metric("full", "full success", _full, True),
    Metric("value", "score value", _value, False),
)
METRIC_BY_NAME = {m.name: m for m in METRICS}


def scored_by_key(rows: Iterable[EpisodeRow]) -> dict[PairKey, EpisodeRow]:
    """Scored episodes by (task, trial); infrastructure errors say nothing about the agent."""
    return {(r.task_id, r.trial): r for r in rows if r.label is not None}


def paired_rows(a: Iterable[EpisodeRow], b: Iterable[EpisodeRow]) -> list[tuple[EpisodeRow, EpisodeRow]]:
    """Episodes of two sides on the same (task, trial), both scored, in key order."""
    left, right = scored_by_key(a), scored_by_key(b)
    return [(left[key], right[key]) for key in sorted(set(left) & set(right))]


@dataclass(frozen=True)
class Comparison:
    """Side B against side A over paired episodes: each metric's difference, and full-success counts."""

    pairs: int
    differences: dict[str, PairedDifference]
    counts: McNemar

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the counts, ``p_value`` and ``delta_full`` of full success, every metric."""
        full = self.differences["full"]
        return {
            **self.counts.to_dict(),
            "tasks": full.clusters,
            "p_value": full.to_dict()["p_value"],
            "p_method": PAIRED_METHOD,
            "delta_full": round(full.delta, 4),
            "verdict": full.verdict,
            "metrics": {name: d.to_dict() for name, d in self.differences.items()},
        }


def compare(pairs: Sequence[tuple[EpisodeRow, EpisodeRow]]) -> Comparison:
    """Every metric of `METRICS` compared over ``pairs`` (A, B), clustered by task: B - A."""
    differences = {
        m.name: paired_difference([(a.task_id, m.of(a), m.of(b)) for a, b in pairs], m.limits())
        for m in METRICS
    }
    counts = mcnemar_exact([(a.label == "full", b.label == "full") for a, b in pairs])
    return Comparison(len(pairs), differences, counts)


def amount(metric: Metric, value: float, signed: bool = True) -> str:
    """A difference in the metric's unit: percentage points for rates."""
    if metric.percent:
        return f"{100 * value:+.1f} pp" if signed else f"{100 * value:.1f} pp"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def interval(metric: Metric, d: PairedDifference) -> str:
    """'Δ (low to high)' in the metric's unit."""
    if d.pairs == 0:
        return "–"
    if d.clusters < 2:
        return f"{amount(metric, d.delta)} (one task: no interval)"
    scale = 100 if metric.percent else 1
    digits = 1 if metric.percent else 3
    return f"{amount(metric, d.delta)} ({scale * d.low:+.{digits}f} to {scale * d.high:+.{digits}f})"


def floor_cell(metric: Metric, d: PairedDifference) -> str:
    """The minimum detectable difference in the metric's unit."""
    if d.pairs == 0 or d.clusters < 2:
        return "–"
    return amount(metric, d.mde, signed=False)


def split_cell(d: PairedDifference) -> str:
    """The variance split as 'task 40% · fault draw 10% · trial 50%'."""
    shares = d.components.shares()
    if shares["task"] is None:
        return "no variance"
    return " · ".join(
        f"{label} {100 * (shares[key] or 0.0):.0f}%"
        for key, label in (("task", "task"), ("fault_draw", "fault draw"), ("trial", "trial"))
    )


def comparison_rows(prefix: tuple[str, ...], comparison: Comparison) -> list[tuple[str, ...]]:
    """Table rows of one comparison, one per metric: prefix, metric, pairs, Δ, p, floor, verdict."""
    out = []
    for metric in METRICS:
        d = comparison.differences[metric.name]
        out.append(
            (
                *prefix,
                metric.title,
                f"{d.pairs} ({d.clusters} tasks)",
                interval(metric, d),
                format_p(d.p_value) if d.clusters >= 2 else "–",
                floor_cell(metric, d),
                d.verdict,
                split_cell(d),
            )
        )
    return out


#: Column titles after a comparison's prefix columns (`comparison_rows`).
COMPARISON_COLUMNS = (
    "metric",
    "pairs",
    "Δ B − A (95% CI)",
    "p",
    "detectable Δ",
    "verdict",
    "variance: task · fault draw · trial",
)

#: How to read a comparison table (terminal and HTML).
NOISE_NOTE = (
    "Episodes are paired on the same task and trial. Δ is B minus A; its 95% interval and p come from "
    "the paired differences with tasks as clusters (trials of a task are correlated: "
    f"{PAIRED_METHOD}). 'detectable Δ' is the smallest difference this many tasks and trials would "
    "detect with power 0.8 at α 0.05 (the noise floor); a difference the test does not reject is "
    "'inside the noise floor', one that is significant but smaller than the floor is said so too. The "
    "variance of an episode splits into task (between tasks), fault draw (the part both sides share "
    "because the same task and trial drew the same faults) and trial (the rest); pairing removes the "
    "task and fault-draw parts."
)


def describe(a: str, b: str, metric: Metric, d: PairedDifference) -> str:
    """One sentence: how B compares with A on the metric, and whether beyond the noise."""
    if d.pairs == 0:
        return f"{b} vs {a}: no pairs"
    if d.clusters < 2:
        return f"{b} vs {a}: one task only, no noise estimate"
    direction = "higher" if d.delta > 0 else "lower"
    size = amount(metric, abs(d.delta), signed=False)
    floor = amount(metric, d.mde, signed=False)
    if d.verdict.startswith("no difference"):
        return f"{b} and {a}: identical {metric.title} on every pair"
    if not d.significant:
        return (
            f"{b} vs {a}: no detectable difference in {metric.title} ({size} {direction}, "
            f"p {format_p(d.p_value)}; the floor at this size is {floor})"
        )
    where = "beyond the noise" if abs(d.delta) >= d.mde else "significant but inside the noise floor"
    return (
        f"{b} is {size} {direction} than {a} in {metric.title} (p {format_p(d.p_value)}), {where} "
        f"(floor {floor})"
    )
