"""The coping section: recovery from protocol faults per fault type, with 95% Wilson intervals.

Reads the ``coping_*`` components the runner adds to every score under protocol faults
(`mcp_resili.scoring.coping`). A rate counts faults met, not episodes (an episode may meet several);
faults of one task (its trials, and several faults in one episode) are correlated, so the interval is
clustered by task (`mcp_resili.report.clustered`: Wilson at the effective sample size).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp_resili.faults.protocol import ALL_PROTOCOL_TYPES, FAMILY_OF
from mcp_resili.report.section import NoteBlock, ReportSection, TableBlock, rate_cell
from mcp_resili.report.summary import Rate, rate_by_task
from mcp_resili.store import EpisodeRow, may_have_score_component

PREFIX = "coping_"


def _components(row: EpisodeRow) -> dict[str, Any] | None:
    components = (row.score or {}).get("components")
    if isinstance(components, dict) and f"{PREFIX}faults" in components:
        return components
    return None


def coping_data(rows: Sequence[EpisodeRow]) -> dict[str, Any]:
    """Per (model, faults) cell: episodes, and per fault type met / recovered / rate with interval."""
    if not may_have_score_component(rows, f"{PREFIX}faults"):  # the store knows: no pass
        return {}
    cells: dict[str, dict[str, Any]] = {}
    for row in rows:
        components = _components(row)
        if components is None:
            continue
        cell = cells.setdefault(
            f"{row.model} · {row.faults}",
            {
                "model": row.model,
                "faults": row.faults,
                "episodes": 0,
                "counts": {},
                "behaviour": {},
                "tasks": {},
            },
        )
        cell["episodes"] += 1
        for kind in ("all", *ALL_PROTOCOL_TYPES):
            met_key, ok_key = (
                (f"{PREFIX}faults", f"{PREFIX}recovered")
                if kind == "all"
                else (f"{PREFIX}{kind}_met", f"{PREFIX}{kind}_recovered")
            )
            met, ok = cell["counts"].setdefault(kind, [0, 0])
            episode_met, episode_ok = int(components.get(met_key) or 0), int(components.get(ok_key) or 0)
            cell["counts"][kind] = [met + episode_met, ok + episode_ok]
            per_task = cell["tasks"].setdefault(kind, {}).setdefault(row.task_id, [0, 0])
            per_task[0] += episode_met
            per_task[1] += episode_ok
        for name in ("relisted", "reinitialized", "ended_cleanly"):
            cell["behaviour"][name] = cell["behaviour"].get(name, 0) + bool(components.get(f"{PREFIX}{name}"))
        cell["behaviour"]["retried_writes"] = cell["behaviour"].get("retried_writes", 0) + int(
            components.get(f"{PREFIX}retried_writes") or 0
        )
    out: dict[str, Any] = {}
    for name, cell in sorted(cells.items()):
        types = {
            kind: {
                "met": met,
                "recovered": ok,
                "recovery": _recovery(cell["tasks"][kind]).to_dict() if met else None,
            }
            for kind, (met, ok) in cell["counts"].items()
        }
        out[name] = {
            "model": cell["model"],
            "faults": cell["faults"],
            "episodes": cell["episodes"],
            "types": types,
            "behaviour": cell["behaviour"],
        }
    return out


def _recovery(per_task: dict[str, list[int]]) -> Rate:
    """Recovered of met faults, its interval clustered by task (each fault one observation)."""
    return rate_by_task(
        (task, index < ok) for task, (met, ok) in per_task.items() for index in range(max(met, ok))
    )


def coping_section(rows: Sequence[EpisodeRow]) -> ReportSection | None:
    """The section, or None when no episode met a plan with protocol faults."""
    data = coping_data(rows)
    if not data:
        return None
    table_rows = []
    for name, cell in data.items():
        for kind in ("all", *ALL_PROTOCOL_TYPES):
            entry = cell["types"][kind]
            if not entry["met"]:
                continue
            table_rows.append(
                (
                    name,
                    "all protocol faults" if kind == "all" else kind,
                    "" if kind == "all" else FAMILY_OF[kind],
                    str(entry["met"]),
                    str(entry["recovered"]),
                    rate_cell(entry["recovery"]),
                )
            )
    behaviour = tuple(
        (
            name,
            str(cell["episodes"]),
            str(cell["behaviour"].get("relisted", 0)),
            str(cell["behaviour"].get("reinitialized", 0)),
            str(cell["behaviour"].get("retried_writes", 0)),
            str(cell["behaviour"].get("ended_cleanly", 0)),
        )
        for name, cell in data.items()
    )
    return ReportSection(
        id="coping",
        title="Coping with protocol faults",
        blocks=(
            NoteBlock(
                "What the agent did after each protocol fault (docs/faults.md says what recovered means "
                "per type). Rates count faults met; intervals are 95% Wilson intervals at the effective "
                "sample size, clustered by task (the faults of one task are correlated)."
            ),
            TableBlock(
                "Recovery per fault type (95% CI)",
                ("cell", "fault type", "family", "met", "recovered", "recovery % (95% CI)"),
                tuple(table_rows),
            ),
            TableBlock(
                "Episodes that, after their first protocol fault, ...",
                ("cell", "episodes", "re-listed tools", "re-initialized", "retried writes", "ended cleanly"),
                behaviour,
            ),
        ),
        data={"cells": data},
    )
