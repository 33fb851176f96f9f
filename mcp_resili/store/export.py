"""Stored episodes as flat rows (JSONL, CSV, Parquet) and traces as files: reads the store only.

One row per episode: the run and the matrix cell, the outcome, every score component (``score_*``),
a summary of the fault ledger (``injected_*``: how many faults were injected, explicit or implicit,
and how many of each type), the termination, tokens and cost. `FIXED_COLUMNS` is the documented
schema; ``score_*`` and ``injected_<type>`` columns depend on the suite and the faults met, and are
listed in sorted order after the fixed ones. Parquet needs pyarrow (the ``[parquet]`` extra).
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mcp_resili.errors import UserError
from mcp_resili.store.sqlite import EpisodeRow, RunRow, Store
from mcp_resili.trace.model import trace_lines, trace_stem

Scalar = str | int | float | bool | None
#: A cell: a scalar, or a list of strings (``reasons``).
Value = Scalar | list[str]

#: Version of the row layout, written into Parquet metadata; bumped when a column changes meaning.
#: 2: `architecture` and `stop_rule` columns; 3: `reasons` is a list (was a JSON-encoded string).
EXPORT_VERSION = 3
FORMATS = ("jsonl", "csv", "parquet")


@dataclass(frozen=True)
class Column:
    """One column of the export: name, logical type (string, int64, float64, bool, list<string>), meaning."""

    name: str
    type: str
    description: str


FIXED_COLUMNS = (
    Column("run_id", "string", "the run"),
    Column("suite", "string", "the run's suite"),
    Column("seed", "int64", "the run's seed (every fault draw derives from it)"),
    Column("episode_id", "string", "unique within the run"),
    Column("model", "string", "model spec, e.g. `scripted:oracle`, `anthropic:claude-…`"),
    Column("architecture", "string", "the agent architecture (`react`, `reflexion`)"),
    Column("faults", "string", "fault spec of the episode's server"),
    Column("variant", "string", "prompt variant (`baseline`, `flawed:TYPE`, `eps=0.2`…)"),
    Column("task_id", "string", "the task"),
    Column("trial", "int64", "trial number (0-based); with the task it fixes the fault draws"),
    Column(
        "termination", "string", "why the episode ended (`completed`, `max_turns`, `infrastructure_error`…)"
    ),
    Column("stop_rule", "string", "the suite's stop rule that ended the episode, if one did (else null)"),
    Column("label", "string", "the suite's outcome label (`full`/`partial`/`failure`…); null: not scored"),
    Column("value", "float64", "the suite's score value; null when not scored"),
    Column("infrastructure_error", "bool", "true when the episode says nothing about the agent"),
    Column(
        "reasons",
        "list<string>",
        "the judge's reasons, a list (JSONL: an array; Parquet: a list column; CSV: a JSON array)",
    ),
    Column("turns", "int64", "model turns"),
    Column("tool_calls", "int64", "tool calls the server handled"),
    Column("tool_errors", "int64", "tool calls that returned an error (injected or not)"),
    Column("injected_total", "int64", "faults injected into this episode's calls"),
    Column("injected_explicit", "int64", "… of which explicit (an error the agent can see)"),
    Column("injected_implicit", "int64", "… of which implicit (a plausible but wrong result)"),
    Column("input_tokens", "int64", "model input tokens"),
    Column("output_tokens", "int64", "model output tokens"),
    Column("cost_usd", "float64", "USD by the price table; null when the model has no known price"),
)


def encodable(text: str) -> str:
    r"""``text`` with each lone surrogate (``"\ud800"``) written as the six characters ``\ud800``.

    A stored score can hold a lone surrogate (JSON carries it as an escape), but UTF-8 cannot: writing
    it raw fails. It is backslash-escaped (``backslashreplace``), not replaced by U+FFFD, so nothing is
    lost and every format shows the same text: in JSONL it lands inside a JSON string, where
    ``\ud800`` is the JSON escape and reads back as the surrogate itself (JSON escapes every
    backslash of the data, so the escape cannot merge with one); in a CSV cell it is plain text
    (and in the ``reasons`` cell, JSON text, it again reads back as the surrogate); in Parquet, whose
    strings must be UTF-8 (the ``reasons`` list's items too), it is the same text as in CSV. Any other
    text is returned unchanged.
    """
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class ExportError(UserError):
    """An export that cannot be written (bad format, missing extra)."""


class TextSink(Protocol):
    """Where text rows go: an open text file, or anything else with ``write(str)``."""

    def write(self, text: str, /) -> object:
        """Write ``text``."""


def ledger_summary(trace: str) -> dict[str, Any]:
    """Counts from an episode's JSONL trace: turns, tool calls and errors, injected faults by type.

    Read with ``json`` line by line rather than the trace models: an export of 20,000 episodes
    should not validate every event again, and a damaged line is skipped, not fatal.
    """
    turns = calls = errors = explicit = implicit = 0
    by_type: dict[str, int] = {}
    for line in trace_lines(trace):
        if '"event"' not in line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = event.get("event")
        if kind == "model_turn":
            turns += 1
        elif kind == "tool_call":
            calls += 1
            errors += bool(event.get("is_error"))
            fault = event.get("fault")
            if isinstance(fault, dict):
                name = str(fault.get("type", "unknown"))
                by_type[name] = by_type.get(name, 0) + 1
                if fault.get("explicit", True):
                    explicit += 1
                else:
                    implicit += 1
    return {
        "turns": turns,
        "tool_calls": calls,
        "tool_errors": errors,
        "injected_total": explicit + implicit,
        "injected_explicit": explicit,
        "injected_implicit": implicit,
        "by_type": dict(sorted(by_type.items())),
    }


def episode_record(run: RunRow, row: EpisodeRow) -> dict[str, Value]:
    """One episode as a flat row (see `FIXED_COLUMNS`, then ``score_*`` and ``injected_<type>``)."""
    score = row.score or {}
    ledger = ledger_summary(row.trace)
    record: dict[str, Value] = {
        "run_id": row.run_id,
        "suite": run.suite,
        "seed": run.seed,
        "episode_id": row.episode_id,
        "model": row.model,
        "architecture": row.architecture,
        "faults": row.faults,
        "variant": row.variant,
        "task_id": row.task_id,
        "trial": row.trial,
        "termination": row.termination,
        "stop_rule": row.stop_rule,
        "label": row.label,
        "value": row.value,
        "infrastructure_error": row.label is None,
        "reasons": [str(reason) for reason in score.get("reasons", [])],
        **{key: ledger[key] for key in ("turns", "tool_calls", "tool_errors")},
        **{key: ledger[key] for key in ("injected_total", "injected_explicit", "injected_implicit")},
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "cost_usd": row.cost_usd,
    }
    for name, value in sorted(score.get("components", {}).items()):
        record[f"score_{name}"] = _scalar(value)
    for name, count in ledger["by_type"].items():
        record[f"injected_{name}"] = count
    return record


def _scalar(value: Any) -> Scalar:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, sort_keys=True)  # a nested component stays one cell


def export_records(store: Store, run_ids: Sequence[str | None]) -> Iterator[dict[str, Value]]:
    """Rows of every episode of the given runs (``None``: the latest run), run by run."""
    for run_id in run_ids:
        run = store.require_run(run_id)
        for row in store.iter_episodes(run.id):
            yield episode_record(run, row)


def _column_type(values: Iterable[Value]) -> str:
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return "string"
    if kinds == {bool}:
        return "bool"
    if kinds == {int}:
        return "int64"
    if kinds <= {int, float}:
        return "float64"
    return "string"


def columns(records: Sequence[dict[str, Value]]) -> list[Column]:
    """The columns of ``records``: the fixed ones, then the suite's and fault types' in sorted order.

    A column whose values mix types (a component that is a number in one suite and text in another)
    is a string column.
    """
    fixed = {c.name for c in FIXED_COLUMNS}
    extra = sorted({key for record in records for key in record} - fixed)
    out = list(FIXED_COLUMNS)
    for name in extra:
        kind = _column_type(record.get(name) for record in records)
        what = "score component" if name.startswith("score_") else "faults of this type injected"
        out.append(Column(name, kind, what))
    return out


def _cell(value: Value, kind: str) -> Value:
    """``value`` as a column of type ``kind`` holds it (a missing count is 0, a mixed column text)."""
    if value is None:
        return None
    if kind == "string" and not isinstance(value, str):
        return json.dumps(value)
    if kind == "float64" and isinstance(value, int | float):
        return float(value)
    return value


def _typed(records: Sequence[dict[str, Value]], cols: Sequence[Column]) -> dict[str, list[Value]]:
    table: dict[str, list[Value]] = {}
    for col in cols:
        missing: Value = 0 if col.name.startswith("injected_") else None
        table[col.name] = [_cell(r.get(col.name, missing), col.type) for r in records]
    return table


def write_jsonl(records: Iterable[dict[str, Value]], out: TextSink) -> int:
    """One JSON object per line, values as stored (no column filling); returns the row count.

    A lone surrogate in a value is written as its JSON escape (`encodable`).
    """
    count = 0
    for record in records:
        out.write(encodable(json.dumps(record, ensure_ascii=False)) + "\n")
        count += 1
    return count


def write_csv(records: Sequence[dict[str, Value]], out: TextSink) -> int:
    r"""A header and one line per row; empty cells are nulls, booleans ``true``/``false``.

    Lines end with ``\n``; a cell holding a line break (``\n``, ``\r``) or a comma or quote is
    quoted, so every row reads back as one row. A lone surrogate is written backslash-escaped, as
    the text ``\ud800`` (`encodable`).
    """
    cols = columns(records)
    table = _typed(records, cols)
    # The csv writer quotes a cell only for characters of its line terminator: with "\n" alone a
    # bare "\r" stayed unquoted and split the row when read back. So each row is written with
    # "\r\n" (quoting both) and its ending then turned back into the export's "\n".
    row = io.StringIO()
    writer = csv.writer(row, lineterminator="\r\n")

    def emit(cells: list[str]) -> None:
        writer.writerow(cells)
        out.write(encodable(row.getvalue()[:-2]) + "\n")
        row.seek(0)
        row.truncate()

    emit([c.name for c in cols])
    for i in range(len(records)):
        emit(["" if (v := table[c.name][i]) is None else _csv(v) for c in cols])
    return len(records)


def _csv(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):  # a list cell (``reasons``) is a JSON array
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def write_parquet(records: Sequence[dict[str, Value]], path: Path) -> int:
    """A Parquet file with typed columns and the export version in its metadata; needs pyarrow.

    Strings are UTF-8: a lone surrogate is written backslash-escaped, as in CSV (`encodable`).
    """
    try:
        # Optional extra; typed stubs are not installed with it.
        import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        raise ExportError(
            "Parquet export needs pyarrow: pip install 'mcp-resili[parquet]' (or use --format jsonl|csv)"
        ) from None
    cols = columns(records)
    table = _typed(records, cols)
    types = {
        "string": pa.string(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
        "list<string>": pa.list_(pa.string()),
    }
    schema = pa.schema(
        [pa.field(c.name, types[c.type]) for c in cols],
        metadata={"mcp_resili.export_version": str(EXPORT_VERSION)},
    )
    for c in cols:
        if c.type == "string":
            table[c.name] = [encodable(v) if isinstance(v, str) else v for v in table[c.name]]
        elif c.type == "list<string>":
            table[c.name] = [[encodable(x) for x in v] if isinstance(v, list) else v for v in table[c.name]]
    arrays = [pa.array(table[c.name], type=types[c.type]) for c in cols]
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), path)
    return len(records)


def write_traces(store: Store, run_ids: Sequence[str | None], out: TextSink) -> int:
    """Every episode's trace, one after another; returns the number of episodes.

    Each trace starts with its header line and every line names its episode, so the stream is one
    JSONL file. A lone surrogate in a trace is written as its JSON escape (`encodable`).
    """
    count = 0
    for run_id in run_ids:
        run = store.require_run(run_id)
        for row in store.iter_episodes(run.id):
            trace = encodable(row.trace)
            out.write(trace if trace.endswith("\n") else trace + "\n")
            count += 1
    return count


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A new empty file beside ``path`` to write instead of it: on success it replaces ``path``.

    If the block fails (a damaged stored row, an interrupt) the new file is removed and an existing
    ``path`` is left as it was, never emptied or cut short. The new file gets an existing ``path``'s
    permissions (else the umask's). A symlink's target is replaced, the link kept. An existing
    ``path`` that is not a regular file (``/dev/null``, a FIFO, a folder) is yielded itself: it
    cannot be replaced, and writing it (or failing to) is what the caller asked for.
    """
    target = Path(os.path.realpath(path))
    if target.is_symlink():  # realpath leaves a link it cannot resolve: a loop
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    if target.exists() and not target.is_file():
        yield path
        return
    partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
    try:
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as exc:  # name the user's path, not the hidden temporary one
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        if target.exists():
            os.chmod(partial, stat.S_IMODE(target.stat().st_mode))
        yield partial
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def trace_file_name(episode_id: str) -> str:
    """The file name of an episode's trace, as `serve --trace-dir` names them (`trace_stem`)."""
    return f"{trace_stem(episode_id)}.jsonl"


def write_trace_file(directory: Path, row: EpisodeRow) -> Path:
    """Write ``row``'s trace as ``directory/<episode id>.jsonl``, atomically (never half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / trace_file_name(row.episode_id)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(row.trace, encoding="utf-8")
    partial.replace(path)
    return path


def with_trace_file(
    directory: Path | None, then: Callable[[EpisodeRow], None]
) -> Callable[[EpisodeRow], None]:
    """A runner callback that writes each stored episode's trace into ``directory``, then calls ``then``.

    ``directory`` None: ``then`` itself (``run`` without ``--trace-dir``). The directory is created
    here, so a path that cannot be one fails before the run starts.
    """
    if directory is None:
        return then
    directory.mkdir(parents=True, exist_ok=True)  # a bad path fails now, not in the middle of the run

    def write_then(row: EpisodeRow) -> None:
        write_trace_file(directory, row)
        then(row)

    return write_then
