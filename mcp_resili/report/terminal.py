"""Terminal rendering of run summaries (rich tables)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from mcp_resili.report.section import ReportSection, TableBlock
from mcp_resili.report.summary import (
    LEVELS,
    ComponentColumn,
    GroupSummary,
    Rate,
    column_value,
    shown_columns,
)


def summary_table(
    run_id: str, summaries: Sequence[GroupSummary], columns: Sequence[ComponentColumn] = ()
) -> Table:
    """One row per (model, architecture, faults, variant): level rates with 95% intervals.

    ``columns``: the suite's own (`ComponentColumn`), shown once any group has a value.
    """
    table = Table(
        title=f"run {run_id}",
        title_justify="left",
        caption="95% CI: Wilson at the effective sample size, clustered by task (trials of a task correlate)",
        caption_justify="left",
    )
    extra = list(summaries[0].breakdown) if summaries else []
    for name in ("model", "architecture", "faults", "variant", *extra, "episodes"):
        table.add_column(name, justify="right" if name == "episodes" else "left")
    for level in LEVELS:
        table.add_column(f"{level} % (95% CI)", justify="right")
    shown = shown_columns(summaries, columns)
    for column in shown:
        table.add_column(column.title, justify="right")
    table.add_column("infra errors", justify="right")
    # Offline (scripted) runs spend nothing: leave the money columns out rather than print zeros.
    spending = any(s.input_tokens or s.output_tokens or s.cost_usd for s in summaries)
    if spending:
        table.add_column("tokens in/out", justify="right")
        table.add_column("cost $", justify="right")
    for s in summaries:
        cells = [_rate(s.levels[lv]) for lv in LEVELS]
        cost = "n/a" if s.cost_usd is None else f"{s.cost_usd:.4f}"
        table.add_row(
            s.model,
            s.architecture,
            s.faults,
            s.variant,
            *(s.breakdown[k] for k in extra),
            str(s.episodes),
            *cells,
            *(_pct(column_value(s, column)) for column in shown),
            str(s.infrastructure_errors),
            *((f"{s.input_tokens:,}/{s.output_tokens:,}", cost) if spending else ()),
        )
    return table


def _rate(rate: Rate) -> str:
    """'value (low–high)' in percent; '–' for a group with no scored episode."""
    if rate.value is None:
        return "–"
    return f"{100 * rate.value:5.1f} ({100 * rate.low:.0f}–{100 * rate.high:.0f})"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:5.1f}"


def section_summaries(sections: Sequence[ReportSection]) -> list[str]:
    """The sentences a reader needs besides the tables: each comparison's verdict, who degrades more."""
    titles = {"paired": "Paired comparison", "paired-runs": "Paired comparison across runs"}
    lines = []
    for section in sections:
        if section.id == "robustness":
            lines.append("Robustness curves (full success against fault intensity):")
            lines.extend(f"  {line}" for line in section.data["summary"])
        elif section.id == "degradation":
            lines.append(f"Degradation (baseline {section.data['baseline']}):")
            lines.extend(f"  {line}" for line in section.data["summary"])
        elif section.id in titles and section.data.get("summary"):
            lines.append(f"{titles[section.id]} (full success):")
            lines.extend(f"  {line}" for line in section.data["summary"])
    return lines


def section_tables(sections: Sequence[ReportSection]) -> list[Table]:
    """Every table of every section as a rich table (charts are for the HTML page)."""
    tables = []
    for section in sections:
        for block in section.blocks:
            if isinstance(block, TableBlock):
                # "Section: table", unless the table's title already starts with the section's.
                title = (
                    block.title
                    if block.title.startswith(section.title)
                    else f"{section.title}: {block.title}"
                )
                table = Table(title=title, title_justify="left")
                for column in block.columns:
                    table.add_column(column)
                for row in block.rows:
                    table.add_row(*row)
                tables.append(table)
    return tables
