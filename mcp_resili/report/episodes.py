"""The episode browser's data: a compact index of every episode, and the episodes' details in chunks.

The index (one short row per episode: run, model, faults, variant, task, trial, outcome, faults
met, Chain F1, termination) is what the browser sorts, facets and pages; repeated strings are
stored once (``values``) and referred to by number. The details (every event, tool results cut to
`RESULT_CHARS`) come in chunks of `CHUNK_SIZE` episodes, in index order, and are loaded only when
an episode of the chunk is opened — so the page does not grow with the number of episodes.

Both are written packed (`pack`): JSON, gzip-compressed, base64-encoded. Traces repeat themselves
(the same tools, keys and messages in every episode), so a chunk shrinks about tenfold; the page
unpacks what it loads with the browser's own ``DecompressionStream`` (no library, nothing fetched).
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_resili.report.build import Report
from mcp_resili.store import EpisodeRow
from mcp_resili.trace import trace_lines

#: Longest tool result (or arguments) text kept per call in the episode view.
RESULT_CHARS = 1500
#: Episodes per detail chunk: one chunk is what opening an episode loads (~1 MB at most).
CHUNK_SIZE = 100
#: The index's columns, in order; the categorical ones are numbers into ``values``.
INDEX_FIELDS = (
    "id",
    "run",
    "model",
    "faults",
    "variant",
    "task",
    "trial",
    "label",
    "faults_met",
    "chain_f1",
    "termination",
)
CATEGORICAL = ("run", "model", "faults", "variant", "label", "termination")


def _truncate(value: Any) -> Any:
    # Measured as compact JSON: a field of a trace line no longer than RESULT_CHARS is never cut.
    text = json.dumps(value, default=str, separators=(",", ":"), ensure_ascii=False)
    return value if len(text) <= RESULT_CHARS else text[:RESULT_CHARS] + f"… ({len(text)} chars)"


#: Decimals kept of the scores' numbers shown to people (0.72, not 0.7200000000000001).
SHOWN_DECIMALS = 4


def for_people(value: Any) -> Any:
    """``value`` with every float rounded to `SHOWN_DECIMALS` (in lists and objects too): what is shown."""
    if isinstance(value, float):
        return round(value, SHOWN_DECIMALS)
    if isinstance(value, dict):
        return {key: for_people(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [for_people(item) for item in value]
    return value


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class EpisodeDetail:
    """One episode for the episode view: its fields, and its events each as JSON text.

    A trace line short enough to need no cut is its own event's JSON: it goes into the chunk as it
    was stored (parsed to check it, never written again), which is most of a report's bytes.
    """

    fields: dict[str, Any]
    events: tuple[str, ...]
    faults_met: int

    def to_json(self) -> str:
        """The detail as the page reads it: the fields plus ``events``, a list of event objects."""
        return _compact(self.fields)[:-1] + ',"events":[' + ",".join(self.events) + "]}"


def episode_detail(row: EpisodeRow, workflow: Mapping[str, float | int | None] | None) -> EpisodeDetail:
    """One episode for the episode view: outcome, judge reasons, workflow metrics, every event."""
    events: list[str] = []
    faults = 0
    for line in trace_lines(row.trace)[1:]:
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            event = None
        if not isinstance(event, dict):
            events.append(_compact({"event": "unreadable", "text": line[:200]}))
            continue
        kind = event.get("event")
        if kind == "tool_call" and event.get("fault"):
            faults += 1
        if len(line) <= RESULT_CHARS:  # no field of it can be longer: nothing to cut
            events.append(line)
            continue
        # Results and arguments can be whole documents; the view shows the start of each.
        if kind == "tool_call":
            event["arguments"] = _truncate(event.get("arguments"))
            event["result"] = _truncate(event.get("result"))
        elif kind == "model_turn":
            event["tool_calls"] = [_truncate(call) for call in event.get("tool_calls", [])]
        events.append(_compact(event))
    score = row.score or {}
    fields = {
        "id": row.episode_id,
        "run": row.run_id,
        "model": row.model,
        "faults": row.faults,
        "variant": row.variant,
        "task": row.task_id,
        "trial": row.trial,
        "termination": row.termination,
        "label": row.label,
        "value": for_people(row.value),
        "reasons": list(score.get("reasons", [])),
        "components": for_people(score.get("components", {})),
        "workflow": None if workflow is None else for_people(dict(workflow)),
    }
    return EpisodeDetail(fields, tuple(events), faults)


@dataclass
class BrowserIndex:
    """The index being built, chunk after chunk (see the module docstring for its layout)."""

    rows: list[list[Any]] = field(default_factory=list)
    values: dict[str, list[str | None]] = field(default_factory=lambda: {name: [] for name in CATEGORICAL})
    _codes: dict[str, dict[str | None, int]] = field(
        default_factory=lambda: {name: {} for name in CATEGORICAL}
    )

    def add(self, detail: EpisodeDetail) -> None:
        """Append one episode (its detail as `episode_detail` made it)."""
        fields = detail.fields
        workflow = fields["workflow"]
        entry = {
            **{name: fields[name] for name in ("id", "run", "model", "faults", "variant", "task", "trial")},
            "label": fields["label"],
            "faults_met": detail.faults_met,
            "chain_f1": None if workflow is None else round(float(workflow["chain_f1"]), 3),
            "termination": fields["termination"],
        }
        self.rows.append(
            [self._code(name, entry[name]) if name in CATEGORICAL else entry[name] for name in INDEX_FIELDS]
        )

    def _code(self, name: str, value: str | None) -> int:
        codes = self._codes[name]
        if value not in codes:
            codes[value] = len(codes)
            self.values[name].append(value)
        return codes[value]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as the page's script reads it."""
        return {
            "fields": list(INDEX_FIELDS),
            "categorical": list(CATEGORICAL),
            "values": self.values,
            "rows": self.rows,
            "chunk_size": CHUNK_SIZE,
        }


def detail_chunks(report: Report) -> Iterator[list[EpisodeDetail]]:
    """The episodes' details, `CHUNK_SIZE` at a time, in the report's row order."""
    chunk: list[EpisodeDetail] = []
    for row in report.rows:
        chunk.append(episode_detail(row, report.workflow.get(row.episode_id)))
        if len(chunk) == CHUNK_SIZE:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


#: gzip level of packed data: 6 compresses within a few percent of 9, at a fraction of its CPU.
PACK_LEVEL = 6


def pack(value: Any) -> str:
    """``value`` as the page loads it: JSON, gzip-compressed, base64-encoded.

    No timestamp in the gzip header, so the same value packs the same. Safe in a script element or a
    JavaScript string: base64 has no ``<``, quote or backslash.
    """
    return pack_json(_compact(value))


def pack_json(text: str) -> str:
    """JSON text packed as `pack` packs a value."""
    data = text.encode("utf-8")
    return base64.b64encode(gzip.compress(data, compresslevel=PACK_LEVEL, mtime=0)).decode("ascii")


def chunk_json(chunk: Sequence[EpisodeDetail]) -> str:
    """A chunk of details as the JSON list the page reads."""
    return "[" + ",".join(detail.to_json() for detail in chunk) + "]"


def unpack(text: str) -> Any:
    """The value `pack` packed (what the page's script does, for tests and tools)."""
    return json.loads(gzip.decompress(base64.b64decode(text.strip())))


def script_json(value: Any) -> str:
    """JSON that is safe inside a ``<script>`` element or a script file: no ``<`` survives as such.

    ``<`` becomes its JSON escape u003c (still the same JSON), so no ``</script>`` or ``<!--`` in
    episode text can end or confuse the element.
    """
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
