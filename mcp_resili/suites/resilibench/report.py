"""ResiliBench's report sections: levels by model × variant, task type, complexity and flaw type.

Task type and complexity come from the suite's task data; the flaw type and severity from a
``flawed:TYPE[:SEVERITY]`` variant (`mcp_resili.report.summary.variant_flaw`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from mcp_resili.report.section import ChartBlock, ReportSection, TableBlock, rate_cell
from mcp_resili.report.summary import LEVELS, rate_by_task, variant_flaw
from mcp_resili.report.svg import Bar, bar_chart, stacked_levels
from mcp_resili.store import EpisodeRow
from mcp_resili.tasks.order import natural_key


class TaskKind(Protocol):
    """What the sections need of a task (a `Task` is one; so is the suite's index entry)."""

    @property
    def task_type(self) -> str:
        """The task's type."""

    @property
    def complexity(self) -> str:
        """easy, medium or hard."""


def flaw_type(row: EpisodeRow) -> str | None:
    """``TYPE (SEVERITY)`` of the flaw an episode's prompt carried, or None for unflawed variants."""
    flaw, severity = variant_flaw(row.variant)
    return None if flaw == "none" else f"{flaw} ({severity})"


def _levels_by(
    rows: Sequence[EpisodeRow], key: Callable[[EpisodeRow], str | None]
) -> list[tuple[str, dict[str, object]]]:
    groups: dict[str, list[EpisodeRow]] = {}
    for row in rows:
        name = key(row)
        if name is not None:
            groups.setdefault(name, []).append(row)
    out = []
    for name, members in sorted(groups.items(), key=lambda item: natural_key(item[0])):
        scored = [r for r in members if r.label is not None]
        # Trials of a task are correlated: intervals clustered by task.
        levels = {lv: rate_by_task((r.task_id, r.label == lv) for r in scored).to_dict() for lv in LEVELS}
        out.append(
            (name, {"episodes": len(members), "infrastructure_errors": len(members) - len(scored), **levels})
        )
    return out


def _blocks(
    title: str, groups: list[tuple[str, dict[str, object]]], first: str
) -> tuple[TableBlock, ChartBlock]:
    table = TableBlock(
        title,
        (first, "episodes", *(f"{lv} % (95% CI)" for lv in LEVELS), "infra errors"),
        tuple(
            (name, str(g["episodes"]), *(rate_cell(g[lv]) for lv in LEVELS), str(g["infrastructure_errors"]))  # type: ignore[arg-type]
            for name, g in groups
        ),
    )
    bars = [
        Bar(name, g["full"]["rate"], *g["full"]["ci95"])  # type: ignore[index]
        for name, g in groups
        if g["full"]["rate"] is not None  # type: ignore[index]  # no bar for infrastructure errors only
    ]
    return table, ChartBlock(title, bar_chart(f"{title}: full success (95% interval)", bars))


def resilibench_sections(
    rows: Sequence[EpisodeRow], task_lookup: Callable[[str], TaskKind | None]
) -> list[ReportSection]:
    """Levels by model × variant (stacked), by model × task type, complexity and flaw type."""
    by_variant = _levels_by(rows, lambda r: f"{r.model} · {r.variant}")
    stacked = stacked_levels(
        "Levels by model × variant",
        [
            (name, {lv: g[lv]["rate"] for lv in LEVELS})  # type: ignore[index]
            for name, g in by_variant
            if g["full"]["rate"] is not None  # type: ignore[index]
        ],
    )

    # Each task is looked up once (building one from the full list costs a decompression and a parse).
    known: dict[str, tuple[str, str] | None] = {}

    def info(task_id: str) -> tuple[str, str] | None:
        if task_id not in known:
            task = task_lookup(task_id)
            known[task_id] = None if task is None else (task.task_type, task.complexity)
        return known[task_id]

    def task_type(row: EpisodeRow) -> str | None:
        found = info(row.task_id)
        return None if found is None else f"{row.model} · {found[0]}"

    def complexity(row: EpisodeRow) -> str | None:
        found = info(row.task_id)
        return None if found is None else f"{row.model} · {found[1]}"

    by_type = _levels_by(rows, task_type)
    by_complexity = _levels_by(rows, complexity)
    by_flaw = _levels_by(rows, lambda r: None if (f := flaw_type(r)) is None else f"{r.model} · {f}")
    blocks: list[TableBlock | ChartBlock] = [
        _blocks("Levels by model × variant", by_variant, "model · variant")[0],
        ChartBlock("levels by variant", stacked),
        *_blocks("By model × task type", by_type, "model · task type"),
        *_blocks("By model × complexity", by_complexity, "model · complexity"),
    ]
    if by_flaw:
        blocks.extend(_blocks("By model × flaw type", by_flaw, "model · flaw type"))
    return [
        ReportSection(
            id="resilibench",
            title="ResiliBench",
            blocks=tuple(blocks),
            data={
                "by_variant": dict(by_variant),
                "by_task_type": dict(by_type),
                "by_complexity": dict(by_complexity),
                "by_flaw_type": dict(by_flaw),
            },
        )
    ]
