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
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_resili.report.build import ParsedLines, Report, parse_trace
from mcp_resili.store import EpisodeRow

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


def episode_detail(
    row: EpisodeRow, workflow: Mapping[str, float | int | None] | None, lines: ParsedLines | None = None
) -> EpisodeDetail:
    """One episode for the episode view: outcome, judge reasons, workflow metrics, every event.

    ``lines``: its trace as `parse_trace` read it, when it was read already (else read here).
    """
    events: list[str] = []
    faults = 0
    for line, event in parse_trace(row.trace)[1] if lines is None else lines:
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


class DetailSpool:
    """The episodes' details made in the report's one pass over the traces, packed and put aside.

    Handed to `mcp_resili.report.build.load_report` as its observer, it turns each episode into its
    detail as the workflow metrics' pass reads the trace (so no trace is read twice), packs every
    `CHUNK_SIZE` of them as `pack_json` does and spools the packed text to a temporary file: memory
    does not grow with the run. The HTML writers take the packed chunks and the index from it.
    """

    def __init__(self) -> None:
        self.index = BrowserIndex()
        self._chunk: list[EpisodeDetail] = []
        # Open for the spool's life (closed by `close` or with the spool): no with-block fits.
        self._file = tempfile.TemporaryFile()  # noqa: SIM115
        self._spans: list[tuple[int, int]] = []

    def __call__(
        self, row: EpisodeRow, workflow: Mapping[str, float | int | None] | None, lines: ParsedLines
    ) -> None:
        """Add one episode (see `mcp_resili.report.build.TraceObserver`)."""
        detail = episode_detail(row, workflow, lines)
        self.index.add(detail)
        self._chunk.append(detail)
        if len(self._chunk) == CHUNK_SIZE:
            self._flush()

    def _flush(self) -> None:
        if not self._chunk:
            return
        data = pack_json(chunk_json(self._chunk)).encode("ascii")
        self._file.seek(0, 2)
        self._spans.append((self._file.tell(), len(data)))
        self._file.write(data)
        self._chunk = []

    def packed_chunks(self) -> Iterator[str]:
        """Each chunk as `pack_json` packs it, in the report's row order."""
        self._flush()
        for start, length in self._spans:
            self._file.seek(start)
            yield self._file.read(length).decode("ascii")

    def close(self) -> None:
        """Drop the spooled chunks."""
        self._file.close()


def packed_details(report: Report) -> tuple[BrowserIndex, Iterator[str]]:
    """The browser index and the packed chunks of ``report``: its `DetailSpool`'s, or made here.

    The index is complete once the chunks have all been taken.
    """
    if isinstance(report.observer, DetailSpool):
        return report.observer.index, report.observer.packed_chunks()
    index = BrowserIndex()

    def chunks() -> Iterator[str]:
        for chunk in detail_chunks(report):
            for detail in chunk:
                index.add(detail)
            yield pack_json(chunk_json(chunk))

    return index, chunks()


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


#: gzip level of packed data. Measured on a scripted sweep's chunks: level 3 takes a third of level
#: 6's CPU for 38% more bytes (about 1,600 per episode, well inside the 2,500 budget); levels 1-3
#: cost the same, 4 and up climb steeply. Compression is a tenth of a 20,000-episode report's CPU.
PACK_LEVEL = 3


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
