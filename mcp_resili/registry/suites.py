"""The suite contract: a tool library, tasks, prompts, fault specs, a scorer and report parts under one name.

A suite is the unit the server serves and the runner runs. It is written in the vocabulary of the layers
below it (tools, tasks, agents, faults, traces, scores, stored rows, report sections), so that every
layer above can be handed a `Suite`, or the parts of it it needs, and none has to look one up. How
suites are found by name is `mcp_resili.registry.loader`. See ``docs/suites.md``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from mcp_resili.errors import UserError
from mcp_resili.faults.spec import FaultSpecScope
from mcp_resili.report.summary import ComponentColumn
from mcp_resili.scoring.termination import NO_STOP_RULES, StopRules
from mcp_resili.tools.library import ToolLibrary

if TYPE_CHECKING:
    from mcp_resili.agents.model import Model
    from mcp_resili.faults.spec import FaultSpecParser
    from mcp_resili.registry.environment import EpisodeEnvironment
    from mcp_resili.report.section import ReportSection
    from mcp_resili.scoring.model import Score
    from mcp_resili.store import EpisodeRow
    from mcp_resili.tasks.lazy import TaskSummary
    from mcp_resili.tasks.model import Task
    from mcp_resili.trace.model import Trace, TraceEvent


class UnknownTaskError(UserError, KeyError):
    """A task id the suite does not have; the message suggests close matches."""

    def __str__(self) -> str:
        return str(self.args[0])


class UnknownSuiteError(UserError, KeyError):
    """A suite name that is not registered."""

    def __str__(self) -> str:
        return str(self.args[0])


class SuitePromptError(UserError):
    """A task's prompt could not be written: a variant it does not take, or a bug in the suite."""


class SuiteLoadError(UserError):
    """A registered suite that cannot be loaded (import error, bad factory, invalid task data)."""


@dataclass(frozen=True)
class Suite:
    """Everything needed to serve, run and score one benchmark."""

    name: str
    description: str
    library: ToolLibrary
    #: All tasks: a tuple, or for a big list a `mcp_resili.tasks.lazy.LazyTaskList` (tasks built on use).
    load_tasks: Callable[[], Sequence[Task]] = field(repr=False)
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
    load_default_tasks: Callable[[], Sequence[Task]] | None = field(default=None, repr=False)
    #: Serve the unfaulted, unscored ``search_tools`` and ``tool_info`` discovery tools.
    discovery: bool = False
    #: The suite's own stop rules (`mcp_resili.scoring.termination.StopRules`): when the runner ends
    #: an episode early. None: none (only the budgets and the agent end an episode).
    stop_rules: StopRules | None = None
    #: Score components summarised as extra columns of the outcome table (terminal, HTML, JSON,
    #: exports), e.g. ResiliBench's bounds; () for none.
    summary_columns: tuple[ComponentColumn, ...] = ()
    #: The suite's own sections of ``mcp-resili report`` (tables, SVG charts, JSON data), placed
    #: after the generic outcome table (None: generic sections only).
    report_sections: Callable[[Sequence[EpisodeRow]], Sequence[ReportSection]] | None = field(
        default=None, repr=False
    )
    #: The suite's own fault SPEC names (``toolmaze`` for ``toolmaze:P1``...), beside the generic ones.
    fault_specs: Mapping[str, FaultSpecParser] = field(default_factory=dict, repr=False)
    #: The suite's own scripted agents, run as ``scripted:NAME`` (beside the generic oracle and naive).
    agents: Mapping[str, Callable[[], Model]] = field(default_factory=dict, repr=False)
    #: The models (SPECs such as ``scripted:retry``) a run plays when it names none: the agents that
    #: show what the suite measures. (): the generic ``scripted:oracle`` and ``scripted:naive``.
    default_models: tuple[str, ...] = ()
    #: Where calls go when the suite's tools are real MCP servers (None: the library's simulators): a
    #: factory of an `mcp_resili.registry.environment.EpisodeEnvironment`, entered before serving.
    environment: Callable[[], EpisodeEnvironment] | None = field(default=None, repr=False)
    #: The suite's own dependency gate, checked before any fault draw when ``enforce_dependencies``
    #: is on (None: the tools' declared dependencies only). Given the episode's task, the tool called
    #: and the episode's successful calls so far of the tools in the task's workflow (all a data-flow
    #: gate reads; the server keeps no more): None lets the call go on, else (the prerequisites not
    #: met, the refusal's message) and the call is refused as ``DEPENDENCY_NOT_MET``.
    dependency_gate: (
        Callable[[Task | None, str, Sequence[TraceEvent]], tuple[tuple[str, ...], str] | None] | None
    ) = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Checked when built: a third party's wrong field (``agents=None``...) is one `TypeError`, which
        # `get_suite` reports in a line, not a traceback in whichever command first reads the field.
        def wrong(what: str, expected: str, value: object) -> TypeError:
            return TypeError(f"Suite {what} must be {expected}, got {type(value).__name__}")

        kinds: dict[str, tuple[type, ...]] = {
            "name": (str,),
            "description": (str,),
            "default_faults": (str,),
            "library": (ToolLibrary,),
            "enforce_dependencies": (bool,),
            "discovery": (bool,),
            "fault_specs": (Mapping,),
            "agents": (Mapping,),
        }
        for name, types in kinds.items():
            value = getattr(self, name)
            if not isinstance(value, types):
                raise wrong(name, " or ".join(t.__name__ for t in types), value)
        for name in ("load_tasks", "render_prompt", "score"):
            if not callable(getattr(self, name)):
                raise wrong(name, "callable", getattr(self, name))
        for name in (
            "initial_state",
            "summarize",
            "summary_table",
            "load_default_tasks",
            "report_sections",
            "environment",
            "dependency_gate",
        ):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise wrong(name, "callable or None", value)
        if self.stop_rules is not None and not isinstance(self.stop_rules, StopRules):
            raise wrong("stop_rules", "StopRules or None", self.stop_rules)
        if not isinstance(self.summary_columns, tuple) or not all(
            isinstance(column, ComponentColumn) for column in self.summary_columns
        ):
            raise wrong("summary_columns", "a tuple of ComponentColumn", self.summary_columns)
        if not isinstance(self.default_models, tuple) or not all(
            isinstance(model, str) and model for model in self.default_models
        ):
            raise wrong("default_models", "a tuple of model SPECs", self.default_models)
        if isinstance(self.variants, str) or not isinstance(self.variants, Sequence):
            raise wrong("variants", "a tuple of names", self.variants)
        for variant in self.variants:
            if not isinstance(variant, str):
                raise wrong("variants", "a tuple of names", variant)
        for name in ("fault_specs", "agents"):
            for key, value in getattr(self, name).items():
                if not isinstance(key, str) or not callable(value):
                    raise TypeError(f"Suite {name} must map names to callables, got {key!r}: {value!r}")

    @property
    def own_stop_rules(self) -> StopRules:
        """The stop rules episodes of this suite run under unless a run names others."""
        return self.stop_rules or NO_STOP_RULES

    @property
    def spec_scope(self) -> FaultSpecScope:
        """Where this suite's fault SPECs are parsed: its own SPEC names, plans fitted to it."""
        return FaultSpecScope(self.name, self.fault_specs)

    @cached_property
    def tasks(self) -> Sequence[Task]:
        """All tasks, loaded once (a `LazyTaskList` builds each task when it is used)."""
        return self._load("tasks", self.load_tasks)

    @cached_property
    def default_tasks(self) -> Sequence[Task]:
        """The default run's tasks."""
        if self.load_default_tasks is None:
            return self.tasks
        return self._load("default tasks", self.load_default_tasks)

    def _load(self, what: str, load: Callable[[], Sequence[Task]]) -> Sequence[Task]:
        from mcp_resili.tasks.lazy import InvalidTaskError, LazyTaskList
        from mcp_resili.tasks.model import Task

        try:
            tasks = load()
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise SuiteLoadError(
                f"suite {self.name!r}: invalid {what}: {exc.error_count()} problem(s), first at "
                f"{where or 'top level'}: {first['msg']}"
            ) from None
        except InvalidTaskError as exc:
            raise SuiteLoadError(f"suite {self.name!r}: {exc}") from None
        except (OSError, ValueError) as exc:
            raise SuiteLoadError(f"suite {self.name!r}: cannot load {what}: {exc}") from None
        except (Exception, SystemExit) as exc:  # a third party's code: any failure is the suite's
            raise SuiteLoadError(
                f"suite {self.name!r}: cannot load {what}: {type(exc).__name__}: {exc}"
            ) from None
        if isinstance(tasks, str) or not isinstance(tasks, Sequence):
            raise SuiteLoadError(
                f"suite {self.name!r}: its {what} are a {type(tasks).__name__}, not a sequence of Task"
            )
        if not tasks:
            raise SuiteLoadError(f"suite {self.name!r} has no {what}")
        if not isinstance(tasks, LazyTaskList):  # a lazy list builds only Tasks, and only when used
            for position, task in enumerate(tasks):
                if not isinstance(task, Task):
                    raise SuiteLoadError(
                        f"suite {self.name!r}: its {what} must be Task objects (mcp_resili.tasks.model); "
                        f"item {position} is a {type(task).__name__}"
                    )
        return tasks

    @cached_property
    def task_summaries(self) -> Sequence[TaskSummary]:
        """Every task's id, type and complexity, in `tasks` order, without building the tasks."""
        from mcp_resili.tasks.lazy import task_summaries

        return task_summaries(self.tasks)

    @cached_property
    def _positions(self) -> dict[str, int]:
        """Task id -> its position in `tasks` (a repeated id: the last one, as a dict by id has it)."""
        return {summary.id: position for position, summary in enumerate(self.task_summaries)}

    @cached_property
    def _default_by_id(self) -> dict[str, Task]:
        if self.load_default_tasks is None:
            return {}  # the default tasks are `tasks`, found by position (a lazy list stays unbuilt)
        return {t.id: t for t in self.default_tasks}

    def task(self, task_id: str) -> Task:
        """The task ``task_id``, or `UnknownTaskError` with suggestions.

        Only that task is built; a `LazyTaskList` task that does not validate raises `SuiteLoadError`.
        """
        from mcp_resili.tasks.lazy import InvalidTaskError

        if task_id in self._default_by_id:  # the default run never loads the full list
            return self._default_by_id[task_id]
        position = self._positions.get(task_id)
        if position is None:
            close = difflib.get_close_matches(task_id, self._positions, n=3)
            hint = (
                f"; did you mean {', '.join(close)}?"
                if close
                else f"; see `mcp-resili tasks list --suite {self.name}`"
            )
            raise UnknownTaskError(f"unknown task {task_id!r} in suite {self.name!r}{hint}")
        try:
            return self.tasks[position]
        except InvalidTaskError as exc:
            raise SuiteLoadError(f"suite {self.name!r}: {exc}") from None

    def task_info(self, task_id: str) -> dict[str, str]:
        """The breakdown keys of a task (type, complexity) for reports; empty for an unknown id.

        Read from the task index: no task is built.
        """
        known = self._default_by_id.get(task_id)
        if known is not None:
            return {"task_type": known.task_type, "complexity": known.complexity}
        position = self._positions.get(task_id)
        if position is None:
            return {}
        summary = self.task_summaries[position]
        return {"task_type": summary.task_type, "complexity": summary.complexity}

    def prompt(self, task: Task, variant: str = "baseline") -> str:
        """The user prompt of ``task`` in ``variant``."""
        if variant.partition(":")[0] not in self.variants:
            raise ValueError(
                f"unknown variant {variant!r} for suite {self.name!r}; choose from {list(self.variants)}"
            )
        try:
            return self.render_prompt(task, variant)
        except UserError:
            raise
        except ValueError as exc:  # the variant's parameters, which render_prompt validates
            raise SuitePromptError(str(exc)) from None
        except Exception as exc:  # a bug in the suite: one line naming it, never a traceback
            raise SuitePromptError(
                f"suite {self.name!r} failed to write the prompt of task {task.id!r} in variant "
                f"{variant!r} ({type(exc).__name__}: {exc}); the suite is at fault"
            ) from exc
