"""ToolMaze metrics of stored episodes: TSR, PRR, RC and the composite per model, mode and level."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from rich.table import Table

from mcp_resili.report.clustered import clustered_mean, wilson_score
from mcp_resili.report.section import ChartBlock, NoteBlock, ReportSection, TableBlock
from mcp_resili.report.svg import Bar, bar_chart, heatmap
from mcp_resili.scoring.model import Score
from mcp_resili.scoring.passk import Z95
from mcp_resili.store import EpisodeRow
from mcp_resili.suites.toolmaze.faults import MODES
from mcp_resili.suites.toolmaze.scoring import aggregate
from mcp_resili.tasks.order import natural_sorted

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


def _effective_n(sizes: Sequence[int]) -> int:
    """The sample size of an average of M means over n_m trajectories each: M² / Σ 1/n_m.

    One sample of that size has a mean that varies as much (exact when every n_m is the same).
    """
    return max(1, round(len(sizes) ** 2 / sum(1 / n for n in sizes)))


def _interval(value: float, n: int, key: str = "rate", share: float = 1.0) -> dict[str, Any]:
    """``{key: value, "n": n, "ci95": [low, high]}`` (``rate`` for TSR, PRR, DUP; ``mean`` for RC).

    ``share``: the effective sample size as a share of ``n`` (trajectories of one task are correlated,
    `_design_shares`); the Wilson interval is taken at ``n · share``.
    """
    low, high = wilson_score(value, n * share, Z95)
    return {key: round(value, 4), "n": n, "ci95": [round(low, 4), round(high, 4)]}


def _share(observations: list[tuple[str, float]]) -> float:
    """Effective sample size over observations, as a share of them (1 with none)."""
    estimate = clustered_mean(observations)
    return 1.0 if estimate is None else estimate.effective_n / estimate.n


def _design_shares(rows: Sequence[EpisodeRow]) -> dict[tuple[str, str, str, str], dict[str, float]]:
    """(model, variant, mode, level) → each metric's effective sample size as a share of its count.

    The trajectories of one task (its trials) are correlated: the intervals take tasks as the
    independent units (`mcp_resili.report.clustered`: the design effect from the task-clustered
    variance, corrected for the number of tasks). Rows pooled as ``all`` pool their trajectories here.
    """
    groups: dict[tuple[str, str, str, str], list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for row in rows:
        components = (row.score or {}).get("components", {})
        if "i_pert" not in components:
            continue
        mode, level = str(components["mode"]), str(components["level"])
        for m in (mode, "all") if mode in MODES else (mode,):
            for lv in (level, "all"):
                groups[row.model, row.variant, m, lv].append((row.task_id, components))
    out = {}
    for key, members in groups.items():
        perturbed = [(t, c) for t, c in members if c["i_pert"]]
        out[key] = {
            "tsr": _share([(t, float(bool(c["i_succ"]))) for t, c in members]),
            "prr": _share([(t, float(bool(c["i_recov"]))) for t, c in perturbed]),
            "duplicates": _share([(t, float(int(c.get("duplicate_writes") or 0) > 0)) for t, c in members]),
            "rc": _share([(t, float(c["c_rec"] or 0.0) if c["i_pert"] else 0.0) for t, c in members]),
            "rc_abort": _share(
                [
                    (t, float(c.get("c_rec_abort", c["c_rec"]) or 0.0) if c["i_pert"] else 0.0)
                    for t, c in members
                ]
            ),
        }
    return out


def _percent(measured: dict[str, Any]) -> str:
    value = measured["rate"] if "rate" in measured else measured["mean"]
    low, high = measured["ci95"]
    return f"{100 * value:.1f} ({100 * low:.0f}–{100 * high:.0f})"


def report_sections(rows: Sequence[EpisodeRow]) -> list[ReportSection]:
    """ToolMaze's section of ``mcp-resili report``: TSR, PRR and RC by mode and level, with intervals.

    The values are the suite summary's (`toolmaze_metrics`): a mode's rows pool its trajectories, rows
    of mode ``all`` average the per-mode values (the paper's overall scores). Every value has a 95%
    Wilson interval of the mean over its trajectories (PRR: the perturbed ones); an average of modes
    over the effective sample size (`_effective_n`); both at the effective size of the task clusters
    (`_design_shares`: a task's trials are correlated).
    Charts: TSR by mode per model (all levels pooled) and one TSR heatmap mode × level per model.
    """
    metrics = toolmaze_metrics(rows)
    if not metrics:
        return []
    modes_of: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for m in metrics:
        if m["mode"] in MODES:  # the modes a row of mode "all" averages
            modes_of[m["model"], m["variant"], m["level"]].append(m)
    data: list[dict[str, Any]] = []
    table_rows = []
    shares = _design_shares(rows)
    for m in metrics:
        n, n_perturbed = m["n"], m["perturbed"]
        if m["mode"] == "all":
            averaged = modes_of[m["model"], m["variant"], m["level"]]
            n = _effective_n([o["n"] for o in averaged])
            perturbed = [o["perturbed"] for o in averaged if o["prr"] is not None]
            n_perturbed = _effective_n(perturbed) if perturbed else 0
        model, variant, mode, level = m["model"], m["variant"], m["mode"], m["level"]
        share = shares.get((model, variant, mode, level), {})
        entry: dict[str, Any] = {
            "model": model,
            "variant": variant,
            "mode": mode,
            "level": level,
            "n": m["n"],
            "perturbed": m["perturbed"],
            "tsr": _interval(m["tsr"], n, share=share.get("tsr", 1.0)),
            "prr": None
            if m["prr"] is None
            else _interval(m["prr"], n_perturbed, share=share.get("prr", 1.0)),
            "duplicates": _interval(m["duplicates"], n, share=share.get("duplicates", 1.0)),
            "rc": _interval(m["rc"], n, "mean", share.get("rc", 1.0)),
            "rc_abort": _interval(m["rc_abort"], n, "mean", share.get("rc_abort", 1.0)),
        }
        data.append(entry)
        table_rows.append(
            (
                model,
                variant,
                mode,
                level,
                str(m["n"]),
                str(m["perturbed"]),
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
        modes = natural_sorted({e["mode"] for e in grid})
        levels = natural_sorted({e["level"] for e in grid})
        values = {(e["mode"], e["level"]): e["tsr"]["rate"] for e in grid}
        blocks.append(
            ChartBlock(
                f"tsr heatmap {model} {variant}",
                heatmap(f"{model} · {variant}: TSR", modes, levels, values, "mode", "level"),
            )
        )
    return [ReportSection(id="toolmaze", title="ToolMaze", blocks=tuple(blocks), data={"groups": data})]
