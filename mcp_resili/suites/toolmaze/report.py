"""ToolMaze metrics of stored episodes: TSR, PRR, RC and the composite per model, mode and level."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from mcp_resili.report.section import ChartBlock, NoteBlock, ReportSection, TableBlock
from mcp_resili.report.svg import Bar, bar_chart, heatmap
from mcp_resili.scoring.model import Score
from mcp_resili.scoring.passk import wilson
from mcp_resili.store import EpisodeRow
from mcp_resili.suites.toolmaze.faults import MODES
from mcp_resili.suites.toolmaze.scoring import aggregate

#: Columns of the metrics table, terminal and HTML alike (the terminal adds the composite).
METRIC_COLUMNS = (
    "model",
    "variant",
    "mode",
    "level",
    "n",
    "perturbed",
    "TSR %",
    "PRR %",
    "DUP %",
    "RC %",
    "RC' %",
)


def toolmaze_metrics(rows: Iterable[EpisodeRow]) -> list[dict[str, Any]]:
    """One entry per (model, variant, mode, level), levels and modes also pooled as ``all``.

    Infrastructure errors (no score) are left out of every denominator and never count as failures.
    """
    by_model: dict[tuple[str, str], list[Score]] = defaultdict(list)
    for row in rows:
        if row.score is not None and "i_pert" in row.score.get("components", {}):
            by_model[row.model, row.variant].append(Score.model_validate(row.score))
    return [
        {"model": model, "variant": variant, **m.to_dict()}
        for (model, variant), scores in sorted(by_model.items())
        for m in aggregate(scores)
    ]


def toolmaze_summary(rows: Sequence[EpisodeRow]) -> dict[str, Any] | None:
    """The suite summary hook: ``{"toolmaze": [metrics...]}``, or None without ToolMaze scores."""
    metrics = toolmaze_metrics(rows)
    return {"toolmaze": metrics} if metrics else None


def toolmaze_summary_table(summary: dict[str, Any]) -> Table:
    """The suite summary-table hook: `toolmaze_table` of `toolmaze_summary`'s result."""
    return toolmaze_table(summary["toolmaze"])


def toolmaze_table(metrics: Iterable[dict[str, Any]]) -> Table:
    """The metrics as a terminal table (percentages)."""
    table = Table(
        title="ToolMaze metrics (RC: lower is better; RC': abort-aware on unsolvable episodes; "
        "DUP: writes executed twice)",
        title_justify="left",
    )
    for name in (*METRIC_COLUMNS, "composite %"):
        table.add_column(name, justify="left" if name in ("model", "variant", "mode", "level") else "right")
    for m in metrics:
        prr = "-" if m["prr"] is None else f"{100 * m['prr']:.1f}"
        table.add_row(
            m["model"],
            m["variant"],
            m["mode"],
            m["level"],
            str(m["n"]),
            str(m["perturbed"]),
            f"{100 * m['tsr']:.1f}",
            prr,
            f"{100 * m.get('duplicates', 0.0):.1f}",
            f"{100 * m['rc']:.1f}",
            f"{100 * m.get('rc_abort', m['rc']):.1f}",
            f"{100 * m['composite']:.1f}",
        )
    return table


#: A mean and the sample size of its interval: (value, n).
Measured = tuple[float, int]


@dataclass(frozen=True)
class _Cell:
    """One row's raw measurements: each metric's value and the number of trajectories behind it."""

    n: int
    perturbed: int
    tsr: Measured
    prr: Measured | None
    duplicates: Measured
    rc: Measured
    rc_abort: Measured


def _pooled(members: Sequence[dict[str, Any]]) -> _Cell:
    """A mode's trajectories pooled (the paper's per-mode values)."""
    n = len(members)
    perturbed = [m for m in members if m["i_pert"]]

    def mean(values: Iterable[float]) -> float:
        return sum(values) / n

    return _Cell(
        n=n,
        perturbed=len(perturbed),
        tsr=(mean(float(bool(m["i_succ"])) for m in members), n),
        prr=(sum(1 for m in perturbed if m["i_recov"]) / len(perturbed), len(perturbed))
        if perturbed
        else None,
        duplicates=(mean(float(int(m.get("duplicate_writes") or 0) > 0) for m in members), n),
        rc=(mean(float(m["c_rec"] or 0.0) for m in perturbed), n),
        rc_abort=(mean(float(m.get("c_rec_abort", m["c_rec"]) or 0.0) for m in perturbed), n),
    )


def _averaged(cells: Sequence[_Cell]) -> _Cell:
    """The per-mode values averaged, every mode weighing the same (the paper's overall scores).

    The interval of an average of M means uses the effective sample size M² / Σ 1/n_m: the size of
    one sample whose mean would vary as much (exact when the modes have as many trajectories each).
    """

    def average(values: Sequence[Measured]) -> Measured:
        mean = sum(v for v, _ in values) / len(values)
        return (mean, max(1, round(len(values) ** 2 / sum(1 / n for _, n in values))))

    prrs = [c.prr for c in cells if c.prr is not None]
    return _Cell(
        n=sum(c.n for c in cells),
        perturbed=sum(c.perturbed for c in cells),
        tsr=average([c.tsr for c in cells]),
        prr=average(prrs) if prrs else None,
        duplicates=average([c.duplicates for c in cells]),
        rc=average([c.rc for c in cells]),
        rc_abort=average([c.rc_abort for c in cells]),
    )


def _interval(measured: Measured, key: str = "rate") -> dict[str, Any]:
    """``{key: value, "n": n, "ci95": [low, high]}`` (``rate`` for TSR, PRR, DUP; ``mean`` for RC)."""
    value, n = measured
    low, high = wilson(value, n)
    return {key: round(value, 4), "n": n, "ci95": [round(low, 4), round(high, 4)]}


def _percent(measured: dict[str, Any]) -> str:
    value = measured["rate"] if "rate" in measured else measured["mean"]
    low, high = measured["ci95"]
    return f"{100 * value:.1f} ({100 * low:.0f}–{100 * high:.0f})"


def report_sections(rows: Sequence[EpisodeRow]) -> list[ReportSection]:
    """ToolMaze's section of ``mcp-resili report``: TSR, PRR and RC by mode and level, with intervals.

    A mode's row pools its trajectories: TSR, PRR (over perturbed trajectories), DUP (trajectories with
    a write executed twice), RC and RC' (abort-aware; the recovery cost, 0 when unperturbed) are means
    over them. Rows of mode ``all`` average the per-mode values instead (`mean_over_modes`, the paper's
    overall scores). Every value has a 95% Wilson interval of the mean (`wilson`).
    Charts: TSR by mode per model (all levels pooled) and one TSR heatmap mode × level per model.
    """
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        components = (row.score or {}).get("components", {})
        if row.score is None or "i_pert" not in components:
            continue
        mode, level = str(components["mode"]), str(components["level"])
        for key in ((mode, level), (mode, "all")):
            groups[(row.model, row.variant, *key)].append(components)
    if not groups:
        return []
    cells = {key: _pooled(members) for key, members in groups.items()}
    for model, variant, level in {(model, variant, level) for model, variant, _, level in groups}:
        per_mode = [
            c
            for (mo, va, mode, lv), c in cells.items()
            if (mo, va, lv) == (model, variant, level) and mode in MODES  # the paper's modes only
        ]
        if per_mode:
            cells[model, variant, "all", level] = _averaged(per_mode)
    data: list[dict[str, Any]] = []
    table_rows = []
    for (model, variant, mode, level), cell in sorted(cells.items()):
        entry: dict[str, Any] = {
            "model": model,
            "variant": variant,
            "mode": mode,
            "level": level,
            "n": cell.n,
            "perturbed": cell.perturbed,
            "tsr": _interval(cell.tsr),
            "prr": None if cell.prr is None else _interval(cell.prr),
            "duplicates": _interval(cell.duplicates),
            "rc": _interval(cell.rc, "mean"),
            "rc_abort": _interval(cell.rc_abort, "mean"),
        }
        data.append(entry)
        table_rows.append(
            (
                model,
                variant,
                mode,
                level,
                str(cell.n),
                str(cell.perturbed),
                _percent(entry["tsr"]),
                "–" if entry["prr"] is None else _percent(entry["prr"]),
                _percent(entry["duplicates"]),
                _percent(entry["rc"]),
                _percent(entry["rc_abort"]),
            )
        )
    blocks: list[TableBlock | ChartBlock | NoteBlock] = [
        TableBlock(
            "TSR, PRR, DUP and RC by mode and level (95% CI; RC: lower is better; RC' abort-aware)",
            METRIC_COLUMNS,
            tuple(table_rows),
        )
    ]
    pooled = [e for e in data if e["level"] == "all" and e["mode"] != "all"]
    blocks.append(
        ChartBlock(
            "tsr by mode",
            bar_chart(
                "TSR by mode (all levels; 95% interval)",
                [
                    Bar(f"{e['model']} · {e['variant']} · {e['mode']}", e["tsr"]["rate"], *e["tsr"]["ci95"])
                    for e in pooled
                ],
            ),
        )
    )
    for model, variant in sorted({(e["model"], e["variant"]) for e in data}):
        grid = [
            e
            for e in data
            if (e["model"], e["variant"]) == (model, variant) and "all" not in (e["mode"], e["level"])
        ]
        modes = sorted({e["mode"] for e in grid})
        levels = sorted({e["level"] for e in grid})
        values = {(e["mode"], e["level"]): e["tsr"]["rate"] for e in grid}
        blocks.append(
            ChartBlock(
                f"tsr heatmap {model} {variant}",
                heatmap(f"{model} · {variant}: TSR", modes, levels, values, "mode", "level"),
            )
        )
    return [ReportSection(id="toolmaze", title="ToolMaze", blocks=tuple(blocks), data={"groups": data})]
