"""Per-level task statistics (ToolMaze's Table 1 columns), for any suite.

Tasks with a ``level`` (ToolMaze) are grouped by it, others by ``complexity``. Length is the number
of steps of the shortest valid path (the workflow's steps for suites without alternatives).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mcp_resili.tasks.model import Task


@dataclass(frozen=True)
class LevelStats:
    """Statistics of the tasks of one level."""

    level: str
    tasks: int
    mean_length: float
    min_length: int
    max_length: int
    mean_valid_paths: float
    group_kinds: dict[str, int] = field(default_factory=dict)
    domains: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


def level_statistics(tasks: Iterable[Task]) -> list[LevelStats]:
    """One `LevelStats` per level, in level order."""
    by_level: dict[str, list[Task]] = {}
    for task in tasks:
        by_level.setdefault(str(getattr(task, "level", task.complexity)), []).append(task)
    rows = []
    for level in sorted(by_level):
        members = by_level[level]
        lengths = [len(getattr(t, "shortest_path", None) or t.workflow.steps) for t in members]
        paths = [len(getattr(t, "valid_paths", None) or ((),)) for t in members]
        kinds = Counter(g.kind for t in members for g in getattr(t, "alternative_groups", ()))
        domains = Counter(str(getattr(t, "domain", t.task_type)) for t in members)
        rows.append(
            LevelStats(
                level=level,
                tasks=len(members),
                mean_length=round(statistics.mean(lengths), 2),
                min_length=min(lengths),
                max_length=max(lengths),
                mean_valid_paths=round(statistics.mean(paths), 2),
                group_kinds=dict(sorted(kinds.items())),
                domains=dict(sorted(domains.items())),
            )
        )
    return rows
