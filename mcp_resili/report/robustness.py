"""Robustness curves: each model's full-success rate against the intensity of one fault family.

Wherever the episodes hold two rungs or more of one family's ladder (`mcp_resili.report.ladder`;
``mcp-resili run --ladder FAMILY`` plays the standard one), every (model, architecture, variant)
gets a curve: the full-success rate at each rung with its task-clustered 95% interval, and one
summary number, the **normalised area under the curve**:

    AUC = Σ_l (x_{l+1} - x_l) / (x_max - x_min) · (y_l + y_{l+1}) / 2

the trapezoid area with the intensity axis rescaled to [0, 1]: 1 for an agent that never fails at
any rung, its rate for one that the faults do not touch. It is computed over the tasks played at
every rung, so it is the mean over tasks of each task's own area (its mean over trials at each
rung): its interval takes tasks as the units (a Wilson interval of the mean over those tasks,
conservative), and two models' areas are compared paired by task (`paired_difference`). Ordinal
ladders (ToolMaze's modes, protocol profiles) weigh each step equally.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcp_resili.report.clustered import (
    PAIRED_METHOD,
    RATE_METHOD,
    PairedDifference,
    clustered_mean_interval,
    format_p,
    paired_difference,
)
from mcp_resili.report.ladder import LADDERS, spec_intensity
from mcp_resili.report.section import ChartBlock, NoteBlock, ReportSection, TableBlock
from mcp_resili.report.summary import Rate, rate_by_task
from mcp_resili.report.svg import line_chart
from mcp_resili.store import EpisodeRow, fault_specs

#: The normalised area, in words (JSON and notes).
AUC_DEFINITION = (
    "trapezoid area with the intensity axis rescaled to [0, 1], over the tasks played at every rung"
)
#: (model, architecture, variant): whose curve.
Arm = tuple[str, str, str]


@dataclass(frozen=True)
class Rung:
    """One point of a curve: a fault spec at its intensity, the full-success rate there."""

    faults: str
    intensity: float
    rate: Rate
    tasks: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "faults": self.faults,
            "intensity": self.intensity,
            **self.rate.to_dict(),
            "tasks": self.tasks,
        }


@dataclass(frozen=True)
class Curve:
    """One arm's curve on one family's axis, with its normalised area and interval."""

    arm: Arm
    family: str
    rungs: tuple[Rung, ...]
    #: Task → its own area (mean over trials at each rung), over the tasks played at every rung.
    task_areas: dict[str, float]
    auc: float | None
    auc_low: float
    auc_high: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        model, architecture, variant = self.arm
        return {
            "model": model,
            "architecture": architecture,
            "variant": variant,
            "family": self.family,
            "axis": LADDERS[self.family].axis,
            "points": [r.to_dict() for r in self.rungs],
            "auc": None if self.auc is None else round(self.auc, 4),
            "auc_ci95": [round(self.auc_low, 4), round(self.auc_high, 4)],
            "auc_tasks": len(self.task_areas),
            "ci_method": RATE_METHOD,
        }


def trapezoid(points: Sequence[tuple[float, float]]) -> float:
    """The normalised area under ``(x, y)`` points (x rescaled to [0, 1]); the y value with one point."""
    ordered = sorted(points)
    if len(ordered) == 1:
        return ordered[0][1]
    span = ordered[-1][0] - ordered[0][0]
    if span <= 0:
        return sum(y for _, y in ordered) / len(ordered)
    return sum((x2 - x1) / span * (y1 + y2) / 2 for (x1, y1), (x2, y2) in itertools.pairwise(ordered))


def _rungs_of(specs: Sequence[str], family: str) -> dict[str, float]:
    """The specs on ``family``'s axis by intensity (a family's own rung at 0 wins over ``none``)."""
    placed: dict[float, str] = {}
    for spec in sorted(specs):
        found = spec_intensity(spec)
        if found is None or (found[0] is not None and found[0] != family):
            continue
        if found[1] in placed and found[0] is None:
            continue  # ``none`` where the family names its own zero (``lambda=0.0``)
        placed[found[1]] = spec
    return {spec: intensity for intensity, spec in placed.items()}


def families_in(specs: Sequence[str]) -> list[str]:
    """The families whose ladder has at least two rungs among ``specs`` (``none`` counts for each)."""
    named = {
        found[0] for spec in specs if (found := spec_intensity(spec)) is not None and found[0] is not None
    }
    return [family for family in sorted(named) if len(_rungs_of(specs, family)) >= 2]


def curve(arm: Arm, family: str, rows_by_spec: dict[str, list[EpisodeRow]], rungs: dict[str, float]) -> Curve:
    """The curve of one arm: its rate at each rung it played, its normalised area over shared tasks."""
    points = []
    per_task: dict[str, dict[float, list[float]]] = {}
    for spec, intensity in sorted(rungs.items(), key=lambda item: item[1]):
        scored = [r for r in rows_by_spec.get(spec, []) if r.label is not None]
        if not scored:
            continue
        points.append(
            Rung(
                spec,
                intensity,
                rate_by_task((r.task_id, r.label == "full") for r in scored),
                len({r.task_id for r in scored}),
            )
        )
        for r in scored:
            per_task.setdefault(r.task_id, {}).setdefault(intensity, []).append(
                1.0 if r.label == "full" else 0.0
            )
    levels = {p.intensity for p in points}
    areas = {
        task: trapezoid([(x, sum(v) / len(v)) for x, v in by_level.items()])
        for task, by_level in per_task.items()
        if set(by_level) == levels
    }
    if len(points) < 2 or not areas:
        return Curve(arm, family, tuple(points), areas, None, 0.0, 1.0)
    interval = clustered_mean_interval(list(areas.items()))
    assert interval is not None
    mean, low, high, _ = interval
    return Curve(arm, family, tuple(points), areas, mean, low, high)


@dataclass(frozen=True)
class AreaDifference:
    """Model B's area minus model A's on one family, paired by task."""

    a: Arm
    b: Arm
    family: str
    difference: PairedDifference

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``delta``: B's area minus A's)."""
        return {
            "model_a": self.a[0],
            "model_b": self.b[0],
            "architecture_a": self.a[1],
            "architecture_b": self.b[1],
            "variant": self.a[2],
            "family": self.family,
            **self.difference.to_dict(),
        }


@dataclass(frozen=True)
class Robustness:
    """Every arm's curve on every family with two rungs or more, and the pairwise area differences."""

    curves: tuple[Curve, ...]
    differences: tuple[AreaDifference, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``report --json`` and ``run --json`` print it as ``robustness``)."""
        return {
            "metric": "full-success rate",
            "auc": AUC_DEFINITION,
            "curves": [c.to_dict() for c in self.curves],
            "differences": [d.to_dict() for d in self.differences],
            "method": PAIRED_METHOD,
        }


def robustness(rows: Sequence[EpisodeRow]) -> Robustness | None:
    """The curves of ``rows``; None when no family has two rungs among their fault specs."""
    specs = sorted(fault_specs(rows))
    families = families_in(specs)
    if not families:
        return None
    by_arm: dict[Arm, dict[str, list[EpisodeRow]]] = {}
    for row in rows:
        by_arm.setdefault((row.model, row.architecture, row.variant), {}).setdefault(row.faults, []).append(
            row
        )
    curves = []
    differences = []
    for family in families:
        rungs = _rungs_of(specs, family)
        family_curves = [curve(arm, family, by_spec, rungs) for arm, by_spec in sorted(by_arm.items())]
        curves.extend(family_curves)
        for first, second in itertools.combinations([c for c in family_curves if c.auc is not None], 2):
            if first.arm[2] != second.arm[2]:
                continue  # another prompt variant is another question
            shared = sorted(set(first.task_areas) & set(second.task_areas))
            if not shared:
                continue
            pairs = [(t, first.task_areas[t], second.task_areas[t]) for t in shared]
            difference = paired_difference(pairs, (-1.0, 1.0))
            differences.append(AreaDifference(first.arm, second.arm, family, difference))
    return Robustness(tuple(curves), tuple(differences))


def _rate(rung: Rung) -> str:
    value = rung.rate.value
    return "–" if value is None else f"{rung.intensity:g}: {100 * value:.1f}"


def summary_lines(result: Robustness) -> list[str]:
    """One line per curve (its area) and per pair of models (which stays up longer, beyond the noise?)."""
    lines = []
    for c in result.curves:
        if c.auc is None:
            continue
        lines.append(
            f"{c.arm[0]} on the {c.family} ladder: normalised area {c.auc:.3f} "
            f"(95% CI {c.auc_low:.3f}–{c.auc_high:.3f}, {len(c.task_areas)} tasks); full % by intensity "
            + ", ".join(_rate(r) for r in c.rungs)
        )
    for d in result.differences:
        diff = d.difference
        higher, lower = (d.b[0], d.a[0]) if diff.delta > 0 else (d.a[0], d.b[0])
        verdict = diff.verdict
        lines.append(
            f"{d.family} ladder: {higher} keeps a larger area than {lower} by {abs(diff.delta):.3f} "
            f"(p {format_p(diff.p_value)}, detectable {diff.mde:.3f}): {verdict}"
            if diff.significant
            else f"{d.family} ladder: {d.a[0]} and {d.b[0]}: {verdict} in area "
            f"({diff.delta:+.3f}, detectable {diff.mde:.3f})"
        )
    return lines


def robustness_section(result: Robustness) -> ReportSection:
    """The curves as a table, one line chart per family, and the area comparisons."""
    rows = []
    blocks: list[TableBlock | ChartBlock | NoteBlock] = [
        NoteBlock(
            "Full-success rate against the intensity of each fault family the run climbed (95% intervals "
            f"clustered by task). Area: {AUC_DEFINITION}; 1 = never fails, its interval a "
            "conservative Wilson interval over the tasks' own areas; differences of area are paired by task "
            f"({PAIRED_METHOD})."
        )
    ]
    for c in result.curves:
        rows.append(
            (
                c.arm[0],
                c.arm[1],
                c.arm[2],
                c.family,
                " · ".join(_rate(r) for r in c.rungs),
                "–" if c.auc is None else f"{c.auc:.3f} ({c.auc_low:.3f}–{c.auc_high:.3f})",
                str(len(c.task_areas)),
            )
        )
    blocks.append(
        TableBlock(
            "Curves and their normalised area",
            ("model", "arch", "variant", "family", "full % by intensity", "area (95% CI)", "tasks"),
            tuple(rows),
        )
    )
    if result.differences:
        blocks.append(
            TableBlock(
                "Area, model B − model A (paired by task)",
                (
                    "family",
                    "variant",
                    "model A",
                    "model B",
                    "Δ area (95% CI)",
                    "p",
                    "detectable Δ",
                    "verdict",
                ),
                tuple(
                    (
                        d.family,
                        d.a[2],
                        d.a[0],
                        d.b[0],
                        f"{d.difference.delta:+.3f} ({d.difference.low:+.3f} to {d.difference.high:+.3f})",
                        format_p(d.difference.p_value),
                        f"{d.difference.mde:.3f}",
                        d.difference.verdict,
                    )
                    for d in result.differences
                ),
            )
        )
    for family in sorted({c.family for c in result.curves}):
        series = {
            f"{c.arm[0]} · {c.arm[1]} · {c.arm[2]}": [
                (r.intensity, r.rate.value) for r in c.rungs if r.rate.value is not None
            ]
            for c in result.curves
            if c.family == family
        }
        blocks.append(
            ChartBlock(
                f"robustness {family}",
                line_chart(
                    f"Robustness curve: {family} ladder", series, LADDERS[family].axis, "full-success rate"
                ),
            )
        )
    data = {**result.to_dict(), "summary": summary_lines(result)}
    return ReportSection(id="robustness", title="Robustness curves", blocks=tuple(blocks), data=data)
