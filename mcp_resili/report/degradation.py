"""Degradation: how much each model loses under each fault spec, paired, and who loses more.

For every model (with its architecture and prompt variant), each fault spec is paired with the
baseline spec episode by episode on the same task and trial; the **drop** of a metric is baseline
minus spec, with its task-clustered 95% interval, test and noise floor (`mcp_resili.report.noise`).
Whether one model degrades more than another under a spec is the paired **difference in
differences**: on the (task, trial)s where both models played both specs, model B's drop minus model
A's drop, clustered by task the same way.

The baseline is ``none`` when the episodes have it; else the mildest spec: the lowest rung when
every spec sits on one family's ladder (`mcp_resili.report.ladder`), otherwise the spec with the
highest full-success rate over all models; or the spec the caller names (``--baseline SPEC``).

Episodes of several runs are paired when the runs played the same tasks and trials with the same
seed (`degradation_from_runs`); runs with another seed drew other faults and are left out, said so.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcp_resili.errors import UserError
from mcp_resili.report.clustered import PAIRED_METHOD, PairedDifference, format_p, paired_difference
from mcp_resili.report.ladder import mildest_by_ladder, spec_intensity
from mcp_resili.report.noise import (
    METRICS,
    Metric,
    PairKey,
    amount,
    floor_cell,
    interval,
    scored_by_key,
    split_cell,
)
from mcp_resili.report.section import NoteBlock, ReportSection, TableBlock
from mcp_resili.store import EpisodeRow, RunRow, fault_specs

#: (model, architecture, variant): who degrades.
Arm = tuple[str, str, str]


class BaselineError(UserError):
    """A baseline SPEC the episodes do not have."""


def choose_baseline(rows: Sequence[EpisodeRow], named: str | None = None) -> tuple[str, str]:
    """(baseline spec, why it was chosen) among the fault specs of ``rows`` (see the module)."""
    specs = sorted(fault_specs(rows))
    if named is not None:
        if named not in specs:
            raise BaselineError(
                f"--baseline {named!r} is not a fault spec of these episodes: {', '.join(specs)}"
            )
        return (named, "named with --baseline")
    if "none" in specs:
        return ("none", "no faults")
    on_ladder = mildest_by_ladder(specs)
    if on_ladder is not None:
        return (on_ladder, "the mildest spec of its family's ladder")
    scored: dict[str, list[bool]] = {}
    for row in rows:
        if row.label is not None:
            scored.setdefault(row.faults, []).append(row.label == "full")
    best = max(specs, key=lambda s: (sum(scored.get(s, [])) / max(1, len(scored.get(s, []))), s))
    return (best, "the mildest spec as measured (highest full-success rate over all models)")


@dataclass(frozen=True)
class Drop:
    """One model's drop from the baseline under one spec, per metric."""

    arm: Arm
    faults: str
    drops: dict[str, PairedDifference]

    def to_dict(self, baseline: str) -> dict[str, Any]:
        """JSON-ready form (``drop``: baseline minus spec; positive means worse under the spec)."""
        model, architecture, variant = self.arm
        full = self.drops["full"]
        return {
            "model": model,
            "architecture": architecture,
            "variant": variant,
            "faults": self.faults,
            "baseline": baseline,
            "pairs": full.pairs,
            "tasks": full.clusters,
            "metrics": {name: _as_drop(d) for name, d in self.drops.items()},
        }


@dataclass(frozen=True)
class DropDifference:
    """Whether model B degrades more than model A under one spec: B's drop minus A's, per metric."""

    a: Arm
    b: Arm
    faults: str
    differences: dict[str, PairedDifference]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``delta``: B's drop minus A's; positive means B degrades more)."""
        return {
            "model_a": self.a[0],
            "model_b": self.b[0],
            "architecture_a": self.a[1],
            "architecture_b": self.b[1],
            "variant": self.a[2],
            "faults": self.faults,
            "pairs": self.differences["full"].pairs,
            "metrics": {name: d.to_dict() for name, d in self.differences.items()},
            "summary": self.sentence(METRICS[0]),
        }

    def sentence(self, metric: Metric) -> str:
        """Which model degrades more under the spec, by how much, and whether beyond the noise."""
        d = self.differences[metric.name]
        a, b = self.a[0], self.b[0]
        if d.pairs == 0:
            return f"under {self.faults}, {b} vs {a}: no episodes paired across both specs"
        if d.clusters < 2:
            return f"under {self.faults}, {b} vs {a}: one task only, no noise estimate"
        floor = amount(metric, d.mde, signed=False)
        if d.se == 0 and d.delta == 0:
            return f"under {self.faults}, {a} and {b} degrade identically in {metric.title} (every pair)"
        more, less = (b, a) if d.delta > 0 else (a, b)
        size = amount(metric, abs(d.delta), signed=False)
        if not d.significant:
            return (
                f"under {self.faults}, no detectable difference in how {a} and {b} degrade in "
                f"{metric.title}: {more}'s drop is {size} larger (p {format_p(d.p_value)}), inside "
                f"the noise floor of {floor}"
            )
        where = "beyond the noise" if abs(d.delta) >= d.mde else "significant, but inside the noise floor"
        low, high = (d.low, d.high) if d.delta > 0 else (-d.high, -d.low)
        return (
            f"under {self.faults}, {more} degrades more than {less} in {metric.title}: its drop is "
            f"{size} larger (95% CI {amount(metric, low)} to {amount(metric, high)}, "
            f"p {format_p(d.p_value)}), {where} (floor {floor})"
        )


def _as_drop(d: PairedDifference) -> dict[str, Any]:
    data = d.to_dict()
    data["drop"] = data.pop("delta")
    return data


@dataclass(frozen=True)
class Degradation:
    """Every model's drop under every spec from the baseline, and who degrades more."""

    baseline: str
    why: str
    drops: tuple[Drop, ...]
    differences: tuple[DropDifference, ...]
    #: Runs left out (another seed), with the reason.
    left_out: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``report --json`` and ``run --json`` print it as ``degradation``)."""
        return {
            "baseline": self.baseline,
            "baseline_rule": self.why,
            "method": PAIRED_METHOD,
            "drops": [d.to_dict(self.baseline) for d in self.drops],
            "differences": [d.to_dict() for d in self.differences],
            "left_out": list(self.left_out),
            "summary": summary_lines(self),
        }


def _arms(rows: Sequence[EpisodeRow]) -> dict[Arm, dict[str, dict[PairKey, EpisodeRow]]]:
    grouped: dict[Arm, dict[str, list[EpisodeRow]]] = {}
    for row in rows:
        grouped.setdefault((row.model, row.architecture, row.variant), {}).setdefault(row.faults, []).append(
            row
        )
    return {
        arm: {faults: scored_by_key(members) for faults, members in specs.items()}
        for arm, specs in grouped.items()
    }


def _by_intensity(spec: str) -> tuple[float, str]:
    """Sort key: a ladder's rungs from mild to harsh, other specs after them by name."""
    found = spec_intensity(spec)
    return (found[1] if found is not None else float("inf"), spec)


def degradation(rows: Sequence[EpisodeRow], baseline: str | None = None) -> Degradation | None:
    """The degradation of ``rows`` (one run, or runs already matched); None with fewer than two specs."""
    specs = sorted(fault_specs(rows), key=_by_intensity)
    if len(specs) < 2:
        if baseline is not None and baseline not in specs:
            raise BaselineError(
                f"--baseline {baseline!r} is not a fault spec of these episodes: {', '.join(specs)}"
            )
        return None
    chosen, why = choose_baseline(rows, baseline)
    arms = _arms(rows)
    drops = []
    for arm, by_spec in sorted(arms.items()):
        base = by_spec.get(chosen)
        if base is None:
            continue
        for faults in specs:
            if faults == chosen or faults not in by_spec:
                continue
            keys = sorted(set(base) & set(by_spec[faults]))
            if not keys:
                continue
            drops.append(
                Drop(
                    arm,
                    faults,
                    {
                        m.name: paired_difference(
                            [(k[0], m.of(by_spec[faults][k]), m.of(base[k])) for k in keys], m.limits()
                        )
                        for m in METRICS
                    },
                )
            )
    differences = []
    for faults in specs:
        if faults == chosen:
            continue
        playing = sorted(arm for arm, by_spec in arms.items() if chosen in by_spec and faults in by_spec)
        for a, b in itertools.combinations(playing, 2):
            if a[2] != b[2]:
                continue  # another prompt variant is another question
            difference = _drop_difference(arms, a, b, chosen, faults)
            if difference is None:
                continue
            if difference.differences["full"].delta < 0:  # B is the one that degrades more
                difference = _drop_difference(arms, b, a, chosen, faults)
            if difference is not None:
                differences.append(difference)
    return Degradation(chosen, why, tuple(drops), tuple(differences))


def _drop_difference(
    arms: dict[Arm, dict[str, dict[PairKey, EpisodeRow]]], a: Arm, b: Arm, baseline: str, faults: str
) -> DropDifference | None:
    """B's drop minus A's under ``faults``, on the (task, trial)s both played under both specs."""
    sides = [arms[a][baseline], arms[a][faults], arms[b][baseline], arms[b][faults]]
    keys = sorted(set.intersection(*(set(side) for side in sides)))
    if not keys:
        return None

    def drops(m: Metric) -> PairedDifference:
        return paired_difference(
            [
                (k[0], m.of(sides[0][k]) - m.of(sides[1][k]), m.of(sides[2][k]) - m.of(sides[3][k]))
                for k in keys
            ],
            m.limits(2),
        )

    return DropDifference(a, b, faults, {m.name: drops(m) for m in METRICS})


def degradation_from_runs(
    runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]], baseline: str | None = None
) -> Degradation | None:
    """Degradation across runs: episodes of runs with the first run's seed, paired by task and trial.

    A (model, architecture, variant, faults) arm played by several of them is taken from the first
    run that has it. Runs with another seed met other fault draws: left out, and listed.
    """
    if not runs:
        return None
    pooled, left_out = pooled_rows(runs)
    result = degradation(pooled, baseline)
    if result is None:
        return None
    return Degradation(result.baseline, result.why, result.drops, result.differences, tuple(left_out))


def pooled_rows(runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]]) -> tuple[list[EpisodeRow], list[str]]:
    """The episodes of the runs that share the first run's seed, each arm once; and the runs left out.

    An arm (model, architecture, variant, faults) played by several runs is taken from the first.
    """
    seed = runs[0][0].seed if runs else 0
    taken: set[tuple[str, str, str, str]] = set()
    pooled: list[EpisodeRow] = []
    left_out = []
    for run, rows in runs:
        if run.seed != seed:
            left_out.append(f"{run.id} (seed {run.seed}, not {seed}: other fault draws)")
            continue
        arms = {(r.model, r.architecture, r.variant, r.faults) for r in rows}
        fresh = arms - taken
        pooled.extend(r for r in rows if (r.model, r.architecture, r.variant, r.faults) in fresh)
        taken |= fresh
    return pooled, left_out


def degradation_section(result: Degradation) -> ReportSection:
    """The degradation tables: per model and spec the drop; per spec and model pair who degrades more."""
    drop_rows = []
    for drop in result.drops:
        model, architecture, variant = drop.arm
        for metric in METRICS:
            d = drop.drops[metric.name]
            drop_rows.append(
                (
                    model,
                    architecture,
                    variant,
                    f"{drop.faults} vs {result.baseline}",
                    metric.title,
                    f"{d.pairs} ({d.clusters} tasks)",
                    interval(metric, d),
                    format_p(d.p_value) if d.clusters >= 2 else "–",
                    floor_cell(metric, d),
                    d.verdict.replace("difference", "drop"),
                    split_cell(d),
                )
            )
    diff_rows = []
    for diff in result.differences:
        for metric in METRICS:
            d = diff.differences[metric.name]
            diff_rows.append(
                (
                    diff.faults,
                    diff.a[2],
                    diff.a[0],
                    diff.b[0],
                    metric.title,
                    f"{d.pairs} ({d.clusters} tasks)",
                    interval(metric, d),
                    format_p(d.p_value) if d.clusters >= 2 else "–",
                    floor_cell(metric, d),
                    d.verdict,
                )
            )
    blocks: list[NoteBlock | TableBlock] = [
        NoteBlock(
            f"Baseline: {result.baseline} ({result.why}). The drop of a metric is its baseline value minus "
            "its value under the spec, paired on the same task and trial (positive: worse under faults); "
            "'who degrades more' is model B's drop minus model A's on the pairs both models played under "
            "both specs (B: the model whose full success drops more). Intervals and tests: "
            f"{PAIRED_METHOD}; 'detectable' is the noise floor (power 0.8, α 0.05)."
            + (f" Left out: {'; '.join(result.left_out)}." if result.left_out else "")
        ),
        TableBlock(
            "Drop from the baseline, per model",
            (
                "model",
                "arch",
                "variant",
                "faults",
                "metric",
                "pairs",
                "drop (95% CI)",
                "p",
                "detectable drop",
                "verdict",
                "variance: task · fault draw · trial",
            ),
            tuple(drop_rows),
        ),
    ]
    if diff_rows:
        blocks.append(
            TableBlock(
                "Who degrades more (B's drop − A's drop)",
                (
                    "faults",
                    "variant",
                    "model A",
                    "model B",
                    "metric",
                    "pairs",
                    "Δ drop (95% CI)",
                    "p",
                    "detectable Δ",
                    "verdict",
                ),
                tuple(diff_rows),
            )
        )
        blocks.append(
            NoteBlock(
                " ".join(
                    f"{d.sentence(METRICS[0])[0].upper()}{d.sentence(METRICS[0])[1:]}."
                    for d in result.differences
                )
            )
        )
    return ReportSection(
        id="degradation", title="Degradation under faults", blocks=tuple(blocks), data=result.to_dict()
    )


def summary_lines(result: Degradation) -> list[str]:
    """One line per model and spec (its drop in full success) and per model pair (who degrades more)."""
    full = METRICS[0]
    lines = []
    for drop in result.drops:
        d = drop.drops["full"]
        lines.append(
            f"{drop.arm[0]} under {drop.faults}: full success drops {interval(full, d)} from "
            f"{result.baseline} (95% CI; detectable {floor_cell(full, d)}): "
            f"{d.verdict.replace('difference', 'drop')}"
        )
    for diff in result.differences:
        sentence = diff.sentence(full)
        lines.append(sentence[0].upper() + sentence[1:])
    return lines
