"""Deterministic simulation of every ToolMaze tool, from the ops it composes.

A record flows along a chain as ``(id, figure, subject)`` (`Rec`). Each op maps it to a new one:
sources create it from the subject, processors transform the figure (an op-specific affine map,
wrapped into the op unit's plausible range) and issue a new id, actions keep the figure and issue a
confirmation id. The op then *renders* the record through its own layout (`Facets`): breakdown,
time window, date and weekday, text, details, plus the tool's provider extras. A tool composing ops
``(p, q)`` returns exactly what calling ``p`` then ``q`` returns in every field later steps read, so
alternatives are interchangeable by construction.

Clean records satisfy checks a careful reader can make (`sanity.anomalies`): the figure within the
unit's physical bounds, the breakdown adding (or averaging) up to the figure, a count of at least 1
under a positive status, start before end, the weekday of the date, the subject asked about, a
non-empty id and no debugging output.

**State** (per episode): an availability source lists what is left of its resource for the subject;
a booking takes the first option left (``SOLD_OUT`` when none), so a second booking books again,
gets a new confirmation id, and the source afterwards hides both options.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_resili.suites.toolmaze.corpus import (
    SOLD_OUT,
    UNITS,
    Corpus,
    CorpusTool,
    DomainInfo,
    Op,
    digest,
    extra_style,
)
from mcp_resili.tools.library import Simulator, ToolFailure, ToolState

EPOCH = dt.datetime(2026, 1, 5, tzinfo=dt.UTC)
#: Where the episode's bookings live in the tool state: ``{"resource|subject": [options booked]}``.
BOOKINGS = "toolmaze/bookings"
OPTIONS_PER_SUBJECT = 6
_SAMPLE_TIMES = ("06:00", "12:00", "18:00", "23:00")


@dataclass(frozen=True)
class Rec:
    """The record flowing between ops: its id, its figure and what it is about."""

    id: str
    value: float
    subject: str


def make_id(op: Op, *parts: object) -> str:
    """A record id such as ``QU-1f3a9b20``."""
    return f"{op.prefix}-{digest(op.name, *parts) % 16**8:08x}"


def wrap(unit: str, raw: float) -> float:
    """``raw`` mapped into the unit's plausible range (so a long chain never drifts off scale)."""
    spec = UNITS[unit]
    return round(spec.low + (raw - spec.low) % (spec.high - spec.low), 2)


def options_for(resource: str, subject: str) -> list[str]:
    """The options an availability source offers for ``subject`` before anything is booked."""
    base = digest(resource, subject) % 90 + 10
    return [f"{resource[:2].upper()}-{i + 1}{base}" for i in range(OPTIONS_PER_SUBJECT)]


def booked(state: ToolState, resource: str, subject: str) -> list[str]:
    """The options of ``resource`` booked for ``subject`` so far in this episode."""
    bookings: dict[str, list[str]] = state.get(BOOKINGS, {})
    return list(bookings.get(f"{resource}|{subject}", ()))


def available(state: ToolState, resource: str, subject: str) -> list[str]:
    """The options still free: availability sources hide what was booked earlier in the episode."""
    taken = set(booked(state, resource, subject))
    return [o for o in options_for(resource, subject) if o not in taken]


def _book(state: ToolState, resource: str, subject: str) -> str:
    free = available(state, resource, subject)
    if not free:
        raise ToolFailure(
            "SOLD_OUT",
            f"no {resource} left for {subject!r}: all {OPTIONS_PER_SUBJECT} were booked in this episode",
        )
    bookings: dict[str, list[str]] = state.setdefault(BOOKINGS, {})
    bookings.setdefault(f"{resource}|{subject}", []).append(free[0])
    return free[0]


def advance(
    op: Op, rec: Rec | None, subject: str, priority: str | None, state: ToolState
) -> tuple[Rec, str | None]:
    """Apply ``op``: the new record, and the option it booked (stateful actions only)."""
    spec = UNITS[op.unit]
    if op.role == "source":
        h = digest("source", op.name, subject)
        value = round(spec.low + (h % 10_000) / 10_000 * (spec.high - spec.low), 2)
        seen = tuple(booked(state, op.resource, subject)) if op.resource else ()
        return Rec(make_id(op, subject, seen), value, subject), None
    assert rec is not None  # processors and actions always receive a record
    if op.role == "processor":
        h = digest("processor", op.name)
        factor = 0.6 + (h % 1000) / 1000
        offset = 0.5 + (h >> 16) % 1950 / 100
        value = wrap(op.unit, rec.value * factor + offset)
        return Rec(make_id(op, rec.id, value, subject), value, subject), None
    value = wrap(op.unit, rec.value)
    option = _book(state, op.resource, subject) if op.resource else None
    return Rec(make_id(op, rec.id, value, subject, priority, option), value, subject), option


def _put(record: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = record
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def _stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def breakdown(op: Op, value: float, h: int, labels: tuple[str, ...]) -> list[dict[str, Any]]:
    """Parts that add up to ``value`` (sum units) or samples that average to it (mean units)."""
    f = op.facets
    parts = 2 + h % 3
    if f.aggregate == "sum":
        weights = [1 + (h >> (8 * i)) % 7 for i in range(parts)]
        total = sum(weights)
        shares = [math.floor(value * w / total * 100) / 100 for w in weights[:-1]]
        shares.append(round(value - sum(shares), 2))
        names = labels[:parts]
    else:
        spec = UNITS[op.unit]
        room = value - spec.physical_min
        if spec.physical_max is not None:
            room = min(room, spec.physical_max - value)
        deltas = [
            round(min(3.0, max(room, 0.0)) * ((h >> (6 * i)) % 100) / 100, 2) for i in range(parts // 2)
        ]
        shares = [round(value + sign * d, 2) for d in deltas for sign in (1, -1)]
        if parts % 2:
            shares.insert(1, round(value, 2))
        names = _SAMPLE_TIMES[:parts]
    return [{f.item_label: name, f.item_value: share} for name, share in zip(names, shares, strict=True)]


def describe(op: Op, subject: str) -> str:
    """The record's one-line text."""
    return f"{op.entity[:1].upper()}{op.entity[1:]} for {subject}"


def render(
    tool: CorpusTool, op: Op, rec: Rec, option: str | None, domain: DomainInfo, state: ToolState
) -> dict[str, Any]:
    """The record a tool whose last op is ``op`` returns for ``rec``."""
    f = op.facets
    h = digest("render", rec.id)
    record: dict[str, Any] = {}
    left = available(state, op.resource, rec.subject) if op.resource and op.role == "source" else None
    _put(record, f.id, rec.id)
    _put(record, f.subject, rec.subject)
    _put(record, f.status, SOLD_OUT if left == [] else op.status)
    _put(record, f.measure, rec.value)
    if f.currency:
        _put(record, f.currency, op.unit)
    count = 1 + (h >> 4) % 40
    if left is not None:
        count = len(left)
    elif option is not None:
        count = 1
    _put(record, f.count, count)
    _put(record, f.items, breakdown(op, rec.value, h, domain.item_labels))
    start = EPOCH + dt.timedelta(days=(h >> 8) % 330, hours=(h >> 20) % 24)
    _put(record, f.start, _stamp(start))
    _put(record, f.end, _stamp(start + dt.timedelta(hours=1 + (h >> 28) % 72)))
    _put(record, f.date, start.date().isoformat())
    _put(record, f.weekday, start.strftime("%A"))
    _put(record, f.text, describe(op, rec.subject))
    if f.options:
        _put(record, f.options, left or [])
    if f.booked:
        _put(record, f.booked, option or "")
    for i, detail in enumerate(op.details):
        k = digest("detail", rec.id, i)
        value: Any = (
            detail.choices[k % len(detail.choices)]
            if detail.choices
            else detail.low + k % (detail.high - detail.low + 1)
        )
        _put(record, detail.name, value)
    _extras(record, tool, op, rec, domain)
    return record


def _extras(record: dict[str, Any], tool: CorpusTool, op: Op, rec: Rec, domain: DomainInfo) -> None:
    h = digest("extras", tool.spec.name, rec.id)
    moment = _stamp(EPOCH + dt.timedelta(minutes=h % 500_000))
    style = extra_style(tool, domain)
    provider = tool.provider or ""
    if style == "canonical":
        _put(
            record, {"source": "retrieved_at", "processor": "computed_at"}.get(op.role, "recorded_at"), moment
        )
    elif style == "provider":
        _put(record, "provider", {"name": provider, "api_version": f"v{1 + h % 3}"})
        _put(record, "request_id", f"req_{h % 16**12:012x}")
    elif style == "source":
        _put(record, "data_source", provider)
        _put(record, "latency_ms", 20 + h % 400)
    elif style == "vendor":
        _put(record, "vendor", provider)
        _put(record, "quota", {"used": h % 900, "limit": 1000})
    else:
        _put(record, "pipeline", list(tool.ops))
        _put(record, "computed_at", moment)


def simulator_for(tool: CorpusTool, ops: Mapping[str, Op], domain: DomainInfo) -> Simulator:
    """The simulator of ``tool``: its ops applied in order, then the last op's rendering."""
    chain = tuple(ops[name] for name in tool.ops)
    first = chain[0]

    def simulate(arguments: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
        subject = str(arguments[domain.subject_field])
        priority = arguments.get("priority")
        rec: Rec | None = None
        if first.role != "source":
            rec = Rec(str(arguments[first.id_arg or ""]), float(arguments[first.measure_arg or ""]), subject)
        option: str | None = None
        for op in chain:
            rec, option = advance(op, rec, subject, priority, state)
        assert rec is not None  # every op returns a record
        return render(tool, chain[-1], rec, option, domain, state)

    return simulate


def simulators(corpus: Corpus) -> dict[str, Simulator]:
    """Simulators for every tool of ``corpus``."""
    ops = {op.name: op for op in corpus.ops}
    domains = {d.name: d for d in corpus.domains}
    return {tool.spec.name: simulator_for(tool, ops, domains[tool.domain]) for tool in corpus.tools}
