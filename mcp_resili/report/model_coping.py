"""The model-API coping section: survival of injected model-API faults per fault type, 95% Wilson intervals.

Reads the ``llm_*`` components the scorer adds to every episode whose model calls went through a
fault gateway (`mcp_resili.scoring.model_coping`), beside the protocol-fault section
(`mcp_resili.report.coping`). A rate counts faults met, not episodes (an episode may meet several);
its Wilson interval treats them as independent, which episodes with more than one fault make
somewhat optimistic. Infrastructure errors (model-API failures nobody injected) are never scored,
so they appear here only as a count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp_resili.faults.model_api import MODEL_FAULT_TYPES
from mcp_resili.report.section import NoteBlock, ReportSection, TableBlock, rate_cell
from mcp_resili.report.summary import rate
from mcp_resili.store import EpisodeRow, may_have_score_component

PREFIX = "llm_"


def _components(row: EpisodeRow) -> dict[str, Any] | None:
    components = (row.score or {}).get("components")
    if isinstance(components, dict) and f"{PREFIX}faults" in components:
        return components
    return None


def _cell_of(cells: dict[str, dict[str, Any]], row: EpisodeRow) -> dict[str, Any]:
    return cells.setdefault(
        f"{row.model} · {row.architecture} · {row.faults}",
        {
            "model": row.model,
            "architecture": row.architecture,
            "faults": row.faults,
            "episodes": 0,
            "counts": {},
            "harness_failures": 0,
            "failed_after_fault": 0,
            "infrastructure_errors": 0,
        },
    )


def model_coping_data(rows: Sequence[EpisodeRow]) -> dict[str, Any]:
    """Per (model, architecture, faults) cell: episodes, and per fault type met / survived / rate."""
    if not may_have_score_component(rows, f"{PREFIX}faults"):  # the store knows: no pass
        return {}
    cells: dict[str, dict[str, Any]] = {}
    void: list[EpisodeRow] = []
    for row in rows:
        components = _components(row)
        if components is None:
            if row.label is None:
                void.append(row)
            continue
        cell = _cell_of(cells, row)
        cell["episodes"] += 1
        cell["harness_failures"] += bool(components.get(f"{PREFIX}harness_failure"))
        cell["failed_after_fault"] += components.get(f"{PREFIX}failed_after") is not None
        for kind in ("all", *MODEL_FAULT_TYPES):
            met_key, ok_key = (
                (f"{PREFIX}faults", f"{PREFIX}survived")
                if kind == "all"
                else (f"{PREFIX}{kind}_met", f"{PREFIX}{kind}_survived")
            )
            met, ok = cell["counts"].get(kind, (0, 0))
            cell["counts"][kind] = (
                met + int(components.get(met_key) or 0),
                ok + int(components.get(ok_key) or 0),
            )
    for row in void:  # not scored, so no components: counted in a cell whose episodes met a gateway
        seen = cells.get(f"{row.model} · {row.architecture} · {row.faults}")
        if seen is not None:
            seen["infrastructure_errors"] += 1
    out: dict[str, Any] = {}
    for name, cell in sorted(cells.items()):
        counts = cell.pop("counts")
        cell["types"] = {
            kind: {"met": met, "survived": ok, "survival": rate(ok, met).to_dict() if met else None}
            for kind, (met, ok) in counts.items()
        }
        out[name] = cell
    return out


def model_coping_section(rows: Sequence[EpisodeRow]) -> ReportSection | None:
    """The section, or None when no episode's model calls went through a gateway."""
    data = model_coping_data(rows)
    if not data:
        return None
    table_rows = []
    for name, cell in data.items():
        for kind in ("all", *MODEL_FAULT_TYPES):
            entry = cell["types"][kind]
            if not entry["met"] and kind != "all":
                continue
            table_rows.append(
                (
                    name,
                    "all model-API faults" if kind == "all" else kind,
                    "" if kind == "all" else MODEL_FAULT_TYPES[kind].family,
                    str(entry["met"]),
                    str(entry["survived"]),
                    "–" if entry["survival"] is None else rate_cell(entry["survival"]),
                )
            )
    episodes = tuple(
        (
            name,
            str(cell["episodes"]),
            str(cell["failed_after_fault"]),
            str(cell["harness_failures"]),
            str(cell["infrastructure_errors"]),
        )
        for name, cell in data.items()
    )
    return ReportSection(
        id="model_coping",
        title="Coping with model-API faults",
        blocks=(
            NoteBlock(
                "Faults the gateway injected into model calls, and whether the agent went on: a later model "
                "call answered, or the episode ended by the agent's own finish (docs/harnesses.md). A fault "
                "not survived is the agent's failure; a model-API failure nobody injected is an "
                "infrastructure error, never scored. Rates count faults met; 95% Wilson intervals."
            ),
            TableBlock(
                "Survival per fault type (95% CI)",
                ("cell", "fault type", "family", "met", "survived", "survival % (95% CI)"),
                tuple(table_rows),
            ),
            TableBlock(
                "Episodes (scored) that ...",
                (
                    "cell",
                    "episodes",
                    "failed after a fault",
                    "harness failures",
                    "infra errors (not scored)",
                ),
                episodes,
            ),
        ),
        data={"cells": data},
    )
