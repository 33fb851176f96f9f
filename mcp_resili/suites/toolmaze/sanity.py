"""Common-sense checks of a ToolMaze record: what a careful agent can notice without knowing the truth.

The checks read the tool's own output layout (its last op's `Facets`): the figure within physical
bounds, the breakdown adding (or averaging) up to it, a count of at least 1 under a positive status,
the window starting before it ends, the weekday of the date, the subject asked about, a non-empty
id, no debugging output. Every clean record passes them (tested over every tool and task); every
corruption type fails at least one. Scripted agents use them to play "an agent that checks its data".
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any

from mcp_resili.suites.toolmaze.corpus import SOLD_OUT, UNITS
from mcp_resili.suites.toolmaze.corrupt import get_path
from mcp_resili.suites.toolmaze.library import corpus_index

#: Words that only debugging output contains.
LEAK_MARKERS = ("Traceback", "DEBUG", "KeyError", "Exception")


def _strings(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, f"{path}.{key}" if path else key)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _strings(value, f"{path}[{i}]")


def _moment(text: Any) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None


def anomalies(tool: str, arguments: Mapping[str, Any], record: Mapping[str, Any] | None) -> list[str]:
    """Why ``record`` (``tool``'s answer to ``arguments``) cannot be trusted; empty when it looks sound."""
    if record is None:
        return ["no structured record"]
    index = corpus_index()
    if tool not in index.tools:
        return []
    op = index.last_op(tool)
    f = op.facets
    found: list[str] = []
    status = get_path(record, f.status)
    record_id = get_path(record, f.id)
    if record_id is None:
        found.append(f"status {status!r} but {f.id} is null")
    elif record_id == "":
        found.append(f"status {status!r} but {f.id} is empty")
    found.extend(
        f"{path} contains debugging output"
        for path, text in _strings(record)
        if any(m in text for m in LEAK_MARKERS)
    )
    subject_field = index.domains[op.domain].subject_field
    asked, got = arguments.get(subject_field), get_path(record, f.subject)
    if asked is not None and got != asked:
        found.append(f"record is about {got!r}, not {asked!r}")
    value = get_path(record, f.measure)
    unit = UNITS[op.unit]
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < unit.physical_min:
            found.append(f"{f.measure} {value} {op.unit} is below the physical minimum {unit.physical_min}")
        if unit.physical_max is not None and value > unit.physical_max:
            found.append(f"{f.measure} {value} {op.unit} exceeds {unit.physical_max}")
        parts = [i.get(f.item_value) for i in get_path(record, f.items) or [] if isinstance(i, dict)]
        numbers = [p for p in parts if isinstance(p, int | float)]
        if numbers:
            total = sum(numbers) if f.aggregate == "sum" else sum(numbers) / len(numbers)
            if abs(total - value) > 0.011 * len(numbers):
                how = "sum" if f.aggregate == "sum" else "mean"
                found.append(f"{f.measure} {value} is not the {how} of its {f.items} ({round(total, 2)})")
    if get_path(record, f.count) == 0 and status != SOLD_OUT:
        found.append(f"status {status!r} but {f.count} is 0")
    start, end = _moment(get_path(record, f.start)), _moment(get_path(record, f.end))
    if start is None or end is None:
        found.append(f"{f.start} or {f.end} is not a timestamp")
    elif end < start:
        found.append(f"{f.end} {end:%Y-%m-%d %H:%M} is before {f.start} {start:%Y-%m-%d %H:%M}")
    try:
        day = dt.date.fromisoformat(str(get_path(record, f.date)))
    except ValueError:
        found.append(f"{f.date} is not a date")
    else:
        if get_path(record, f.weekday) != day.strftime("%A"):
            found.append(f"{day} is a {day:%A}, not a {get_path(record, f.weekday)}")
    return found
