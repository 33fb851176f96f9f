"""Big task lists kept as JSON text and built into `Task` models one at a time, when used.

ResiliBench's full list has 5,040 tasks: parsed at once into `Task` models they hold ~100 MB for the
whole process. A `LazyTaskList` keeps each task's JSON, compressed in blocks of `BLOCK_TASKS` tasks
(12 MB of text: ~1.3 MB), plus a light index (`TaskSummary`: id, task type, complexity, which is what
the planner's stratified sample and the reports need), and builds a task when it is asked for. Tasks
still in use somewhere (by an episode in flight) are found again through a weak cache, so both ends
of an episode share one object; the last few hundred built are kept.

When a broken file is noticed: its JSON syntax, the set's header and every task's id, type and
complexity are checked at load; the rest of a task the first time it is built (a one-line
`InvalidTaskError`). The runner builds every task it plans before any episode starts, so a run never
meets a broken task halfway.
"""

from __future__ import annotations

import json
import re
import sys
import weakref
import zlib
from array import array
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, overload

import msgspec
from pydantic import ValidationError

from mcp_resili.errors import UserError
from mcp_resili.tasks.model import Task, TaskSet

#: How many recently built tasks stay alive with nothing else holding them.
RECENT_TASKS = 256
#: Tasks per compressed block: neighbours share one zlib stream (a task alone compresses 2.6x, a block
#: of 16 about 11x), and a block is ~40 KB to inflate when one of its tasks is built.
BLOCK_TASKS = 16
#: zlib level of the blocks.
COMPRESS_LEVEL = 3

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class TaskSummary(NamedTuple):
    """What is known of a task without building it: its id and its (type, complexity) stratum."""

    id: str
    task_type: str
    complexity: str


class InvalidTaskError(UserError):
    """A task file, or a task in it, that does not validate; the message is one line."""


def _problems(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "top level"
    return f"{exc.error_count()} problem(s), first at {where}: {first['msg']}"


@dataclass(eq=False)
class _TaskStore:
    """The compressed tasks and the index of one task file, and its cache of built tasks."""

    #: Block ``n`` is the UTF-8 JSON of tasks ``n * BLOCK_TASKS`` onwards, end to end, compressed.
    blocks: list[bytes]
    #: Each task's span in its block, inflated.
    starts: array[int]
    ends: array[int]
    summaries: tuple[TaskSummary, ...]
    model: type[Task]
    source: str
    #: Each task's text is its model's own compact dump, computed fields excluded (see `from_json`).
    canonical: bool = False
    alive: weakref.WeakValueDictionary[int, Task] = field(default_factory=weakref.WeakValueDictionary)
    recent: deque[Task] = field(default_factory=lambda: deque(maxlen=RECENT_TASKS))
    #: The last block inflated (its number, its bytes): iterating inflates each block once.
    inflated: tuple[int, bytes] = (-1, b"")

    def build(self, position: int) -> Task:
        """The task at ``position``: the one already built if it is still alive, else a new one."""
        task = self.alive.get(position)
        if task is None:
            task = self.parse(position)
            self.alive[position] = task
            # Only new ones: a task asked for again (by the server, the scorer) takes no second place.
            self.recent.append(task)
        return task

    def parse(self, position: int) -> Task:
        """Validate the task at ``position`` (`InvalidTaskError` in one line when it does not)."""
        try:
            return self.model.model_validate_json(self.json(position))
        except ValidationError as exc:
            raise InvalidTaskError(
                f"invalid task {self.summaries[position].id!r} (tasks[{position}] of {self.source}): "
                f"{_problems(exc)}"
            ) from None

    def json(self, position: int) -> bytes:
        """The JSON of the task at ``position``, as stored in the file."""
        number = position // BLOCK_TASKS
        inflated = self.inflated
        if inflated[0] != number:
            inflated = (number, zlib.decompress(self.blocks[number]))
            self.inflated = inflated  # one assignment: another thread sees the old block or this one
        return inflated[1][self.starts[position] : self.ends[position]]


class LazyTaskList(Sequence[Task]):
    """The tasks of a task file (a `TaskSet` as JSON), built one at a time when indexed or iterated.

    Indexing and iteration build tasks (iterating keeps none of them: a pass over all uses the memory
    of a few hundred); ``len``, slicing (another lazy list over the same text) and `summaries` build
    none. The order and the tasks are those of ``TaskSet.model_validate_json(text).tasks``.
    """

    __slots__ = ("_rows", "_store")

    def __init__(self, store: _TaskStore, rows: range) -> None:
        self._store = store
        self._rows = rows

    @classmethod
    def from_json(
        cls, data: str | bytes, *, source: str, model: type[Task] = Task, canonical: bool = False
    ) -> LazyTaskList:
        """Index a task file's JSON (``source`` names it in errors); ``model`` is the task class.

        Raises `InvalidTaskError` in one line when the JSON, the set's header, or any task's id, type
        or complexity is invalid. The rest of each task is validated when it is first built.

        ``canonical`` is the file's promise that each task's text is exactly what the task built
        from it dumps as, computed fields excluded (``model_dump_json(exclude=...)`` of tasks read
        from JSON: one built in Python may differ, an int in a float field dumps as ``300`` and
        reads back as ``300.0``). A listing may then copy the text without building the task
        (`mcp_resili.tasks.listing`). A suite that says so tests it (tests/test_listings.py).
        """
        indexed = _index_fast(data)
        if indexed is not None:
            header, parts, summaries = indexed
        else:  # something the fast index does not take: the careful walk accepts it or says why not
            try:
                text = data.decode("utf-8") if isinstance(data, bytes) else data
                header, starts, ends, summaries = _scan(text, source, model)
            except json.JSONDecodeError as exc:
                raise InvalidTaskError(f"{source}: invalid JSON: {exc}") from None
            except UnicodeDecodeError as exc:
                raise InvalidTaskError(f"{source}: not UTF-8: {exc}") from None
            parts = [text[start:end].encode() for start, end in zip(starts, ends, strict=True)]
        try:
            TaskSet.model_validate({**header, "tasks": ()})
        except ValidationError as exc:
            raise InvalidTaskError(f"{source}: {_problems(exc)}") from None
        blocks, starts, ends = _pack(parts)
        store = _TaskStore(blocks, starts, ends, summaries, model, source, canonical)
        return cls(store, range(len(summaries)))

    @property
    def summaries(self) -> tuple[TaskSummary, ...]:
        """Every task's id, type and complexity, in order, without building any task."""
        if self._rows == range(len(self._store.summaries)):
            return self._store.summaries
        return tuple(self._store.summaries[p] for p in self._rows)

    @property
    def model(self) -> type[Task]:
        """The task class every task is built as."""
        return self._store.model

    @property
    def canonical(self) -> bool:
        """Whether each task's stored text is its own dump (``from_json(..., canonical=True)``)."""
        return self._store.canonical

    def stored_texts(self) -> Iterator[bytes]:
        """Each task's JSON as stored in the file (UTF-8), in order, without building any task."""
        for position in self._rows:
            yield self._store.json(position)

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> Task: ...

    @overload
    def __getitem__(self, index: slice) -> LazyTaskList: ...

    def __getitem__(self, index: int | slice) -> Task | LazyTaskList:
        if isinstance(index, slice):
            return LazyTaskList(self._store, self._rows[index])
        try:
            position = self._rows[index]
        except IndexError:
            raise IndexError(f"task index {index} out of range for {len(self)} tasks") from None
        return self._store.build(position)

    def __iter__(self) -> Iterator[Task]:
        for position in self._rows:
            yield self._store.build(position)

    def __repr__(self) -> str:
        return f"<LazyTaskList: {len(self)} tasks of {self._store.source}>"


def task_summaries(tasks: Sequence[Task]) -> tuple[TaskSummary, ...]:
    """The `TaskSummary` of every task in ``tasks``; a `LazyTaskList` builds none to answer."""
    if isinstance(tasks, LazyTaskList):
        return tasks.summaries
    return tuple(TaskSummary(t.id, t.task_type, t.complexity) for t in tasks)


def _pack(parts: Sequence[bytes]) -> tuple[list[bytes], array[int], array[int]]:
    """Each task's JSON (UTF-8) in compressed blocks, and its span in its block."""
    blocks: list[bytes] = []
    block_starts: array[int] = array("q")
    block_ends: array[int] = array("q")
    for first in range(0, len(parts), BLOCK_TASKS):
        block = parts[first : first + BLOCK_TASKS]
        offset = 0
        for part in block:
            block_starts.append(offset)
            offset += len(part)
            block_ends.append(offset)
        # Level 3: about a third of the default level's time for 17% more bytes (1.3 MB for ResiliBench).
        blocks.append(zlib.compress(b"".join(block), COMPRESS_LEVEL))
    return blocks, block_starts, block_ends


class _IndexFields(msgspec.Struct):
    """The fields of a task the index keeps; msgspec skips the others without building them."""

    id: Any = None
    task_type: Any = None
    complexity: Any = None


_TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_INDEX_FIELDS = msgspec.json.Decoder(_IndexFields)


def _index_fast(data: str | bytes) -> tuple[dict[str, Any], list[bytes], tuple[TaskSummary, ...]] | None:
    """(header, each task's text, summaries) of a well-formed file, read by msgspec; None otherwise.

    Only the header and each task's id, type and complexity are decoded. Anything unusual (invalid
    JSON, no ``tasks`` list, a task that is not an object or lacks a string id, type or complexity)
    is None: `_scan` then reads the file as before and names the problem.
    """
    try:
        top = _TOP_LEVEL.decode(data.encode() if isinstance(data, str) else data)
        if "tasks" not in top:
            return None
        raws = _RAW_LIST.decode(top.pop("tasks"))
        header = {key: msgspec.json.decode(value) for key, value in top.items()}
        parts = [bytes(raw) for raw in raws]
        fields = [_INDEX_FIELDS.decode(part) for part in parts]
    except (msgspec.DecodeError, UnicodeEncodeError):
        return None
    summaries: list[TaskSummary] = []
    for found in fields:
        task_id, task_type, complexity = found.id, found.task_type, found.complexity
        if not (isinstance(task_id, str) and isinstance(task_type, str) and isinstance(complexity, str)):
            return None
        summaries.append(TaskSummary(task_id, sys.intern(task_type), sys.intern(complexity)))
    return header, parts, tuple(summaries)


def _skip(text: str, position: int) -> int:
    match = _WHITESPACE.match(text, position)
    return match.end() if match else position


def _expect(text: str, position: int, allowed: str, source: str) -> str:
    found = text[position : position + 1]
    if not found or found not in allowed:
        shown = repr(found) if found else "the end"
        wanted = " or ".join(repr(c) for c in allowed)
        raise InvalidTaskError(f"{source}: expected {wanted} at char {position}, found {shown}")
    return found


def _scan(
    text: str, source: str, model: type[Task]
) -> tuple[dict[str, Any], array[int], array[int], tuple[TaskSummary, ...]]:
    """Walk the set's top-level object; each task is decoded (C speed), indexed and dropped."""
    header: dict[str, Any] = {}
    found_tasks = False
    starts: array[int] = array("q")
    ends: array[int] = array("q")
    summaries: list[TaskSummary] = []
    position = _skip(text, 0)
    _expect(text, position, "{", source)
    position = _skip(text, position + 1)
    if not text.startswith("}", position):
        while True:
            key, position = _DECODER.raw_decode(text, position)
            if not isinstance(key, str):
                raise InvalidTaskError(f"{source}: expected a key at char {position}")
            position = _skip(text, position)
            _expect(text, position, ":", source)
            position = _skip(text, position + 1)
            if key == "tasks":
                found_tasks = True
                del starts[:], ends[:], summaries[:]  # a repeated key: the last one counts, as in JSON
                position = _scan_tasks(text, position, source, model, starts, ends, summaries)
            else:
                header[key], position = _DECODER.raw_decode(text, position)
            position = _skip(text, position)
            if _expect(text, position, ",}", source) == "}":
                break
            position = _skip(text, position + 1)
    position = _skip(text, position + 1)
    if position < len(text):
        raise InvalidTaskError(f"{source}: extra data after the task set at char {position}")
    if not found_tasks:
        raise InvalidTaskError(f"{source}: no 'tasks' list")
    return header, starts, ends, tuple(summaries)


def _scan_tasks(
    text: str,
    position: int,
    source: str,
    model: type[Task],
    starts: array[int],
    ends: array[int],
    summaries: list[TaskSummary],
) -> int:
    """Index the ``tasks`` array starting at ``position``; the position after it."""
    _expect(text, position, "[", source)
    position = _skip(text, position + 1)
    if text.startswith("]", position):
        return position + 1
    while True:
        value, end = _DECODER.raw_decode(text, position)
        summaries.append(_summary(value, text[position:end], len(summaries), source, model))
        starts.append(position)
        ends.append(end)
        position = _skip(text, end)
        if _expect(text, position, ",]", source) == "]":
            return position + 1
        position = _skip(text, position + 1)


def _summary(value: Any, raw: str, index: int, source: str, model: type[Task]) -> TaskSummary:
    """The index entry of one decoded task; a task without a usable id, type or complexity is refused."""
    fields = [value.get(k) for k in TaskSummary._fields] if isinstance(value, dict) else []
    strings = [f for f in fields if isinstance(f, str)]
    if len(strings) == len(TaskSummary._fields):
        task_id, task_type, complexity = strings
        # Types and complexities repeat thousands of times: one string each.
        return TaskSummary(task_id, sys.intern(task_type), sys.intern(complexity))
    where = f"tasks[{index}] of {source}"
    try:
        model.model_validate_json(raw)
    except ValidationError as exc:
        raise InvalidTaskError(f"invalid task ({where}): {_problems(exc)}") from None
    raise InvalidTaskError(f"invalid task ({where}): id, task_type and complexity must be strings")
