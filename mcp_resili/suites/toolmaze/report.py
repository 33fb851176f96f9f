"""ToolMaze metrics of stored episodes: TSR, PRR, RC and the composite per model, mode and level."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from rich.table import Table

from mcp_resili.report.section import ChartBlock, NoteBlock, ReportSection, TableBlock, rate_cell
from mcp_resili.report.stats import mean_interval
from mcp_resili.report.summary import rate
from mcp_resili.report.svg import Bar, bar_chart, heatmap
from mcp_resili.scoring.model import Score
from mcp_resili.store import EpisodeRow
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


def report_sections(rows: Sequence[EpisodeRow]) -> list[ReportSection]:
    """ToolMaze's section of ``mcp-resili report``: TSR, PRR and RC by mode and level, with intervals.

    TSR and PRR are rates (95% Wilson intervals over trajectories, resp. perturbed ones), DUP the rate
    of trajectories with a write executed twice; RC and RC' (abort-aware) are means over trajectories
    of the recovery cost (0 when unperturbed), with a normal 95% interval.
    Charts: TSR by mode per model (all levels pooled) and one TSR heatmap mode × level per model.
    """
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        components = (row.score or {}).get("components", {})
        if row.score is None or "i_pert" not in components:
            continue
        mode, level = str(components["mode"]), str(components["level"])
        for key in ((mode, level), (mode, "all"), ("all", level)):
            groups[(row.model, row.variant, *key)].append(components)
    if not groups:
        return []
    data: list[dict[str, Any]] = []
    table_rows = []
    for (model, variant, mode, level), members in sorted(groups.items()):
        n = len(members)
        perturbed = [m for m in members if m["i_pert"]]
        tsr = rate(sum(1 for m in members if m["i_succ"]), n)
        prr = rate(sum(1 for m in perturbed if m["i_recov"]), len(perturbed)) if perturbed else None
        rc = mean_interval([float(m["c_rec"] or 0.0) if m["i_pert"] else 0.0 for m in members])
        rc_abort = mean_interval(
            [float(m.get("c_rec_abort", m["c_rec"]) or 0.0) if m["i_pert"] else 0.0 for m in members]
        )
        duplicates = rate(sum(1 for m in members if int(m.get("duplicate_writes") or 0) > 0), n)
        assert rc is not None and rc_abort is not None  # members is never empty
        entry: dict[str, Any] = {
            "model": model,
            "variant": variant,
            "mode": mode,
            "level": level,
            "n": n,
            "perturbed": len(perturbed),
            "tsr": tsr.to_dict(),
            "prr": None if prr is None else prr.to_dict(),
            "duplicates": duplicates.to_dict(),
            "rc": {"mean": round(rc[0], 4), "ci95": [round(rc[1], 4), round(rc[2], 4)]},
            "rc_abort": {
                "mean": round(rc_abort[0], 4),
                "ci95": [round(rc_abort[1], 4), round(rc_abort[2], 4)],
            },
        }
        data.append(entry)
        table_rows.append(
            (
                model,
                variant,
                mode,
                level,
                str(n),
                str(len(perturbed)),
                rate_cell(entry["tsr"]),
                "–" if prr is None else rate_cell(entry["prr"]),
                rate_cell(entry["duplicates"]),
                f"{100 * rc[0]:.1f} ({100 * rc[1]:.0f}–{100 * rc[2]:.0f})",
                f"{100 * rc_abort[0]:.1f} ({100 * rc_abort[1]:.0f}–{100 * rc_abort[2]:.0f})",
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
        cells = [
            e
            for e in data
            if (e["model"], e["variant"]) == (model, variant) and "all" not in (e["mode"], e["level"])
        ]
        modes = sorted({e["mode"] for e in cells})
        levels = sorted({e["level"] for e in cells})
        values = {(e["mode"], e["level"]): e["tsr"]["rate"] for e in cells}
        blocks.append(
            ChartBlock(
                f"tsr heatmap {model} {variant}",
                heatmap(f"{model} · {variant}: TSR", modes, levels, values, "mode", "level"),
            )
        )
    return [ReportSection(id="toolmaze", title="ToolMaze", blocks=tuple(blocks), data={"groups": data})]
