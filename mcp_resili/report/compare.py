"""Several runs side by side: rates per cell with intervals, paired tests where the tasks match, cost.

Runs are compared cell by cell — a cell is (model, faults, variant) — and, where two runs played
the same (task, trial, faults, variant), pairwise: the paired difference of each metric with its
task-clustered interval, test and noise floor (`mcp_resili.report.noise`). Two runs with the same
seed and fault spec drew the same faults for a task and trial, so a pair then differs only in what
the compared runs changed (the model, its version, the prompt…); with different seeds the pairs
share the task but not the fault draws, which the table says. Runs that played the same tasks under
other fault specs are paired in the degradation section (`mcp_resili.report.degradation`).

Under an architecture whose trials learn (Reflexion) the rate over a run's trials depends on how
many it played: runs at different trial counts are compared side by side over the trials all of
them played (`comparable_trials`), and said so.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_resili.report.build import (
    Report,
    RowsOfRuns,
    SuiteFinder,
    TraceObserver,
    no_suite,
    stored_runs,
    workflow_scores,
)
from mcp_resili.report.clustered import PAIRED_METHOD, RATE_METHOD
from mcp_resili.report.degradation import degradation_from_runs, degradation_section, pooled_rows
from mcp_resili.report.noise import (
    COMPARISON_COLUMNS,
    METRIC_BY_NAME,
    NOISE_NOTE,
    compare,
    comparison_rows,
    describe,
    paired_rows,
)
from mcp_resili.report.robustness import robustness, robustness_section
from mcp_resili.report.section import ChartBlock, NoteBlock, ReportSection, TableBlock, rate_cell
from mcp_resili.report.summary import GroupSummary, episode_rate, summarize
from mcp_resili.report.svg import PALETTE, grouped_bar_chart
from mcp_resili.scoring.passk import LEARNING_ARCHITECTURES
from mcp_resili.store import EpisodeRow, RunRow, StoredRows

Cell = tuple[str, str, str]


def load_comparison(
    db: Path,
    run_ids: Sequence[str],
    find_suite: SuiteFinder = no_suite,
    baseline: str | None = None,
    observer: TraceObserver | None = None,
) -> Report:
    """The comparison of the runs ``run_ids`` (at least two, all in ``db``).

    ``find_suite``, ``baseline`` and ``observer`` as for `mcp_resili.report.build.load_report`.
    """
    runs = stored_runs(db, list(run_ids))
    # The sections pair episodes across runs: their rows are held, without traces and in the compact
    # form `held_rows` makes, while the sections are made, and let go before the pass over the traces
    # (workflow metrics, the episode browser's index and details), which reads them from the store:
    # the two never take memory at the same time.
    components = frozenset(
        column.component
        for suite in {run.suite: find_suite(run.suite) for run in runs}.values()
        if suite is not None
        for column in suite.summary_columns
    )
    shared = SharedValues()
    sections = comparison_sections(
        [(run, held_rows(StoredRows(db, run.id), components, shared)) for run in runs],
        find_suite,
        baseline,
    )
    traced = [StoredRows(db, run.id, traces=True) for run in runs]
    return _with_traces(runs, sections, traced, find_suite, observer)


def _pruned_score(score: dict[str, Any] | None, components: frozenset[str]) -> dict[str, Any] | None:
    """What the comparison's sections read of a score: the ``components`` named (the suites' columns)."""
    if score is None:
        return None
    found = score.get("components", {})
    if not isinstance(found, dict):  # not a score this version wrote: kept whole, the sections judge it
        return score
    return {"components": {name: value for name, value in found.items() if name in components}}


@dataclass
class SharedValues:
    """Values `held_rows` made one object of, handed from run to run (runs repeat tasks and models)."""

    strings: dict[str, str] = field(default_factory=dict)
    #: Keyed with the type too: 1, 1.0 and True are equal keys of a dict, but not the same value.
    numbers: dict[tuple[type, Any], Any] = field(default_factory=dict)
    scores: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)


def held_rows(
    rows: Iterable[EpisodeRow], components: frozenset[str], shared: SharedValues | None = None
) -> list[EpisodeRow]:
    """``rows`` (without traces) as a comparison keeps them to pair them across runs: compact.

    What the sections read is kept as it was; equal strings and numbers are one object (``shared``,
    handed along from run to run: the same tasks, models and specs recur in every run), and a score
    keeps only its ``components`` that the sections read (the suites' summary columns), so the
    scores of most episodes are one object too. A stored row parsed whole holds about 1.9 KB, one
    held here about 400 bytes: ten runs of 20,000 episodes are held in about 80 MB, not 390.
    """
    shared = SharedValues() if shared is None else shared
    text = shared.strings.setdefault
    numbers = shared.numbers.setdefault
    scores = shared.scores.setdefault

    def number(value: Any) -> Any:
        return None if value is None else numbers((type(value), value), value)

    held = []
    for row in rows:
        score = _pruned_score(row.score, components)
        if score is not None and score is not row.score:
            found = score["components"]
            key = tuple((name, type(value), value) for name, value in found.items())
            with contextlib.suppress(TypeError):  # an unhashable component value: the score stays its own
                score = scores(key, score)
        stop_rule = row.stop_rule
        label = row.label
        held.append(
            EpisodeRow(
                text(row.run_id, row.run_id),
                row.episode_id,
                text(row.model, row.model),
                text(row.faults, row.faults),
                text(row.variant, row.variant),
                text(row.task_id, row.task_id),
                row.trial,
                text(row.termination, row.termination),
                None if label is None else text(label, label),
                number(row.value),
                score,
                row.trace,
                number(row.input_tokens),
                number(row.output_tokens),
                number(row.cost_usd),
                text(row.architecture, row.architecture),
                None if stop_rule is None else text(stop_rule, stop_rule),
            )
        )
    return held


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


def comparable_trials(
    runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]],
) -> tuple[list[tuple[RunRow, Sequence[EpisodeRow]]], str | None]:
    """The runs as rates may compare them, and why they were cut (None: as stored).

    When any run's trials learn (`LEARNING_ARCHITECTURES`) and the runs played different numbers of
    trials, every run is cut to the trials all of them played: a rate over trials 1..6 of a learner
    is not comparable with one over trials 1..2.
    """
    counts = {run.id: max((r.trial for r in rows), default=-1) + 1 for run, rows in runs}
    learning = sorted({r.architecture for _, rows in runs for r in rows} & LEARNING_ARCHITECTURES)
    if not learning or len(set(counts.values())) < 2:
        return list(runs), None
    common = min(counts.values())
    cut: list[tuple[RunRow, Sequence[EpisodeRow]]] = [
        (run, [r for r in rows if r.trial < common]) for run, rows in runs
    ]
    played = ", ".join(f"{run_id}: {n}" for run_id, n in counts.items())
    note = (
        f"Trials learn under {', '.join(learning)} and these runs played different numbers of trials "
        f"({played}): rates side by side are over the trials all of them played (1..{common}), so that "
        "a later, better trial never counts on one side only."
    )
    return cut, note


def side_by_side_section(
    runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]], find_suite: SuiteFinder = no_suite
) -> ReportSection:
    """Full-success rate (95% interval, clustered by task) of every cell in every run, table and bars.

    A run's groups carry its suite's own columns in the JSON (e.g. ResiliBench's bounds).
    """
    runs, trials_note = comparable_trials(runs)
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
                "Full-success rate of each (model, faults, variant) cell in each run, with its 95% interval "
                f"({RATE_METHOD}) and the number of scored episodes; infrastructure errors are left out of "
                "the denominators. – : the run has no episode in that cell."
                + ("" if trials_note is None else " " + trials_note)
            ),
            TableBlock(
                "Full success % (95% CI) per run",
                ("model", "faults", "variant", *(f"{run.id}" for run, _ in runs)),
                tuple(table_rows),
            ),
            ChartBlock("full success per run", chart),
        ),
        data={"cells": data, "ci_method": RATE_METHOD, "trials_note": trials_note},
    )


def _cells(rows: Sequence[EpisodeRow]) -> dict[str, dict[tuple[str, str], list[EpisodeRow]]]:
    """Model → (faults, variant) → its episodes."""
    out: dict[str, dict[tuple[str, str], list[EpisodeRow]]] = {}
    for row in rows:
        out.setdefault(row.model, {}).setdefault((row.faults, row.variant), []).append(row)
    return out


def _arms(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str]]:
    """Model pairs to compare between two runs: the same model when they share any, else every pair."""
    shared = sorted(set(a) & set(b))
    return [(m, m) for m in shared] if shared else [(x, y) for x in sorted(a) for y in sorted(b)]


def _why_no_pairs(
    a: dict[tuple[str, str], list[EpisodeRow]], b: dict[tuple[str, str], list[EpisodeRow]]
) -> str:
    """Why two sides share no (task, trial, faults, variant): other fault specs, or no task at all."""
    tasks_a = {(r.task_id, r.trial, r.variant) for rows in a.values() for r in rows}
    tasks_b = {(r.task_id, r.trial, r.variant) for rows in b.values() for r in rows}
    if tasks_a & tasks_b:
        specs_a = sorted({faults for faults, _ in a})
        specs_b = sorted({faults for faults, _ in b})
        return (
            f"same tasks and trials under other fault specs ({', '.join(specs_a)} vs {', '.join(specs_b)}): "
            "their paired difference is in Degradation"
        )
    return "no task and trial in common"


def paired_runs_section(runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]]) -> ReportSection:
    """Every two runs on each (faults, variant) cell both played, paired by task and trial, with floors."""
    cells = [_cells(rows) for _, rows in runs]
    data = []
    table_rows: list[tuple[str, ...]] = []
    unpaired = []
    sentences = []
    for (i, (run_a, _)), (j, (run_b, _)) in itertools.combinations(enumerate(runs), 2):
        same_draws = run_a.seed == run_b.seed
        for model_a, model_b in _arms(cells[i], cells[j]):
            a, b = cells[i][model_a], cells[j][model_b]
            entry: dict[str, Any] = {
                "run_a": run_a.id,
                "model_a": model_a,
                "run_b": run_b.id,
                "model_b": model_b,
                "same_seed": same_draws,
            }
            found = False
            for cell in sorted(set(a) & set(b)):
                pairs = paired_rows(a[cell], b[cell])
                if not pairs:
                    continue
                found = True
                comparison = compare(pairs)
                data.append({**entry, "faults": cell[0], "variant": cell[1], **comparison.to_dict()})
                prefix = (run_a.id, model_a, run_b.id, model_b, *cell, "yes" if same_draws else "no")
                table_rows.extend(comparison_rows(prefix, comparison))
                sentences.append(
                    f"{', '.join(cell)}: "
                    + describe(
                        f"{model_a} ({run_a.id})",
                        f"{model_b} ({run_b.id})",
                        METRIC_BY_NAME["full"],
                        comparison.differences["full"],
                    )
                )
            if not found:
                why = _why_no_pairs(a, b)
                data.append({**entry, "pairs": 0, "note": why})
                unpaired.append(f"{run_a.id} {model_a} and {run_b.id} {model_b}: {why}")
    blocks: list[NoteBlock | TableBlock] = [
        NoteBlock(
            "Each pair of runs on the (faults, variant) cells both played, the same model on both sides "
            "when the runs share models (else every model pair). With the same seed both sides met the "
            "same fault draws; with different seeds only the tasks match, and the fault-draw part of the "
            "variance is not shared. " + NOISE_NOTE
        ),
        TableBlock(
            "Paired across runs: differences and the noise floor",
            ("run A", "model A", "run B", "model B", "faults", "variant", "same seed", *COMPARISON_COLUMNS),
            tuple(table_rows),
        ),
    ]
    if unpaired:
        blocks.append(NoteBlock("Not paired: " + "; ".join(unpaired) + "."))
    return ReportSection(
        id="paired-runs",
        title="Paired comparison across runs",
        blocks=tuple(blocks),
        data={"pairs": data, "method": PAIRED_METHOD, "summary": sentences},
    )


def cost_by_run_section(runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]]) -> ReportSection:
    """Tokens, cost and infrastructure errors per run and model."""
    data = []
    table_rows = []
    for run, rows in runs:
        models = sorted({r.model for r in rows})
        for model in models:
            members = [r for r in rows if r.model == model]
            infra = episode_rate(members, lambda r: r.label is None)
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
    runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]],
    find_suite: SuiteFinder = no_suite,
    baseline: str | None = None,
    *,
    traced: Sequence[Sequence[EpisodeRow]] | None = None,
    observer: TraceObserver | None = None,
) -> Report:
    """The comparison report of two or more runs (with their stored episodes).

    ``find_suite`` finds each run's suite by name (handed down by the caller; generic sections only
    without it); ``baseline`` is the fault spec degradation is measured from, when the runs' episodes
    have two specs or more; ``traced``: each run's rows with their traces, when ``runs`` come without;
    ``observer``: sees each trace in the workflow metrics' pass (as for `load_report`), runs in order.
    """
    with_traces = [rows for _, rows in runs] if traced is None else list(traced)
    sections = comparison_sections(runs, find_suite, baseline)
    return _with_traces([run for run, _ in runs], sections, with_traces, find_suite, observer)


def comparison_sections(
    runs: Sequence[tuple[RunRow, Sequence[EpisodeRow]]],
    find_suite: SuiteFinder = no_suite,
    baseline: str | None = None,
) -> list[ReportSection]:
    """The sections of the comparison of ``runs`` (with their episodes), as `build_comparison` orders them."""
    sections = [
        runs_section(runs),
        side_by_side_section(runs, find_suite),
        paired_runs_section(runs),
        cost_by_run_section(runs),
    ]
    comparable = comparable_trials(runs)[0]
    degraded = degradation_from_runs(comparable, baseline)
    if degraded is not None:
        sections.insert(3, degradation_section(degraded))
    curves = robustness(pooled_rows(comparable)[0])
    if curves is not None:
        sections.insert(3, robustness_section(curves))
    return sections


def _with_traces(
    runs: Sequence[RunRow],
    sections: Sequence[ReportSection],
    traced: Sequence[Sequence[EpisodeRow]],
    find_suite: SuiteFinder,
    observer: TraceObserver | None,
) -> Report:
    """The report of ``runs`` with its ``sections``, after the one pass over each run's ``traced`` rows."""
    workflow: dict[str, dict[str, float | int | None]] = {}
    for run, rows in zip(runs, traced, strict=True):
        workflow.update(workflow_scores(rows, find_suite(run.suite), observer))
    return Report(
        runs=tuple(runs),
        sections=tuple(sections),
        rows=RowsOfRuns(traced),
        workflow=workflow,
        observer=observer,
    )
