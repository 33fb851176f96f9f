"""Implicit corruption: the tool runs, and its record comes back schema-valid but semantically wrong.

ToolMaze's nine corruption types (paper §3, App.) are defined on each tool's own output layout (its
last op's `Facets`): the keys stay exactly the clean record's, no error field appears, and the
values of the fields later steps read change: always the record id (the handle the next step
passes on: a corrupted record is a different, broken record), plus the figure or the subject where
the type concerns them. Each type breaks one fact a careful reader can check in that output alone:

=========================  ==============================================================
physics_violation          the figure outside physical bounds (a negative price, 150 %, −290 °C)
tool_leakage               a debugging dump in the id and a stack trace in the text
irrelevant_response        another subject's record (another city's weather)
statistical_inconsistency  the figure is not the sum (or mean) of its own breakdown
internal_contradiction     a positive status (available, confirmed, ...) but a count of 0
missing_required_fields    the id is empty although the status confirms the record
logic_violation            the id is null although the status confirms the record
temporal_contradiction     the time window ends before it starts
fact_contradiction         the weekday is not the weekday of the date
=========================  ==============================================================

The new values are a pure function of the clean record and the type, so the same call always gets
the same synthetic response (the paper fixes it per task and mode).
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import random
from typing import Any, Literal, get_args

from mcp_resili.faults.base import BaseFault, CallContext, ToolOutcome
from mcp_resili.suites.toolmaze.corpus import SOLD_OUT, UNITS, Op
from mcp_resili.suites.toolmaze.library import corpus_index
from mcp_resili.suites.toolmaze.simulators import describe

Corruption = Literal[
    "physics_violation",
    "tool_leakage",
    "irrelevant_response",
    "statistical_inconsistency",
    "internal_contradiction",
    "missing_required_fields",
    "logic_violation",
    "temporal_contradiction",
    "fact_contradiction",
]
CORRUPTIONS: tuple[Corruption, ...] = get_args(Corruption)

#: The facets (see `corpus.Facets`) whose values each corruption changes.
CHANGED_FACETS: dict[str, tuple[str, ...]] = {
    "physics_violation": ("id", "measure", "items"),
    "tool_leakage": ("id", "text"),
    "irrelevant_response": ("id", "subject", "measure", "items", "text"),
    "statistical_inconsistency": ("id", "measure"),
    "internal_contradiction": ("id", "count", "status"),
    "missing_required_fields": ("id",),
    "logic_violation": ("id",),
    "temporal_contradiction": ("id", "end"),
    "fact_contradiction": ("id", "weekday"),
}
#: The facets later steps bind: a corrupted value found in a later call's arguments was propagated.
CONSUMED_FACETS = ("id", "measure", "subject")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def get_path(record: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``record`` (None when any part is missing)."""
    node = record
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def set_path(record: dict[str, Any], path: str, value: Any) -> None:
    """Replace the value at dotted ``path`` (which exists) in ``record``."""
    *parents, leaf = path.split(".")
    node = record
    for part in parents:
        node = node[part]
    node[leaf] = value


def changed_paths(tool: str, corruption: str) -> tuple[str, ...]:
    """The output paths of ``tool`` whose values ``corruption`` changes."""
    if corruption not in CHANGED_FACETS:
        raise ValueError(f"unknown corruption type {corruption!r}; choose from {list(CORRUPTIONS)}")
    facets = corpus_index().last_op(tool).facets
    return tuple(getattr(facets, name) for name in CHANGED_FACETS[corruption])


def consumed_paths(tool: str) -> tuple[str, ...]:
    """The output paths of ``tool`` later steps read."""
    facets = corpus_index().last_op(tool).facets
    return tuple(getattr(facets, name) for name in CONSUMED_FACETS)


def _number(clean: dict[str, Any], salt: str, modulo: int) -> int:
    text = json.dumps(clean, sort_keys=True) + "\x1f" + salt
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") % modulo


def _other_id(clean: dict[str, Any], old: Any, kind: str) -> str:
    prefix = str(old).split("-", 1)[0] if old else "RX"
    new = f"{prefix}-{_number(clean, kind, 16**8):08x}"
    return new if new != old else f"{prefix}-{(_number(clean, kind, 16**8) + 1) % 16**8:08x}"


def _rebreak(op: Op, items: list[dict[str, Any]], value: float) -> list[dict[str, Any]]:
    """The breakdown ``items`` re-split so it still adds up (or averages) to the new ``value``."""
    f = op.facets
    n = max(1, len(items))
    if f.aggregate == "sum":
        share = round(value / n, 2)
        values = [share] * (n - 1) + [round(value - share * (n - 1), 2)]
    else:
        values = [round(value, 2)] * n
    return [{**item, f.item_value: v} for item, v in zip(items, values, strict=True)]


def _physics(op: Op, value: float, n: int) -> float:
    unit = UNITS[op.unit]
    if unit.physical_max is not None:
        return round(unit.physical_max * 1.5 + n % 50, 2)
    if unit.physical_min < 0:
        return round(unit.physical_min - 15 - n % 50, 2)
    return round(-abs(value) - 1 - n % 20, 2) if value == 0 else round(-abs(value), 2)


def _shifted(op: Op, value: float, n: int) -> float:
    """A figure off its own breakdown, yet within physical bounds."""
    unit = UNITS[op.unit]
    delta = max(2.0, abs(value) * (0.3 + n % 70 / 100))
    up = value + delta
    if unit.physical_max is not None and up > unit.physical_max:
        return round(max(unit.physical_min, value - delta), 2)
    return round(up, 2)


def corrupt_record(tool: str, clean: dict[str, Any], corruption: str) -> dict[str, Any]:
    """The corrupted version of ``tool``'s clean record: same keys, no error flag, wrong values."""
    changed_paths(tool, corruption)  # rejects an unknown type by name
    index = corpus_index()
    op = index.last_op(tool)
    f = op.facets
    record = copy.deepcopy(clean)
    set_path(record, f.id, _other_id(clean, get_path(clean, f.id), corruption))
    value = float(get_path(clean, f.measure) or 0.0)
    items = list(get_path(clean, f.items) or [])
    n = _number(clean, corruption, 10_000)
    if corruption == "physics_violation":
        bad = _physics(op, value, n)
        set_path(record, f.measure, bad)
        set_path(record, f.items, _rebreak(op, items, bad))
    elif corruption == "tool_leakage":
        line = 100 + n % 800
        set_path(record, f.id, f"DEBUG ref=<unset> Traceback (most recent call last): handler.py line {line}")
        set_path(
            record,
            f.text,
            f'Traceback (most recent call last):\n  File "/srv/tools/handler.py", line {line}, in run\n'
            f"    record = cache[key]\nKeyError: {get_path(clean, f.id)!r}\n"
            "[DEBUG] retrying with stale cache",
        )
    elif corruption == "irrelevant_response":
        decoys = [d for d in index.domains[op.domain].decoys if d != get_path(clean, f.subject)]
        decoy = decoys[n % len(decoys)]
        unit = UNITS[op.unit]
        other = round(unit.low + (value * 1.37 + 3.1 - unit.low) % (unit.high - unit.low), 2)
        other = other if other != value else round(other + 1, 2)
        set_path(record, f.subject, decoy)
        set_path(record, f.measure, other)
        set_path(record, f.items, _rebreak(op, items, other))
        set_path(record, f.text, describe(op, decoy))
    elif corruption == "statistical_inconsistency":
        set_path(record, f.measure, _shifted(op, value, n))
    elif corruption == "internal_contradiction":
        set_path(record, f.count, 0)
        if get_path(clean, f.status) == SOLD_OUT:
            set_path(record, f.status, op.status)
    elif corruption == "missing_required_fields":
        set_path(record, f.id, "")
    elif corruption == "logic_violation":
        set_path(record, f.id, None)
    elif corruption == "temporal_contradiction":
        start = dt.datetime.strptime(str(get_path(clean, f.start)), "%Y-%m-%dT%H:%M:%SZ")
        end = start - dt.timedelta(days=1 + n % 20, hours=n % 7)
        set_path(record, f.end, end.strftime("%Y-%m-%dT%H:%M:%SZ"))
    else:
        right = _WEEKDAYS.index(str(get_path(clean, f.weekday)))
        set_path(record, f.weekday, _WEEKDAYS[(right + 1 + n % 6) % 7])
    return record


class CorruptFault(BaseFault):
    """The tool runs; the agent gets a plausible, schema-valid record with wrong values (no error)."""

    type: Literal["corrupt"] = "corrupt"
    corruption: Corruption
    explicit: Literal[False] = False
    side: Literal["response"] = "response"

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """Corrupt a successful record; a tool's own error passes through untouched."""
        if outcome is None:
            raise ValueError("a response-side corrupt fault needs the tool's outcome")
        if outcome.is_error or outcome.structured is None:
            return outcome
        if call.tool.name not in corpus_index().tools:
            raise ValueError(f"corrupt faults apply to ToolMaze tools only, not {call.tool.name!r}")
        return ToolOutcome(structured=corrupt_record(call.tool.name, outcome.structured, self.corruption))
