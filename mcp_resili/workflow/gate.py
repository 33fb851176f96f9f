"""The CI gate: a candidate workflow against its golden one, with WorkflowPerturb's calibrated alerts.

Thresholds are WorkflowPerturb Table 1 (primary metric per failure mode): missing steps → Graph or
Chain F1 < 0.75; compressed steps → Kendall's τ < 0.65; description changes → BLEU or GLEU < 0.70.
Any alert is a regression. The thresholds are operating points (the paper re-tunes them per team):
`compare` takes overrides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp_resili.workflow.metrics import METRICS, WorkflowScores, evaluate
from mcp_resili.workflow.model import WorkflowGraph


@dataclass(frozen=True)
class AlertRule:
    """One failure mode: its primary metrics and the alert threshold (alert when any is below)."""

    failure_mode: str
    metrics: tuple[str, ...]
    threshold: float


DEFAULT_RULES = (
    AlertRule("missing_steps", ("graph_f1", "chain_f1"), 0.75),
    AlertRule("compressed_steps", ("kendall_tau",), 0.65),
    AlertRule("description_changes", ("bleu", "gleu"), 0.70),
)


@dataclass(frozen=True)
class Verdict:
    """The gate's decision, with every metric and every alert that fired."""

    scores: WorkflowScores
    alerts: tuple[str, ...]
    rules: tuple[AlertRule, ...] = field(default=DEFAULT_RULES)

    @property
    def regression(self) -> bool:
        """True when any alert fired."""
        return bool(self.alerts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "regression": self.regression,
            "scores": self.scores.to_dict(),
            "alerts": list(self.alerts),
            "rules": [
                {"failure_mode": r.failure_mode, "metrics": list(r.metrics), "below": r.threshold}
                for r in self.rules
            ],
        }


def rules_with(overrides: Mapping[str, float]) -> tuple[AlertRule, ...]:
    """`DEFAULT_RULES` with thresholds replaced per failure mode (unknown modes are an error)."""
    known = {r.failure_mode for r in DEFAULT_RULES}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown failure mode(s) {unknown}; choose from {sorted(known)}")
    return tuple(
        AlertRule(r.failure_mode, r.metrics, overrides.get(r.failure_mode, r.threshold))
        for r in DEFAULT_RULES
    )


def compare(
    golden: WorkflowGraph, candidate: WorkflowGraph, rules: tuple[AlertRule, ...] = DEFAULT_RULES
) -> Verdict:
    """Score ``candidate`` against ``golden`` and list the alerts that fire."""
    scores = evaluate(candidate, golden)
    values = scores.to_dict()
    alerts = []
    for rule in rules:
        for metric in rule.metrics:
            if metric not in METRICS:
                raise ValueError(f"rule {rule.failure_mode} names unknown metric {metric!r}")
            if values[metric] < rule.threshold:
                alerts.append(f"{rule.failure_mode}: {metric} = {values[metric]:.3f} < {rule.threshold:.2f}")
    return Verdict(scores=scores, alerts=tuple(alerts), rules=rules)
