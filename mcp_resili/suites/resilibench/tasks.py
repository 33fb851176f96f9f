"""ResiliBench tasks: the generator (code), the default run's tasks and the full suite (data)."""

from __future__ import annotations

import gzip
from functools import cache
from importlib import resources

from mcp_resili.tasks.lazy import LazyTaskList
from mcp_resili.tasks.model import Task, TaskSet

DEFAULT_TASKS_FILE = "default.json"
FULL_TASKS_FILE = "full.json.gz"


@cache
def default_tasks() -> tuple[Task, ...]:
    """The default run's 40 tasks (``default.json``): the first 8 of every type of the full suite."""
    text = resources.files(__package__ or __name__).joinpath(DEFAULT_TASKS_FILE).read_text(encoding="utf-8")
    return TaskSet.model_validate_json(text).tasks


@cache
def full_tasks() -> LazyTaskList:
    """The full suite's 5,040 tasks (``full.json.gz``), in interleaved type order.

    Kept as the file's text and built one at a time when used (`LazyTaskList`): all 5,040 as models
    would hold ~100 MB for the whole process.
    """
    raw = gzip.decompress(resources.files(__package__ or __name__).joinpath(FULL_TASKS_FILE).read_bytes())
    # canonical: scripts/regenerate_default_tasks.py writes the validated tasks' own dump (tested).
    return LazyTaskList.from_json(raw, source=FULL_TASKS_FILE, canonical=True)
