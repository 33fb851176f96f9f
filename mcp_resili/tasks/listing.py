"""A suite's tasks as one JSON list: the bytes ``tasks list --json`` writes.

The listing is what pydantic writes for the tasks (`model_listing`). Building and validating 5,040
ResiliBench tasks to dump them again costs seconds; a `LazyTaskList` whose file is canonical (each
task's text is its own dump, computed fields excluded: see `LazyTaskList.from_json`) already holds
those bytes, so `copied_listing` copies them and appends the two computed fields, reading only the
few fields those need (msgspec skips the rest unbuilt). Whatever it cannot copy exactly (another
task class, a task with a ``domain``, an ``original_description`` that is not a string, text that does
not decode) it leaves to the models: it answers None and the caller builds the tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pydantic_core
from pydantic import TypeAdapter

from mcp_resili.tasks.lazy import LazyTaskList
from mcp_resili.tasks.model import Task

#: The computed fields a dumped `Task` ends with, in order; a copied listing appends them itself.
COMPUTED_FIELDS = ("instance_id", "original_description")


class _Head(msgspec.Struct):
    """What the computed fields of a stored task need; msgspec skips its other fields unbuilt."""

    id: str
    description: str
    metadata: dict[str, msgspec.Raw]
    # Present only in a file that did not exclude them: then the copy would repeat them.
    instance_id: Any = msgspec.UNSET
    original_description: Any = msgspec.UNSET


_HEAD = msgspec.json.Decoder(_Head)


def model_listing(tasks: Sequence[Task]) -> bytes:
    """The tasks' JSON list as pydantic dumps it (each task as its own class), no final newline."""
    return TypeAdapter(list[Task]).dump_json(list(tasks), serialize_as_any=True)


def copied_listing(tasks: Sequence[Task]) -> bytes | None:
    """`model_listing` of a canonical `LazyTaskList`, copied from its text; None when it cannot be.

    None also for a list with a task that has a ``domain`` in its metadata: the command line shows
    those in a listing of its own.
    """
    if not isinstance(tasks, LazyTaskList) or not tasks.canonical or tasks.model is not Task:
        return None
    if tuple(Task.model_computed_fields) != COMPUTED_FIELDS:
        return None  # the model gained or lost a computed field: only pydantic knows the bytes now
    items: list[bytes] = []
    for text in tasks.stored_texts():
        item = _copied_task(text)
        if item is None:
            return None
        items.append(item)
    return b"[" + b",".join(items) + b"]"


def _copied_task(text: bytes) -> bytes | None:
    """One stored task's dump with its computed fields appended, or None when it cannot be copied."""
    try:
        head = _HEAD.decode(text)
    except msgspec.DecodeError:  # (ValidationError is a DecodeError): the models will say what is wrong
        return None
    if head.instance_id is not msgspec.UNSET or head.original_description is not msgspec.UNSET:
        return None
    if "domain" in head.metadata or not text.endswith(b"}"):
        return None
    original = head.description
    if "original_description" in head.metadata:
        stored = msgspec.json.decode(head.metadata["original_description"])
        if not isinstance(stored, str):
            return None  # the model writes str() of it, which is Python's spelling, not JSON's
        original = stored
    return b"".join(
        (
            text[:-1],
            b',"instance_id":',
            pydantic_core.to_json(head.id),
            b',"original_description":',
            pydantic_core.to_json(original),
            b"}",
        )
    )
