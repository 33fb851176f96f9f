"""Suites: a tool library, tasks, prompts, a default fault plan and a scorer, under one name.

A suite is the unit the server serves and the runner runs. New benchmarks plug in by adding a
module here and an entry in ``_FACTORIES``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

from mcp_resili.errors import UserError
from mcp_resili.registry import ToolLibrary
from mcp_resili.scoring.model import Score
from mcp_resili.store import EpisodeRow
from mcp_resili.tasks.model import Task
from mcp_resili.trace.model import Trace

if TYPE_CHECKING:
    from mcp_resili.report.section import ReportSection


class UnknownTaskError(UserError, KeyError):
    """A task id the suite does not have; the message suggests close matches."""

    def __str__(self) -> str:
        return str(self.args[0])


class UnknownSuiteError(UserError, KeyError):
    """A suite name that is not registered."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Suite:
    """Everything needed to serve, run and score one benchmark."""

    name: str
    description: str
    library: ToolLibrary
    load_tasks: Callable[[], tuple[Task, ...]] = field(repr=False)
    render_prompt: Callable[[Task, str], str] = field(repr=False)
    score: Callable[[Task, Trace], Score] = field(repr=False)
    default_faults: str = "none"
    #: Variant names; a variant may take parameters after a colon (``flawed:missing_step:light``),
    #: which ``render_prompt`` validates.
    variants: tuple[str, ...] = ("baseline",)
    enforce_dependencies: bool = False
    #: The tool state an episode of ``task`` starts from (None: an empty state).
    initial_state: Callable[[Task | None], dict[str, Any]] | None = field(default=None, repr=False)
    #: Suite-specific summary of stored episodes for ``run --json`` (None: the generic one only).
    summarize: Callable[[Sequence[EpisodeRow]], dict[str, Any] | None] | None = field(
        default=None, repr=False
    )
    #: Terminal rendering (a rich renderable) of ``summarize``'s result, for runs without ``--json``.
    summary_table: Callable[[dict[str, Any]], Any] | None = field(default=None, repr=False)
    #: The tasks a run uses when none are selected (None: all tasks). Loaded without loading `tasks`.
    load_default_tasks: Callable[[], tuple[Task, ...]] | None = field(default=None, repr=False)
    #: Serve the unfaulted, unscored ``search_tools`` and ``tool_info`` discovery tools.
    discovery: bool = False
    #: Whether the runner stops episodes by ResiliBench's termination rules (5 failures in a row, ...).
    stop_rules: bool = True
    #: The suite's own sections of ``mcp-resili report`` (tables, SVG charts, JSON data), placed
    #: after the generic outcome table (None: generic sections only).
    report_sections: Callable[[Sequence[EpisodeRow]], Sequence[ReportSection]] | None = field(
        default=None, repr=False
    )

    @cached_property
    def tasks(self) -> tuple[Task, ...]:
        """All tasks, loaded once."""
        return self.load_tasks()

    @cached_property
    def default_tasks(self) -> tuple[Task, ...]:
        """The default run's tasks."""
        return self.load_default_tasks() if self.load_default_tasks is not None else self.tasks

    @cached_property
    def _by_id(self) -> dict[str, Task]:
        return {t.id: t for t in self.tasks}

    @cached_property
    def _default_by_id(self) -> dict[str, Task]:
        return {t.id: t for t in self.default_tasks}

    def task(self, task_id: str) -> Task:
        """The task ``task_id``, or `UnknownTaskError` with suggestions."""
        if task_id in self._default_by_id:  # the default run never loads the full list
            return self._default_by_id[task_id]
        try:
            return self._by_id[task_id]
        except KeyError:
            close = difflib.get_close_matches(task_id, self._by_id, n=3)
            hint = (
                f"; did you mean {', '.join(close)}?"
                if close
                else f"; see `mcp-resili tasks list --suite {self.name}`"
            )
            raise UnknownTaskError(f"unknown task {task_id!r} in suite {self.name!r}{hint}") from None

    def task_info(self, task_id: str) -> dict[str, str]:
        """The breakdown keys of a task (type, complexity) for reports; empty for an unknown id."""
        try:
            task = self.task(task_id)
        except UnknownTaskError:
            return {}
        return {"task_type": task.task_type, "complexity": task.complexity}

    def prompt(self, task: Task, variant: str = "baseline") -> str:
        """The user prompt of ``task`` in ``variant``."""
        if variant.partition(":")[0] not in self.variants:
            raise ValueError(
                f"unknown variant {variant!r} for suite {self.name!r}; choose from {list(self.variants)}"
            )
        return self.render_prompt(task, variant)


def _resilibench() -> Suite:
    from mcp_resili.suites.resilibench import resilibench_suite

    return resilibench_suite()


def _reliabilitybench() -> Suite:
    from mcp_resili.suites.reliabilitybench import reliabilitybench_suite

    return reliabilitybench_suite()


def _toolmaze() -> Suite:
    from mcp_resili.suites.toolmaze import toolmaze_suite

    return toolmaze_suite()


_FACTORIES: dict[str, Callable[[], Suite]] = {
    "resilibench": _resilibench,
    "reliabilitybench": _reliabilitybench,
    "toolmaze": _toolmaze,
}

#: The suite used when none is named.
DEFAULT_SUITE = "resilibench"


def suite_names() -> list[str]:
    """Registered suite names."""
    return sorted(_FACTORIES)


@cache
def get_suite(name: str = DEFAULT_SUITE) -> Suite:
    """The suite called ``name``, or `UnknownSuiteError` listing the registered ones."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise UnknownSuiteError(f"unknown suite {name!r}; available: {', '.join(suite_names())}") from None
    return factory()
