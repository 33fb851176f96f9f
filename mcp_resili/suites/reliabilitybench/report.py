"""The ReliabilityBench summary of stored episodes: pass^k per cell, the surface, faults and recovery.

A cell is (model, architecture, fault spec, prompt variant); each cell also has pass^k and the mean
number of tool calls per domain (the paper's Table 5). The λ of a fault spec is read from
``lambda=X`` (``none`` is λ = 0); the ε of a variant from ``eps=X`` (``baseline`` is ε = 0). Cells
with other specs or variants (e.g. ``mr=synonym``) get pass^k but stay off the surface, and are
listed (``off_surface``, with the reason); so are cells naming a point another cell already holds
(``none`` and ``lambda=0``, ``baseline`` and ``eps=0``: the first in sort order is the point). There
is one surface per (model, architecture); see `mcp_resili.scoring.passk` for its task set, intervals
and normalised volume.

Per cell:

* ``pass_k``: pass^1..pass^K over one task set (tasks with K valid trials), each with its n and
  95% interval; the tasks left out are counted and listed.
* ``faults``: the λ profile's nominal rate beside what was measured: ``injection`` (fresh faults /
  calls the plan rolled for: the nominal rate's estimate) and ``exposure`` (faulted calls / all
  tool calls: what the agent saw, higher than the nominal rate because a cascade fails the next
  calls without a roll).
* ``terminations``: how the episodes ended, a stop rule by its name (``stop_rule:NAME``).
* ``recovery``: ``faults_met`` (tool calls that met an injected fault), ``harmless_faults`` (of those,
  the ones that delivered the correct result late: nothing to recover from), ``recovered`` (of the
  others, the ``faults_needing_recovery``, faults whose tool later succeeded without a fault in the
  same episode), ``recovery_rate`` (recovered ÷ faults needing recovery), ``extra_calls_per_fault``
  (tool calls beyond the gold workflow's length in episodes that met a fault, summed, divided by the
  faults needing recovery), and ``episodes_with_faults_passed`` (episodes that met a fault and still
  passed).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.table import Table

from mcp_resili.faults.chaos import lambda_profile
from mcp_resili.report.section import ChartBlock, NoteBlock, ReportSection, TableBlock
from mcp_resili.report.summary import rate_by_task
from mcp_resili.report.svg import heatmap, line_chart
from mcp_resili.scoring.passk import (
    LEARNING_ARCHITECTURES,
    VOLUME_K,
    TaskTrials,
    estimator_name,
    pass_k_curve,
    per_trial_rates,
    surface,
)
from mcp_resili.store import EpisodeRow
from mcp_resili.suites.reliabilitybench.model import details
from mcp_resili.suites.reliabilitybench.tasks import default_tasks

VOLUME_NORMALISATION = (
    f"V = mean of R(k, eps, lambda) over k = 1..{VOLUME_K} and every eps and lambda run (equal weight "
    "per grid point, in [0, 1]), over one task set; the k axis is fixed so that runs with different "
    "--trials estimate the same V"
)


def fault_level(spec: str) -> float | None:
    """λ of a fault spec (``lambda=0.2`` → 0.2, ``none`` → 0.0), or None for other specs.

    Ablations (``lambda=0.2,only=SoftRateLimit``) and fault files are not profiles: None.
    """
    if spec == "none":
        return 0.0
    match = re.fullmatch(r"lambda[=:]([0-9.]+)", spec)
    return float(match.group(1)) if match else None


def nominal_rate(spec: str) -> float | None:
    """The injection rate a λ profile promises per rolled call (``lambda=0.3`` → 0.275), if known."""
    if spec == "none":
        return 0.0
    match = re.fullmatch(r"lambda[=:](.+)", spec)
    if match is None:
        return None
    try:
        return lambda_profile(match.group(1)).rate
    except ValueError:
        return None


def perturbation_level(variant: str) -> float | None:
    """ε of a prompt variant (``eps=0.1`` → 0.1, ``baseline`` → 0.0), or None for other variants."""
    if variant == "baseline":
        return 0.0
    match = re.fullmatch(r"eps=([0-9.]+)", variant)
    return float(match.group(1)) if match else None


def _trials(rows: Sequence[EpisodeRow]) -> list[TaskTrials]:
    by_task: dict[str, list[EpisodeRow]] = {}
    for row in rows:
        by_task.setdefault(row.task_id, []).append(row)
    return [
        TaskTrials(
            task_id=task_id,
            successes=sum(1 for r in members if r.label == "full"),
            valid=sum(1 for r in members if r.label is not None),
            infrastructure_errors=sum(1 for r in members if r.label is None),
            ordered=_ordered(members),
        )
        for task_id, members in sorted(by_task.items())
    ]


def _ordered(members: Sequence[EpisodeRow]) -> tuple[bool | None, ...]:
    """A task's outcomes by trial index (None: an infrastructure error, or a trial not stored)."""
    by_trial = {r.trial: (None if r.label is None else r.label == "full") for r in members}
    return tuple(by_trial.get(index) for index in range(max(by_trial, default=-1) + 1))


def _components(row: EpisodeRow) -> dict[str, Any]:
    components: dict[str, Any] = (row.score or {}).get("components", {})
    return components


def _share(per_task: dict[str, list[int]]) -> dict[str, Any]:
    """A rate of calls (count of n per task) with its 95% interval, the task's calls correlated.

    Calls are the observations and tasks the clusters (`rate_by_task`): the calls of one episode, and
    the episodes of one task, meet one task's workflow.
    """
    count = sum(c for c, _ in per_task.values())
    n = sum(total for _, total in per_task.values())
    found = rate_by_task((task, i < c) for task, (c, total) in per_task.items() for i in range(max(c, total)))
    return {
        "count": count,
        "n": n,
        "rate": round(count / n, 4) if n else None,
        "ci95": [round(found.low, 4), round(found.high, 4)],
    }


def _faults(spec: str, rows: Sequence[EpisodeRow]) -> dict[str, Any]:
    injection: dict[str, list[int]] = {}
    exposure: dict[str, list[int]] = {}
    for row in rows:
        if row.score is None:
            continue
        c = _components(row)
        faulted, cascade = int(c.get("faults", 0)), int(c.get("cascade_calls", 0))
        for table, count, n in (
            (injection, faulted - cascade, int(c.get("rolled_calls", 0))),
            (exposure, faulted, int(c.get("tool_calls", 0))),
        ):
            entry = table.setdefault(row.task_id, [0, 0])
            entry[0] += count
            entry[1] += n
    return {
        "nominal_rate": nominal_rate(spec),
        "injection": _share(injection),
        "exposure": _share(exposure),
    }


def _terminations(rows: Sequence[EpisodeRow]) -> dict[str, int]:
    ends = Counter(f"stop_rule:{r.stop_rule}" if r.stop_rule else r.termination for r in rows)
    return dict(sorted(ends.items()))


def _recovery(rows: Sequence[EpisodeRow]) -> dict[str, Any]:
    """The paper's recovery table (§5.5) over the faults that needed recovering (not harmless ones)."""
    faults = harmless = recovered = extra = with_faults = passed = 0
    for row in rows:
        components = _components(row)
        met = int(components.get("faults", 0))
        if not met:
            continue
        with_faults += 1
        passed += row.label == "full"
        faults += met
        harmless += int(components.get("harmless_faults", 0))  # absent in rows scored before it existed
        recovered += int(components.get("recovered_faults", 0))
        extra += max(0, int(components.get("tool_calls", 0)) - int(components.get("gold_steps", 0)))
    needing = faults - harmless
    return {
        "faults_met": faults,
        "harmless_faults": harmless,
        "faults_needing_recovery": needing,
        "recovered": recovered,
        "recovery_rate": round(recovered / needing, 4) if needing else None,
        "extra_calls_per_fault": round(extra / needing, 4) if needing else None,
        "episodes_with_faults": with_faults,
        "episodes_with_faults_passed": passed,
    }


def _domains(rows: Sequence[EpisodeRow]) -> dict[str, str]:
    """Task id → domain, read from the scores, else from the suite's own tasks.

    A task whose every trial was an infrastructure error has no score; the embedded task set still
    knows its domain (only a task from elsewhere is ``unknown``).
    """
    found: dict[str, str] = {}
    for row in rows:
        domain = _components(row).get("domain")
        if isinstance(domain, str):
            found[row.task_id] = domain
    missing = {row.task_id for row in rows} - set(found)
    if missing:
        for task in default_tasks():
            if task.id in missing:
                found[task.id] = details(task).domain
    return found


def _by_domain(
    rows: Sequence[EpisodeRow], domains: dict[str, str], sequential: bool = False
) -> dict[str, Any]:
    groups: dict[str, list[EpisodeRow]] = {}
    for row in rows:
        groups.setdefault(domains.get(row.task_id, "unknown"), []).append(row)
    out = {}
    for domain, members in sorted(groups.items()):
        trials = _trials(members)
        calls = [int(_components(r)["tool_calls"]) for r in members if r.score is not None]
        out[domain] = {
            "tasks": len(trials),
            "pass_k": [p.to_dict() for p in pass_k_curve(trials, sequential=sequential)],
            "mean_tool_calls": round(sum(calls) / len(calls), 3) if calls else None,
        }
    return out


def summarize(rows: Sequence[EpisodeRow]) -> dict[str, Any]:
    """pass^k in every cell, one surface with its volume per (model, architecture), faults, recovery."""
    cells: dict[tuple[str, str, str, str], list[EpisodeRow]] = {}
    for row in rows:
        cells.setdefault((row.model, row.architecture, row.faults, row.variant), []).append(row)
    domains = _domains(rows)
    table = []
    grids: dict[tuple[str, str], dict[tuple[float, float], list[TaskTrials]]] = {}
    off_surface: list[dict[str, Any]] = []
    placed: dict[tuple[str, str, float, float], tuple[str, str]] = {}
    duplicates: dict[tuple[str, str], int] = {}
    for (model, architecture, faults, variant), members in sorted(cells.items()):
        trials = _trials(members)
        sequential = architecture in LEARNING_ARCHITECTURES
        lam, eps = fault_level(faults), perturbation_level(variant)
        table.append(
            {
                "model": model,
                "architecture": architecture,
                "faults": faults,
                "lambda": lam,
                "variant": variant,
                "eps": eps,
                "tasks": len(trials),
                "episodes": len(members),
                "infrastructure_errors": sum(t.infrastructure_errors for t in trials),
                "tasks_with_infrastructure_errors": [t.task_id for t in trials if t.infrastructure_errors],
                "pass_k": [p.to_dict() for p in pass_k_curve(trials, sequential=sequential)],
                "estimator": estimator_name(sequential),
                **({"by_trial": [p.to_dict() for p in per_trial_rates(trials)]} if sequential else {}),
                "faults_measured": _faults(faults, members),
                "terminations": _terminations(members),
                "recovery": _recovery(members),
                "by_domain": _by_domain(members, domains, sequential),
            }
        )
        cell = {"model": model, "architecture": architecture, "faults": faults, "variant": variant}
        if lam is None or eps is None:
            off_surface.append({**cell, "reason": "not a λ profile and an ε level"})
            continue
        grid = grids.setdefault((model, architecture), {})
        if (eps, lam) in grid:
            # Two names of one condition (``none`` and ``lambda=0``, ``baseline`` and ``eps=0``): the
            # first cell in sort order is the point; the others are listed, never silently dropped.
            first = placed[(model, architecture, eps, lam)]
            reason = f"same point (ε={eps:g}, λ={lam:g}) as faults {first[0]!r}, variant {first[1]!r}"
            off_surface.append({**cell, "reason": reason})
            duplicates[(model, architecture)] = duplicates.get((model, architecture), 0) + 1
            continue
        grid[(eps, lam)] = trials
        placed[(model, architecture, eps, lam)] = (faults, variant)
    return {
        "cells": table,
        "surfaces": [
            {
                "model": model,
                "architecture": architecture,
                **surface(grid, sequential=architecture in LEARNING_ARCHITECTURES).to_dict(),
                "volume_normalisation": VOLUME_NORMALISATION,
                "duplicate_cells": duplicates.get((model, architecture), 0),
            }
            for (model, architecture), grid in sorted(grids.items())
        ],
        "off_surface": off_surface,
    }


def _point(p: dict[str, Any]) -> str:
    if p["value"] is None:
        return "—"
    low, high = p["ci95"]
    excluded = f" −{p['excluded']}⚑" if p["excluded"] else ""
    return f"{p['value']:.3f} ({low:.2f}–{high:.2f}) n={p['n']}{excluded}"


def _exposure(cell: dict[str, Any]) -> str:
    measured = cell["faults_measured"]
    nominal = measured["nominal_rate"]
    seen = measured["exposure"]["rate"]
    return f"{'?' if nominal is None else f'{nominal:.3f}'} / {'—' if seen is None else f'{seen:.3f}'}"


def _volume(s: dict[str, Any]) -> str:
    duplicates = s.get("duplicate_cells", 0)
    left_off = (
        f"; {duplicates} cell(s) at an (ε, λ) point another cell already holds left off" if duplicates else ""
    )
    if s["volume"] is None:
        return f"{s['model']} · {s['architecture']}: no volume ({s['volume_note']}{left_off})"
    low, high = s["volume_ci95"]
    volume = f"{s['volume']:.3f} ({low:.3f}–{high:.3f}), n={s['volume_n']}"
    return f"{s['model']} · {s['architecture']}: {volume}{left_off}"


COLUMNS = ("model", "arch", "faults", "variant", "tasks", "infra errors", "λ nominal / seen")


def _rows(cells: Sequence[dict[str, Any]], k_max: int) -> list[tuple[str, ...]]:
    rows = []
    for c in cells:
        points = [_point(p) for p in c["pass_k"]] + ["—"] * (k_max - len(c["pass_k"]))
        rows.append(
            (
                c["model"],
                c["architecture"],
                c["faults"],
                c["variant"],
                str(c["tasks"]),
                str(c["infrastructure_errors"]),
                _exposure(c),
                *points,
            )
        )
    return rows


def passk_table(summary: dict[str, Any]) -> Table:
    """pass^k per cell and the surface volume per (model, architecture), for the terminal."""
    cells = summary["cells"]
    k_max = max((len(c["pass_k"]) for c in cells), default=0)
    table = Table(title="ReliabilityBench pass^k (95% CI, n tasks; ⚑ tasks left out: too few valid trials)")
    for name in COLUMNS:
        table.add_column(name, justify="right" if name in ("tasks", "infra errors") else "left")
    for k in range(1, k_max + 1):
        table.add_column(f"pass^{k}", justify="right")
    for row in _rows(cells, k_max):
        table.add_row(*row)
    if summary["surfaces"]:
        table.caption = "normalised surface volume: " + "; ".join(_volume(s) for s in summary["surfaces"])
    return table


def report_sections(rows: Sequence[EpisodeRow]) -> list[ReportSection]:
    """The ReliabilityBench section: pass^k table and curves, and one heatmap per surface at k = 1."""
    summary = summarize(rows)
    cells = summary["cells"]
    k_max = max((len(c["pass_k"]) for c in cells), default=0)
    table = TableBlock(
        "pass^k per cell (95% CI, n tasks; ⚑ tasks left out: fewer valid trials than the run's trials)",
        (*COLUMNS, *(f"pass^{k}" for k in range(1, k_max + 1))),
        tuple(_rows(cells, k_max)),
    )
    curves = {
        f"{c['model']} · {c['architecture']} · {c['faults']} · {c['variant']}": [
            (float(p["k"]), float(p["value"])) for p in c["pass_k"] if p["value"] is not None
        ]
        for c in cells
    }
    blocks: list[TableBlock | ChartBlock | NoteBlock] = [
        table,
        ChartBlock("pass^k", line_chart("pass^k curves", curves, "k", "pass^k")),
    ]
    for s in summary["surfaces"]:
        points = [p for p in s["points"] if p["k"] == 1]
        if not points:
            continue
        name = f"{s['model']} · {s['architecture']}"
        lambdas = sorted({p["lambda"] for p in points})
        epsilons = sorted({p["eps"] for p in points})
        values = {(p["lambda"], p["eps"]): p["R"] for p in points}
        blocks.append(
            ChartBlock(
                f"surface {name}",
                heatmap(f"{name}: R(k=1, ε, λ)", lambdas, epsilons, values, "fault rate λ", "perturbation ε"),
            )
        )
        blocks.append(NoteBlock(f"normalised surface volume {_volume(s)}. {VOLUME_NORMALISATION}."))
    return [
        ReportSection(id="reliabilitybench", title="ReliabilityBench", blocks=tuple(blocks), data=summary)
    ]
