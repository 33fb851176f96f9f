"""Per-level task statistics (ToolMaze's Table 1 columns), for any suite.

Tasks with a ``level`` (ToolMaze) are grouped by it, others by ``complexity``; a last row ``all``
covers every task. Length is the number of steps of the shortest valid path (the workflow's steps
for suites without alternatives); width is the largest number of workflow steps no dependency
orders (1 for a chain, 2 or more with parallel branches); tools and groups count the distinct tools
on the valid paths and the distinct alternative groups (by corpus group where tasks name one).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
from networkx.algorithms import bipartite

from mcp_resili.tasks.model import Task, Workflow
from mcp_resili.tasks.order import natural_sorted

ALL = "all"


@dataclass(frozen=True)
class LevelStats:
    """Statistics of the tasks of one level (or of all tasks: level ``all``)."""

    level: str
    tasks: int
    mean_length: float
    min_length: int
    max_length: int
    mean_valid_paths: float
    #: Alternative-group occurrences by kind (a group used by two tasks counts twice).
    group_kinds: dict[str, int] = field(default_factory=dict)
    domains: dict[str, int] = field(default_factory=dict)
    #: Mean width of the workflow DAG: how many steps can run in parallel at most.
    mean_width: float = 1.0
    #: Distinct tools on the valid paths.
    tools: int = 0
    #: Distinct alternative groups by kind.
    groups: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


def workflow_width(workflow: Workflow) -> int:
    """The largest antichain of the workflow DAG (Dilworth: steps minus a maximum chain matching)."""
    closure = nx.transitive_closure_dag(workflow.graph())
    pairs: nx.Graph[tuple[str, str]] = nx.Graph()
    left = [("out", s.id) for s in workflow.steps]
    pairs.add_nodes_from(left)
    pairs.add_nodes_from(("in", s.id) for s in workflow.steps)
    pairs.add_edges_from((("out", a), ("in", b)) for a, b in closure.edges)
    matching = bipartite.hopcroft_karp_matching(pairs, top_nodes=left)
    return len(workflow.steps) - len(matching) // 2


def _paths(task: Task) -> Sequence[Sequence[str]]:
    return getattr(task, "valid_paths", None) or (tuple(s.tool for s in task.workflow.steps),)


def _row(level: str, members: Sequence[Task]) -> LevelStats:
    lengths = [len(getattr(t, "shortest_path", None) or t.workflow.steps) for t in members]
    groups = [g for t in members for g in getattr(t, "alternative_groups", ())]
    # Groups are told apart by the corpus group they instantiate where the task names one.
    distinct = {
        getattr(g, "corpus_group", None) or f"{t.id}:{g.id}": g.kind
        for t in members
        for g in getattr(t, "alternative_groups", ())
    }
    return LevelStats(
        level=level,
        tasks=len(members),
        mean_length=round(statistics.mean(lengths), 2),
        min_length=min(lengths),
        max_length=max(lengths),
        mean_valid_paths=round(statistics.mean(len(_paths(t)) for t in members), 2),
        group_kinds=dict(sorted(Counter(g.kind for g in groups).items())),
        domains=dict(sorted(Counter(str(getattr(t, "domain", t.task_type)) for t in members).items())),
        mean_width=round(statistics.mean(workflow_width(t.workflow) for t in members), 2),
        tools=len({tool for t in members for path in _paths(t) for tool in path}),
        groups=dict(sorted(Counter(distinct.values()).items())),
    )


def level_statistics(tasks: Iterable[Task]) -> list[LevelStats]:
    """One `LevelStats` per level, in level order, then one for all tasks when there are several levels."""
    every = list(tasks)
    by_level: dict[str, list[Task]] = {}
    for task in every:
        by_level.setdefault(str(getattr(task, "level", task.complexity)), []).append(task)
    rows = [_row(level, by_level[level]) for level in natural_sorted(by_level)]
    if len(rows) > 1:
        rows.append(_row(ALL, every))
    return rows
