"""ToolMaze metrics of stored episodes: TSR, PRR, RC and the composite per model, mode and level."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from rich.table import Table

from mcp_resili.scoring.model import Score
from mcp_resili.scoring.toolmaze import aggregate
from mcp_resili.store import EpisodeRow


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
    table = Table(title="ToolMaze metrics (RC: lower is better)", title_justify="left")
    for name in (
        "model",
        "variant",
        "mode",
        "level",
        "n",
        "perturbed",
        "TSR %",
        "PRR %",
        "RC %",
        "composite %",
    ):
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
            f"{100 * m['rc']:.1f}",
            f"{100 * m['composite']:.1f}",
        )
    return table
