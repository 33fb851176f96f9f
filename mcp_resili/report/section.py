"""What a report is made of: sections of tables and charts, which suites contribute through a hook.

A suite adds its own sections by setting ``Suite.report_sections`` to a function of the run's
stored episodes returning `ReportSection`s. Each section renders three ways: its tables in the
terminal, its tables and SVG charts in the HTML page, its ``data`` in ``report --json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TableBlock:
    """A table of already formatted cells."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class ChartBlock:
    """A chart as an inline SVG document (see `mcp_resili.report.svg`)."""

    title: str
    svg: str


@dataclass(frozen=True)
class NoteBlock:
    """A paragraph of explanation (how to read the section, definitions)."""

    text: str


Block = TableBlock | ChartBlock | NoteBlock


@dataclass(frozen=True)
class ReportSection:
    """One titled section; ``data`` is its machine-readable form for ``--json``."""

    id: str
    title: str
    blocks: tuple[Block, ...]
    data: dict[str, Any] = field(default_factory=dict)


def percent(value: float) -> str:
    """0.1234 → '12.3'."""
    return f"{100 * value:.1f}"


def rate_cell(rate: dict[str, Any]) -> str:
    """A `Rate.to_dict()` as 'value % (low–high)'; '–' for a rate over no episodes."""
    if rate["rate"] is None:
        return "–"
    low, high = rate["ci95"]
    return f"{percent(rate['rate'])} ({100 * low:.0f}–{100 * high:.0f})"
