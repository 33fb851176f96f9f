"""Assemble a run's report from the store: generic sections, the suite's own sections, episodes.

Generic sections (every suite): outcomes per (model, faults, variant) with 95% Wilson intervals;
workflow metrics (executed tool sequence against the golden DAG) per model with 95% intervals;
paired comparisons of models over the same (task, trial, faults, variant) cells; cost and
infrastructure errors. Then whatever ``Suite.report_sections`` returns. Reads only.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, overload

from mcp_resili.errors import UserError
from mcp_resili.fastjson import loads
from mcp_resili.report.clustered import PAIRED_METHOD, RATE_METHOD, clustered_mean_interval
from mcp_resili.report.coping import coping_section
from mcp_resili.report.degradation import degradation, degradation_section
from mcp_resili.report.model_coping import model_coping_section
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
from mcp_resili.report.summary import (
    LEVELS,
    ComponentColumn,
    column_value,
    episode_rate,
    shown_columns,
    summarize,
)
from mcp_resili.report.svg import Bar, bar_chart, stacked_levels
from mcp_resili.scoring.passk import LEARNING_ARCHITECTURES
from mcp_resili.store import EpisodeRow, RunRow, Store, StoredRows
from mcp_resili.tasks.model import Task
from mcp_resili.trace import Trace, TraceError, trace_lines
from mcp_resili.workflow import METRIC_BOUNDS, METRICS, PerturbationError, episode_workflow_scores


class ReportedSuite(Protocol):
    """What a report needs of a run's suite (a `mcp_resili.registry.suites.Suite` is one), handed down."""

    @property
    def name(self) -> str:
        """The suite's name."""

    @property
    def summary_columns(self) -> tuple[ComponentColumn, ...]:
        """Score components shown as extra outcome columns."""

    @property
    def report_sections(self) -> Callable[[Sequence[EpisodeRow]], Sequence[ReportSection]] | None:
        """The suite's own sections."""

    def task(self, task_id: str) -> Task:
        """The task ``task_id``; a `KeyError` for one the suite does not have."""

    def task_info(self, task_id: str) -> dict[str, str]:
        """The breakdown keys of a task (type, complexity); empty for an unknown id."""


#: Finds the suite of a stored run by name, None when this installation does not know it.
SuiteFinder = Callable[[str], ReportedSuite | None]


def no_suite(name: str) -> None:
    """A `SuiteFinder` that knows no suite: generic sections only."""
    return None


class ReportError(UserError):
    """A report that cannot be made (no database, unknown run); the message says what exists."""


@dataclass(frozen=True)
class Report:
    """Everything the renderers need: the run (or the runs compared), sections and the episodes.

    ``rows`` are the episodes as stored (traces included) for the HTML writer to turn into browser
    chunks one at a time: a report loaded from a store reads them from it when gone through
    (`StoredRows`), so no report holds a run's traces; ``workflow`` holds each scored episode's
    workflow metrics.
    """

    runs: tuple[RunRow, ...]
    sections: tuple[ReportSection, ...]
    rows: Sequence[EpisodeRow] = ()
    workflow: Mapping[str, Mapping[str, float | int | None]] = field(default_factory=dict)
    #: What saw every episode's trace in the report's one pass over them (the HTML writer's spooled
    #: episode details, `mcp_resili.report.episodes.DetailSpool`), when one was handed to the build.
    observer: TraceObserver | None = None

    @property
    def run(self) -> RunRow:
        """The (first) run."""
        return self.runs[0]

    @property
    def episodes(self) -> int:
        """How many episodes the report covers."""
        return len(self.rows)

    @property
    def comparison(self) -> bool:
        """True when the report compares several runs."""
        return len(self.runs) > 1

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the run(s) and every section's data (episodes' events are left to the HTML).

        ``degradation`` (two fault specs or more) and ``robustness`` (two rungs of a fault ladder or
        more), the sections' data, are also at the top.
        """
        sections = {s.id: s.data for s in self.sections}
        top: dict[str, Any] = {key: sections[key] for key in ("degradation", "robustness") if key in sections}
        if self.comparison:
            return {
                "runs": [
                    {"run_id": r.id, "suite": r.suite, "seed": r.seed, "created_at": r.created_at}
                    for r in self.runs
                ],
                "episodes": self.episodes,
                **top,
                "sections": sections,
            }
        return {
            "run_id": self.run.id,
            "suite": self.run.suite,
            "seed": self.run.seed,
            "created_at": self.run.created_at,
            "episodes": self.episodes,
            "groups": next(s.data["groups"] for s in self.sections if s.id == "outcomes"),
            **top,
            "sections": sections,
        }


def open_store(db: Path) -> Store:
    """The store at ``db``, read only; a missing file is an error (a report never creates a database)."""
    if not db.exists():
        raise ReportError(f"no results database at {db}; run `mcp-resili run --db {db}` first")
    return Store(db, read_only=True)


def load_runs(db: Path, run_ids: Sequence[str | None]) -> list[tuple[RunRow, list[EpisodeRow]]]:
    """Each run (``None``: the latest) with its stored episodes; an unknown run lists the recent ones."""
    store = open_store(db)
    try:
        runs = [store.require_run(run_id) for run_id in run_ids]
        return [(run, store.episodes(run.id)) for run in runs]
    finally:
        store.close()


class RowsOfRuns(Sequence[EpisodeRow]):
    """Several runs' rows one after the other, as one sequence (each run's read when gone through)."""

    def __init__(self, parts: Sequence[Sequence[EpisodeRow]]) -> None:
        self.parts = tuple(parts)

    def __iter__(self) -> Iterator[EpisodeRow]:
        return itertools.chain.from_iterable(self.parts)

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    @overload
    def __getitem__(self, index: int) -> EpisodeRow: ...

    @overload
    def __getitem__(self, index: slice) -> list[EpisodeRow]: ...

    def __getitem__(self, index: int | slice) -> EpisodeRow | list[EpisodeRow]:
        if isinstance(index, slice):
            return list(self)[index]
        position = index + len(self) if index < 0 else index
        for part in self.parts:
            if 0 <= position < len(part):
                return part[position]
            position -= len(part)
        raise IndexError(index)


def stored_runs(db: Path, run_ids: Sequence[str | None]) -> list[RunRow]:
    """Each run (``None``: the latest) of ``db``; an unknown run lists the recent ones."""
    store = open_store(db)
    try:
        return [store.require_run(run_id) for run_id in run_ids]
    finally:
        store.close()


#: Episodes of a run whose rows (without traces) a report keeps in memory after its first pass, so
#: that its dozen summaries do not each read the store again: about 2.5 KB each (50 MB at 20,000);
#: a bigger run is read at every pass, and its memory does not grow with it.
HELD_ROWS = 25_000


def load_report(
    db: Path,
    run_id: str | None = None,
    by: Sequence[str] = (),
    find_suite: SuiteFinder = no_suite,
    baseline: str | None = None,
    observer: TraceObserver | None = None,
) -> Report:
    """The report of ``run_id`` (default: the latest run) in the database ``db``.

    ``by``: extra breakdown keys of the outcome table (`mcp_resili.report.summary.BREAKDOWN_KEYS`);
    ``find_suite``: the run's suite by name, for its own sections (``mcp_resili.find_suite``);
    ``baseline``: the fault spec degradation is measured from (default: see
    `mcp_resili.report.degradation`); ``observer``: sees each trace in the workflow metrics' pass
    (`workflow_scores`), e.g. the HTML writer's `mcp_resili.report.episodes.DetailSpool`.
    """
    (run,) = stored_runs(db, [run_id])
    # Streamed from the store: the summaries go through the rows without traces, a dozen times (held
    # after the first up to `HELD_ROWS`); the workflow metrics and the episode browser through the
    # traces once, together. No trace is held.
    rows = StoredRows(db, run.id, hold=HELD_ROWS)
    return build_report(
        run,
        rows,
        by,
        find_suite(run.suite),
        baseline,
        traced=StoredRows(db, run.id, traces=True),
        observer=observer,
    )


def _trace(row: EpisodeRow) -> Trace | None:
    try:
        return Trace.from_lines(trace_lines(row.trace), origin=f"episode {row.episode_id}")
    except TraceError:
        return None


#: A trace's lines after its header, each stripped, with its JSON value (None: not JSON).
ParsedLines = Sequence[tuple[str, Any]]


class TraceObserver(Protocol):
    """Sees each episode's trace, parsed once, in the pass that computes the workflow metrics."""

    def __call__(
        self, row: EpisodeRow, workflow: Mapping[str, float | int | None] | None, lines: ParsedLines
    ) -> None:
        """One row, its workflow metrics (None: unscored) and its trace's lines (`parse_trace`)."""


def parse_trace(trace: str) -> tuple[tuple[str, ...], list[tuple[str, Any]]]:
    """A stored trace read once: the tools of its successful calls in order, and its parsed lines.

    The lines are those after the header, stripped, blank ones left out, each with its JSON value
    (None when it is not JSON); the tools are what `_executed_tools` finds.
    """
    lines = trace_lines(trace)
    tools = list(_executed_tools(lines[0])) if lines and '"tool_call"' in lines[0] else []
    parsed: list[tuple[str, Any]] = []
    for line in lines[1:]:
        line = line.strip()
        if not line:
            continue
        try:
            event = loads(line)
        except json.JSONDecodeError:
            event = None
        parsed.append((line, event))
        if (
            '"tool_call"' in line
            and isinstance(event, dict)
            and event.get("event") == "tool_call"
            and not event.get("is_error")
        ):
            tools.append(str(event.get("tool")))
    return tuple(tools), parsed


def _cell(row: EpisodeRow) -> str:
    return f"{row.model} · {row.faults} · {row.variant}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def outcomes_section(
    rows: Sequence[EpisodeRow],
    by: Sequence[str] = (),
    task_info: Callable[[str], Mapping[str, str]] | None = None,
    columns: Sequence[ComponentColumn] = (),
) -> ReportSection:
    """Levels per (model, faults, variant, *by) with 95% Wilson intervals; infrastructure errors apart.

    The suite's own ``columns`` (e.g. ResiliBench's bounds) are shown when the scores carry them.
    """
    groups = summarize(rows, by, task_info, columns)
    shown = shown_columns(groups, columns)
    table = TableBlock(
        "Outcome levels (infrastructure errors excluded from denominators)",
        (
            "model",
            "architecture",
            "faults",
            "variant",
            *by,
            "episodes",
            *(f"{lv} % (95% CI)" for lv in LEVELS),
            *(column.title for column in shown),
            "infra errors",
        ),
        tuple(
            (
                g.model,
                g.architecture,
                g.faults,
                g.variant,
                *(g.breakdown[k] for k in by),
                str(g.episodes),
                *(rate_cell(g.levels[lv].to_dict()) for lv in LEVELS),
                *(_pct(column_value(g, column)) for column in shown),
                str(g.infrastructure_errors),
            )
            for g in groups
        ),
    )
    labels = [
        " · ".join((g.model, g.architecture, g.faults, g.variant, *g.breakdown.values())) for g in groups
    ]
    bars = bar_chart(
        "Full success rate with 95% interval",
        [bar for name, g in zip(labels, groups, strict=True) if (bar := g.levels["full"].bar(name))],
        axis_title="full-success rate (% of scored episodes)",
    )
    stacked = stacked_levels(
        "Outcome levels",
        [
            (name, {lv: g.levels[lv].count / g.scored for lv in LEVELS})
            for name, g in zip(labels, groups, strict=True)
            if g.scored  # a group of infrastructure errors only has no levels to stack
        ],
    )
    notes = [
        f"Intervals: 95%, {RATE_METHOD}: the trials of a task are correlated, so tasks, not episodes, "
        "are the independent units."
    ]
    learning = sorted({g.architecture for g in groups} & LEARNING_ARCHITECTURES)
    if learning:
        trials = max((r.trial for r in rows), default=-1) + 1
        notes.append(
            f"Under {', '.join(learning)} a task's trials learn from earlier ones: its rates are over "
            f"trials 1..{trials} and would differ at another --trials (compare runs trial by trial)."
        )
    return ReportSection(
        id="outcomes",
        title="Outcomes",
        blocks=(
            NoteBlock(" ".join(notes)),
            table,
            ChartBlock("full success", bars),
            ChartBlock("levels", stacked),
        ),
        data={"by": list(by), "groups": [g.to_dict() for g in groups], "ci_method": RATE_METHOD},
    )


def workflow_scores(
    rows: Sequence[EpisodeRow], suite: ReportedSuite | None, observer: TraceObserver | None = None
) -> dict[str, dict[str, float | int | None]]:
    """Episode id → workflow metrics of its executed tool sequence against the task's golden DAG.

    ``observer`` sees every row (scored or not) with its workflow metrics and its trace's lines,
    parsed in this same pass (`parse_trace`): one pass over the traces serves both.
    """
    out: dict[str, dict[str, float | int | None]] = {}
    if suite is None and observer is None:
        return out
    # The metrics depend only on the task and the executed tool names in order, and most episodes of a
    # big run repeat a sequence already seen (an oracle always runs the golden one): compute each
    # (task, sequence) once. 20,000 episodes take seconds instead of a minute.
    seen: dict[tuple[str, tuple[str, ...]], dict[str, float | int | None] | None] = {}
    # Many tasks share their golden workflows' shape (step ids, tools, edges: all the metrics see of
    # a task): each (shape, sequence) is evaluated once across tasks too.
    by_shape: dict[tuple[object, tuple[str, ...]], dict[str, float | int | None] | None] = {}
    for row in rows:
        tools, lines = parse_trace(row.trace) if observer is not None else (None, ())
        # Infrastructure errors say nothing about the agent's workflow.
        if suite is not None and row.label is not None:
            key = (row.task_id, _executed_tools(row.trace) if tools is None else tools)
            if key not in seen:
                seen[key] = _workflow_of(row, suite, key[1], by_shape)
            if (scores := seen[key]) is not None:
                out[row.episode_id] = scores
        if observer is not None:
            observer(row, out.get(row.episode_id), lines)
    return out


def _executed_tools(trace: str | list[str]) -> tuple[str, ...]:
    """The tools of the successful calls of a stored trace (or its lines), in order, unvalidated."""
    tools = []
    for line in trace_lines(trace) if isinstance(trace, str) else trace:
        if '"tool_call"' in line:
            try:
                event = loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == "tool_call" and not event.get("is_error"):
                tools.append(str(event.get("tool")))
    return tuple(tools)


def _workflow_of(
    row: EpisodeRow,
    suite: ReportedSuite,
    tools: tuple[str, ...],
    by_shape: dict[tuple[object, tuple[str, ...]], dict[str, float | int | None] | None],
) -> dict[str, float | int | None] | None:
    trace = _trace(row)
    if trace is None:
        return None
    try:
        task = suite.task(row.task_id)
        shape = (
            tuple(
                (tuple((step.id, step.tool) for step in golden.steps), golden.edges)
                for golden in task.golden_workflows()
            ),
            tools,
        )
        if shape not in by_shape:
            by_shape[shape] = episode_workflow_scores(task, trace).to_dict()
        return by_shape[shape]
    except (KeyError, PerturbationError, ValueError):
        return None


def workflow_section(
    rows: Sequence[EpisodeRow], scores: dict[str, dict[str, float | int | None]]
) -> ReportSection:
    """Mean workflow metrics per (model, faults, variant) with 95% intervals."""
    groups: dict[str, list[tuple[str, dict[str, float | int | None]]]] = {}
    for row in rows:
        if row.episode_id in scores:
            groups.setdefault(_cell(row), []).append((row.task_id, scores[row.episode_id]))
    data: dict[str, Any] = {}
    table_rows = []
    bars = []
    for cell, members in sorted(groups.items()):
        entry: dict[str, Any] = {"episodes": len(members)}
        cells = []
        for metric in METRICS:
            # τ is undefined for an episode with fewer than two aligned steps: left out, and counted.
            defined = [(task, float(v)) for task, m in members if (v := m[metric]) is not None]
            interval = clustered_mean_interval(defined, METRIC_BOUNDS[metric])
            if interval is None:
                entry[metric] = {"mean": None, "ci95": None, "n": 0}
                cells.append("–")
                continue
            mean, low, high, _ = interval
            entry[metric] = {
                "mean": round(mean, 4),
                "ci95": [round(low, 4), round(high, 4)],
                "n": len(defined),
            }
            note = "" if len(defined) == len(members) else f" n={len(defined)}"
            cells.append(f"{mean:.3f} ({low:.2f}–{high:.2f}){note}")
            if metric == "chain_f1":
                bars.append(Bar(cell, mean, low, high))
        entry["ci_method"] = RATE_METHOD
        data[cell] = entry
        table_rows.append((cell, str(len(members)), *cells))
    blocks: tuple[Any, ...] = (
        NoteBlock(
            "Each scored episode's successful tool calls, in order, against the task's golden DAG "
            "(exact tool identity). Chain F1 uses the best topological order; Graph F1 WorFBench's "
            "largest connected component; intervals are 95% Wilson intervals of the mean at the "
            "effective sample size, clustered by task (Kendall's τ rescaled from [-1, 1]; an episode "
            "with fewer than two aligned steps has no τ and is left out of its mean, n= says how many "
            "have one when not all do)."
        ),
        TableBlock("Mean per cell (95% CI)", ("cell", "episodes", *METRICS), tuple(table_rows)),
    )
    if bars:
        blocks = (
            *blocks,
            ChartBlock(
                "chain f1",
                bar_chart(
                    "Chain F1 per cell (mean, 95% interval)", bars, "#009E73", "Chain F1", percent=False
                ),
            ),
        )
    return ReportSection(
        id="workflow", title="Workflow metrics", blocks=blocks, data={"cells": data, "episodes": scores}
    )


def paired_section(rows: Sequence[EpisodeRow]) -> ReportSection:
    """Every two models on one (faults, variant) cell, paired by task and trial, with noise floors."""
    cells: dict[tuple[str, str], dict[str, list[EpisodeRow]]] = {}
    for row in rows:
        cells.setdefault((row.faults, row.variant), {}).setdefault(row.model, []).append(row)
    data = []
    table_rows: list[tuple[str, ...]] = []
    count_rows = []
    sentences = []
    for (faults, variant), models in sorted(cells.items()):
        for a, b in itertools.combinations(sorted(models), 2):
            pairs = paired_rows(models[a], models[b])
            if not pairs:
                continue
            comparison = compare(pairs)
            data.append(
                {"model_a": a, "model_b": b, "faults": faults, "variant": variant, **comparison.to_dict()}
            )
            table_rows.extend(comparison_rows((a, b, faults, variant), comparison))
            full = comparison.differences["full"]
            sentences.append(f"{faults}, {variant}: {describe(a, b, METRIC_BY_NAME['full'], full)}")
            test = comparison.counts
            count_rows.append(
                (
                    a,
                    b,
                    faults,
                    variant,
                    str(comparison.pairs),
                    str(test.both),
                    str(test.only_a),
                    str(test.only_b),
                    str(test.neither),
                )
            )
    return ReportSection(
        id="paired",
        title="Paired comparison",
        blocks=(
            NoteBlock(
                "Models compared on the same (faults, variant) cell, so the same fault draws. " + NOISE_NOTE
            ),
            TableBlock(
                "Paired differences and the noise floor",
                ("model A", "model B", "faults", "variant", *COMPARISON_COLUMNS),
                tuple(table_rows),
            ),
            TableBlock(
                "Full success, paired counts",
                ("model A", "model B", "faults", "variant", "pairs", "both", "only A", "only B", "neither"),
                tuple(count_rows),
            ),
        ),
        data={"pairs": data, "method": PAIRED_METHOD, "summary": sentences},
    )


def cost_section(rows: Sequence[EpisodeRow]) -> ReportSection:
    """Tokens, terminations and infrastructure-error rates per model."""
    by_model: dict[str, list[EpisodeRow]] = {}
    for row in rows:
        by_model.setdefault(row.model, []).append(row)
    data = {}
    table_rows = []
    bars = []
    for model, members in sorted(by_model.items()):
        infra = episode_rate(members, lambda r: r.label is None)
        inputs = sum(r.input_tokens for r in members)
        outputs = sum(r.output_tokens for r in members)
        terminations = Counter(r.termination for r in members)
        priced = [r.cost_usd for r in members if r.cost_usd is not None]
        cost = sum(priced) if priced else None
        data[model] = {
            "episodes": len(members),
            "input_tokens": inputs,
            "output_tokens": outputs,
            "tokens_per_episode": round((inputs + outputs) / len(members), 1),
            "cost_usd": None if cost is None else round(cost, 6),
            "infrastructure_errors": infra.to_dict(),
            "terminations": dict(sorted(terminations.items())),
        }
        table_rows.append(
            (
                model,
                str(len(members)),
                str(inputs),
                str(outputs),
                f"{(inputs + outputs) / len(members):.0f}",
                "n/a" if cost is None else f"{cost:.4f}",
                rate_cell(infra.to_dict()),
                ", ".join(f"{k} {v}" for k, v in sorted(terminations.items())),
            )
        )
        if (bar := infra.bar(model)) is not None:
            bars.append(bar)
    return ReportSection(
        id="cost",
        title="Cost and infrastructure errors",
        blocks=(
            TableBlock(
                "Per model",
                (
                    "model",
                    "episodes",
                    "input tokens",
                    "output tokens",
                    "tokens/episode",
                    "cost $",
                    "infra errors % (95% CI)",
                    "terminations",
                ),
                tuple(table_rows),
            ),
            ChartBlock(
                "infra",
                bar_chart(
                    "Infrastructure-error rate (95% interval)",
                    bars,
                    "#D55E00",
                    "infrastructure errors (% of episodes)",
                ),
            ),
        ),
        data=data,
    )


def damaged_scores(suite: str, exc: Exception) -> ReportError:
    """The one-line error for stored scores a suite's summary cannot read (edited, or foreign)."""
    return ReportError(
        f"the {suite} scores of this run cannot be summarised ({type(exc).__name__}: {exc}): "
        "were they edited or written by another version, or is the suite's report hook broken?"
    )


def build_report(
    run: RunRow,
    rows: Sequence[EpisodeRow],
    by: Sequence[str] = (),
    suite: ReportedSuite | None = None,
    baseline: str | None = None,
    *,
    traced: Sequence[EpisodeRow] | None = None,
    observer: TraceObserver | None = None,
) -> Report:
    """All sections of one run: the outcome table, degradation, the suite's sections, the generic ones.

    ``suite``: the run's suite, handed down (None: generic sections only); ``baseline``: the fault spec
    degradation is measured from (a run with two fault specs or more); ``traced``: the same rows with
    their traces, when ``rows`` come without (a store's `StoredRows`); ``observer``: see `load_report`.
    """
    scores = workflow_scores(rows if traced is None else traced, suite, observer)
    try:
        outcomes = outcomes_section(
            rows,
            by,
            suite.task_info if suite is not None else None,
            suite.summary_columns if suite is not None else (),
        )
    except ValueError as exc:  # an unknown breakdown key
        raise ReportError(str(exc)) from None
    sections = [
        outcomes,
        workflow_section(rows, scores),
        paired_section(rows),
        cost_section(rows),
    ]
    if suite is not None and suite.report_sections is not None:
        try:
            sections[1:1] = suite.report_sections(rows)
        except Exception as exc:  # a suite's hook (possibly a third party's) met scores it cannot read
            raise damaged_scores(suite.name, exc) from None
    coping = coping_section(rows)
    if coping is not None:
        sections.insert(1, coping)
    model_coping = model_coping_section(rows)  # beside the protocol one: model-API faults
    if model_coping is not None:
        sections.insert(2 if coping is not None else 1, model_coping)
    degraded = degradation(rows, baseline)
    if degraded is not None:
        sections.insert(1, degradation_section(degraded))
    curves = robustness(rows)
    if curves is not None:
        sections.insert(1, robustness_section(curves))
    return Report(
        runs=(run,),
        sections=tuple(sections),
        rows=tuple(rows) if traced is None else traced,
        workflow=scores,
        observer=observer,
    )
