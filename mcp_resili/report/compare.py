"""Several runs side by side: rates per cell with intervals, paired tests where the tasks match, cost.

Runs are compared cell by cell — a cell is (model, faults, variant) — and, where two runs played
the same (task, trial, faults, variant), pairwise with McNemar's exact test on full success. Two
runs with the same seed and fault spec drew the same faults for a task and trial, so a pair then
differs only in what the compared runs changed (the model, its version, the prompt…); with
different seeds the pairs share the task but not the fault draws, which the table says.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp_resili.report.build import Report, SuiteFinder, load_runs, no_suite, workflow_scores
from mcp_resili.report.section import ChartBlock, NoteBlock, ReportSection, TableBlock, rate_cell
from mcp_resili.report.stats import mcnemar_exact
from mcp_resili.report.summary import GroupSummary, rate, summarize
from mcp_resili.report.svg import PALETTE, grouped_bar_chart
from mcp_resili.store import EpisodeRow, RunRow

Cell = tuple[str, str, str]


def load_comparison(db: Path, run_ids: Sequence[str], find_suite: SuiteFinder = no_suite) -> Report:
    """The comparison of the runs ``run_ids`` (at least two, all in ``db``).

    ``find_suite`` as for `mcp_resili.report.build.load_report`.
    """
    return build_comparison(load_runs(db, list(run_ids)), find_suite)


def runs_section(runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]]) -> ReportSection:
    """What each run is: suite, seed, date, episodes, and the models, fault specs and variants it ran."""
    data: list[dict[str, Any]] = []
    rows = []
    for run, episodes in runs:
        models = sorted({r.model for r in episodes})
        faults = sorted({r.faults for r in episodes})
        variants = sorted({r.variant for r in episodes})
        data.append(
            {
                "run_id": run.id,
                "suite": run.suite,
                "seed": run.seed,
                "created_at": run.created_at,
                "episodes": len(episodes),
                "models": models,
                "faults": faults,
                "variants": variants,
            }
        )
        rows.append(
            (
                run.id,
                run.suite,
                str(run.seed),
                run.created_at,
                str(len(episodes)),
                ", ".join(models),
                ", ".join(faults),
                ", ".join(variants),
            )
        )
    columns = ("run", "suite", "seed", "created", "episodes", "models", "faults", "variants")
    return ReportSection(
        id="runs",
        title="Runs compared",
        blocks=(TableBlock("The runs", columns, tuple(rows)),),
        data={"runs": data},
    )


def side_by_side_section(
    runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]], find_suite: SuiteFinder = no_suite
) -> ReportSection:
    """Full-success rate (95% Wilson interval) of every cell in every run, as a table and grouped bars.

    A run's groups carry its suite's own columns in the JSON (e.g. ResiliBench's bounds).
    """
    by_run: list[dict[Cell, GroupSummary]] = []
    for run, episodes in runs:
        suite = find_suite(run.suite)
        columns = suite.summary_columns if suite is not None else ()
        by_run.append({(g.model, g.faults, g.variant): g for g in summarize(episodes, columns=columns)})
    cells = sorted({cell for groups in by_run for cell in groups})
    table_rows = []
    data: dict[str, dict[str, Any]] = {}
    groups_for_chart = []
    for cell in cells:
        name = " · ".join(cell)
        entries = [groups.get(cell) for groups in by_run]
        data[name] = {
            run.id: None if g is None else g.to_dict() for (run, _), g in zip(runs, entries, strict=True)
        }
        table_rows.append(
            (
                *cell,
                *(
                    "–" if g is None else f"{rate_cell(g.levels['full'].to_dict())} (n={g.scored})"
                    for g in entries
                ),
            )
        )
        groups_for_chart.append(
            (
                name,
                [None if g is None else g.levels["full"].bar(name) for g in entries],
            )
        )
    series = [(run.id, PALETTE[n % len(PALETTE)]) for n, (run, _) in enumerate(runs)]
    chart = grouped_bar_chart(
        "Full success per cell and run (95% interval)",
        groups_for_chart,
        series,
        "full-success rate (% of scored episodes)",
    )
    return ReportSection(
        id="side-by-side",
        title="Outcomes side by side",
        blocks=(
            NoteBlock(
                "Full-success rate of each (model, faults, variant) cell in each run, with its 95% Wilson "
                "interval and the number of scored episodes; infrastructure errors are left out of the "
                "denominators. – : the run has no episode in that cell."
            ),
            TableBlock(
                "Full success % (95% CI) per run",
                ("model", "faults", "variant", *(f"{run.id}" for run, _ in runs)),
                tuple(table_rows),
            ),
            ChartBlock("full success per run", chart),
        ),
        data={"cells": data},
    )


def _outcomes(rows: Sequence[EpisodeRow]) -> dict[str, dict[tuple[str, int, str, str], bool]]:
    """Model → (task, trial, faults, variant) → full success, for scored episodes only."""
    out: dict[str, dict[tuple[str, int, str, str], bool]] = {}
    for row in rows:
        if row.label is not None:
            out.setdefault(row.model, {})[(row.task_id, row.trial, row.faults, row.variant)] = (
                row.label == "full"
            )
    return out


def _arms(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str]]:
    """Model pairs to compare between two runs: the same model when they share any, else every pair."""
    shared = sorted(set(a) & set(b))
    return [(m, m) for m in shared] if shared else [(x, y) for x in sorted(a) for y in sorted(b)]


def paired_runs_section(runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]]) -> ReportSection:
    """McNemar's exact test on full success for every two runs, over the tasks both played."""
    outcomes = [_outcomes(rows) for _, rows in runs]
    data = []
    table_rows = []
    for (i, (run_a, _)), (j, (run_b, _)) in itertools.combinations(enumerate(runs), 2):
        for model_a, model_b in _arms(outcomes[i], outcomes[j]):
            shared = sorted(set(outcomes[i][model_a]) & set(outcomes[j][model_b]))
            same_draws = run_a.seed == run_b.seed
            entry: dict[str, Any] = {
                "run_a": run_a.id,
                "model_a": model_a,
                "run_b": run_b.id,
                "model_b": model_b,
                "same_seed": same_draws,
            }
            if not shared:
                data.append({**entry, "pairs": 0})
                table_rows.append(
                    (run_a.id, model_a, run_b.id, model_b, "0", *("–",) * 6, "yes" if same_draws else "no")
                )
                continue
            test = mcnemar_exact([(outcomes[i][model_a][c], outcomes[j][model_b][c]) for c in shared])
            delta = (test.only_b - test.only_a) / len(shared)
            data.append({**entry, **test.to_dict(), "delta_full": round(delta, 4)})
            table_rows.append(
                (
                    run_a.id,
                    model_a,
                    run_b.id,
                    model_b,
                    str(len(shared)),
                    str(test.both),
                    str(test.only_a),
                    str(test.only_b),
                    str(test.neither),
                    f"{100 * delta:+.1f}",
                    f"{test.p_value:.4g}",
                    "yes" if same_draws else "no",
                )
            )
    return ReportSection(
        id="paired-runs",
        title="Paired comparison across runs",
        blocks=(
            NoteBlock(
                "Each pair of runs over the (task, trial, faults, variant) cells both played, the same model "
                "on both sides when the runs share models (else every model pair). Δ is B's full-success "
                "rate minus A's on those pairs, in percentage points; p is McNemar's exact two-sided test, "
                "from the pairs where exactly one side succeeded. With the same seed both sides met the "
                "same fault draws; with different seeds only the tasks match. 0 pairs: no task in common — "
                "compare the rates side by side instead."
            ),
            TableBlock(
                "Full success, paired across runs",
                (
                    "run A",
                    "model A",
                    "run B",
                    "model B",
                    "pairs",
                    "both",
                    "only A",
                    "only B",
                    "neither",
                    "Δ full (B − A), pp",
                    "p (exact)",
                    "same seed",
                ),
                tuple(table_rows),
            ),
        ),
        data={"pairs": data},
    )


def cost_by_run_section(runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]]) -> ReportSection:
    """Tokens, cost and infrastructure errors per run and model."""
    data = []
    table_rows = []
    for run, rows in runs:
        models = sorted({r.model for r in rows})
        for model in models:
            members = [r for r in rows if r.model == model]
            infra = rate(sum(1 for r in members if r.label is None), len(members))
            priced = [r.cost_usd for r in members if r.cost_usd is not None]
            cost = sum(priced) if priced else None
            inputs, outputs = sum(r.input_tokens for r in members), sum(r.output_tokens for r in members)
            data.append(
                {
                    "run_id": run.id,
                    "model": model,
                    "episodes": len(members),
                    "input_tokens": inputs,
                    "output_tokens": outputs,
                    "cost_usd": None if cost is None else round(cost, 6),
                    "infrastructure_errors": infra.to_dict(),
                }
            )
            table_rows.append(
                (
                    run.id,
                    model,
                    str(len(members)),
                    str(inputs),
                    str(outputs),
                    "n/a" if cost is None else f"{cost:.4f}",
                    rate_cell(infra.to_dict()),
                )
            )
    columns = (
        "run",
        "model",
        "episodes",
        "input tokens",
        "output tokens",
        "cost $",
        "infra errors % (95% CI)",
    )
    return ReportSection(
        id="cost",
        title="Cost and infrastructure errors",
        blocks=(TableBlock("Per run and model", columns, tuple(table_rows)),),
        data={"rows": data},
    )


def build_comparison(
    runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]], find_suite: SuiteFinder = no_suite
) -> Report:
    """The comparison report of two or more runs (with their stored episodes).

    ``find_suite`` finds each run's suite by name (handed down by the caller; generic sections only
    without it).
    """
    workflow: dict[str, dict[str, float | int | None]] = {}
    for run, rows in runs:
        workflow.update(workflow_scores(rows, find_suite(run.suite)))
    sections = (
        runs_section(runs),
        side_by_side_section(runs, find_suite),
        paired_runs_section(runs),
        cost_by_run_section(runs),
    )
    return Report(
        runs=tuple(run for run, _ in runs),
        sections=sections,
        rows=tuple(row for _, rows in runs for row in rows),
        workflow=workflow,
    )
