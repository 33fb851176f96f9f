"""The CI gate: a candidate workflow against its golden one, with calibrated alert thresholds.

Two named threshold sets (alert when any listed metric is below the threshold):

* ``paper``: WorkflowPerturb Table 1, calibrated on text workflows (WorFBench descriptions, SBERT
  alignment): missing steps → Graph F1 or Chain F1 < 0.75 (Graph F1 as the paper defines it, the
  maximum common induced subgraph: ``graph_f1_mcs``); compressed steps → Kendall's τ < 0.65;
  description changes → BLEU or GLEU < 0.70.
* ``tools``: derived from this project's own perturbations of its tool-call goldens
  (`mcp_resili.workflow.calibration`, ``bench/workflow_calibration.py``): missing steps → Chain F1
  < 0.85; compressed steps → Kendall's τ < 0.53. Graph F1 does not separate one missing step in ten
  from three (either definition), so it is reported but not gated; description changes do not exist
  for tool workflows (a tool's name is its identity), so BLEU/GLEU are reported but not gated.

By default a ``tools`` golden workflow is gated with ``tools`` and a ``text`` one with ``paper``.
Thresholds are operating points (the paper re-tunes them per team): `rules_with` takes a set name
and per-mode overrides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mcp_resili.workflow.metrics import DEFAULT_GRAPH, GATE_METRICS, GraphDefinition, WorkflowScores, evaluate
from mcp_resili.workflow.model import WorkflowGraph, WorkflowKind


@dataclass(frozen=True)
class AlertRule:
    """One failure mode's metrics and their alert threshold (alert when any is below)."""

    failure_mode: str
    metrics: tuple[str, ...]
    threshold: float


# The paper's 0.75 was set on its maximum common induced subgraph, so the rule names that definition
# whatever definition a report shows.
PAPER_RULES = (
    AlertRule("missing_steps", ("graph_f1_mcs", "chain_f1"), 0.75),
    AlertRule("compressed_steps", ("kendall_tau",), 0.65),
    AlertRule("description_changes", ("bleu", "gleu"), 0.70),
)
# Derived by bench/workflow_calibration.py (see docs/reports.md for the table it prints).
TOOL_RULES = (
    AlertRule("missing_steps", ("chain_f1",), 0.85),
    AlertRule("compressed_steps", ("kendall_tau",), 0.53),
)
THRESHOLD_SETS: dict[str, tuple[AlertRule, ...]] = {"paper": PAPER_RULES, "tools": TOOL_RULES}
FAILURE_MODES = tuple(rule.failure_mode for rule in PAPER_RULES)


def default_threshold_set(kind: WorkflowKind) -> str:
    """The set a golden workflow of this kind is gated with: ``tools`` or ``paper``."""
    return "tools" if kind == "tools" else "paper"


@dataclass(frozen=True)
class Thresholds:
    """A threshold set by name (``None``: the default for the golden's kind) and per-mode overrides.

    An override replaces the thresholds of that mode's rules; for a mode the set does not gate it
    adds the paper's rule for that mode at the given threshold.
    """

    name: str | None = None
    overrides: tuple[tuple[str, float], ...] = ()

    def resolve(self, kind: WorkflowKind) -> tuple[str, tuple[AlertRule, ...]]:
        """The set's name and its rules, overrides applied, for a golden workflow of ``kind``."""
        name = self.name or default_threshold_set(kind)
        rules = list(THRESHOLD_SETS[name])
        for mode, value in self.overrides:
            if any(r.failure_mode == mode for r in rules):
                rules = [AlertRule(mode, r.metrics, value) if r.failure_mode == mode else r for r in rules]
            else:
                paper = next(r for r in PAPER_RULES if r.failure_mode == mode)
                rules.append(AlertRule(mode, paper.metrics, value))
        return (f"{name} (overridden)" if self.overrides else name), tuple(rules)


def rules_with(overrides: Mapping[str, float], threshold_set: str | None = None) -> Thresholds:
    """A validated `Thresholds`: a named set with thresholds replaced per failure mode.

    ``threshold_set``: ``paper``, ``tools`` or ``None`` (the default for the golden's kind). Unknown
    names, and thresholds that are not numbers in [-1, 1], are a `ValueError`.
    """
    if threshold_set is not None and threshold_set not in THRESHOLD_SETS:
        raise ValueError(f"unknown threshold set {threshold_set!r}; choose from {sorted(THRESHOLD_SETS)}")
    unknown = sorted(set(overrides) - set(FAILURE_MODES))
    if unknown:
        raise ValueError(f"unknown failure mode(s) {unknown}; choose from {sorted(FAILURE_MODES)}")
    for mode, value in overrides.items():
        if not math.isfinite(value) or not -1.0 <= value <= 1.0:
            raise ValueError(f"threshold for {mode} must be a number in [-1, 1], got {value}")
    return Thresholds(name=threshold_set, overrides=tuple(sorted(overrides.items())))


@dataclass(frozen=True)
class Verdict:
    """The gate's decision, with every metric and every alert that fired."""

    scores: WorkflowScores
    alerts: tuple[str, ...]
    rules: tuple[AlertRule, ...] = ()
    threshold_set: str = "custom"
    graph: GraphDefinition = DEFAULT_GRAPH

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
            "threshold_set": self.threshold_set,
            "graph_f1_definition": self.graph,
            "rules": [
                {"failure_mode": r.failure_mode, "metrics": list(r.metrics), "below": r.threshold}
                for r in self.rules
            ],
        }


def _below(value: float, threshold: float) -> str:
    """'value < threshold' with as many digits as it takes to tell them apart (6, else all)."""
    short = f"{value:.6g}", f"{threshold:.6g}"
    return " < ".join(short if short[0] != short[1] else (repr(value), repr(threshold)))


def compare(
    golden: WorkflowGraph,
    candidate: WorkflowGraph,
    rules: Thresholds | Sequence[AlertRule] | None = None,
    *,
    graph: GraphDefinition = DEFAULT_GRAPH,
    match_arguments: bool = False,
) -> Verdict:
    """Score ``candidate`` against ``golden`` and list the alerts that fire.

    ``rules``: a `Thresholds` (default: the set for the golden's kind) or explicit `AlertRule`s.
    ``graph``: the Graph F1 definition (``lcc`` or ``mcs``) of ``graph_f1``; rules may also name
    ``graph_f1_lcc`` or ``graph_f1_mcs``. ``match_arguments``: tool steps pair only when their
    arguments agree too.
    """
    if rules is None or isinstance(rules, Thresholds):
        set_name, resolved = (rules or Thresholds()).resolve(golden.kind)
    else:
        set_name, resolved = "custom", tuple(rules)
    scores = evaluate(candidate, golden, graph=graph, match_arguments=match_arguments)
    values = asdict(scores)  # unrounded: 0.529966 is below a threshold of 0.53
    alerts = []
    for rule in resolved:
        for metric in rule.metrics:
            if metric not in GATE_METRICS:
                raise ValueError(f"rule {rule.failure_mode} names unknown metric {metric!r}")
            # An undefined metric (τ with fewer than two aligned steps) is no evidence: no alert.
            if values[metric] is not None and values[metric] < rule.threshold:
                alerts.append(f"{rule.failure_mode}: {metric} = {_below(values[metric], rule.threshold)}")
    return Verdict(scores=scores, alerts=tuple(alerts), rules=resolved, threshold_set=set_name, graph=graph)
