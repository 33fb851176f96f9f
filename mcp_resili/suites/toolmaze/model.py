"""ToolMaze tasks as data: a chain of steps, some of them alternative groups, with every valid path.

The layout follows the paper's task template: a ``chain`` of numbered steps, each a tool or an
``ALTERNATIVE`` slot, with ``arg_bindings`` whose source is ``user_input``, ``prev`` (the previous
step of the path), ``step`` (an earlier chain step, by number) or ``constant``; ``field`` is a dotted
path into that step's record (``price.amount``). Bindings to earlier steps make the chain a DAG: a
step that binds ``step`` 1 instead of ``prev`` starts a parallel branch, and a step binding two
branches joins them. A `ToolMazeTask` is a `Task` (its ``workflow`` is the shortest valid path s*),
so every generic part of mcp-resili works on it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mcp_resili.suites.toolmaze.corrupt import Corruption, get_path
from mcp_resili.tasks.model import (
    Binding,
    ConstantBinding,
    InputBinding,
    StepBinding,
    Task,
    Workflow,
    WorkflowStep,
)

Level = Literal["C1", "C2", "C3", "C4"]
LEVELS: tuple[Level, ...] = ("C1", "C2", "C3", "C4")
ALTERNATIVE = "ALTERNATIVE"


class ArgBinding(BaseModel):
    """Where one argument comes from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    source: Literal["user_input", "prev", "step", "constant"]
    field: str | None = None
    step_number: int | None = None
    value: Any = None

    @model_validator(mode="after")
    def _complete(self) -> ArgBinding:
        if self.source in ("user_input", "prev", "step") and not self.field:
            raise ValueError(f"a {self.source!r} binding needs a field")
        if self.source == "step" and self.step_number is None:
            raise ValueError("a 'step' binding needs a step_number")
        return self


class PathStep(BaseModel):
    """One tool call of a path: the tool and its bindings."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tool: str
    arg_bindings: dict[str, ArgBinding]


class ChainElement(BaseModel):
    """One numbered step of the chain: a tool, or an alternative slot (``tool_name == "ALTERNATIVE"``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    step: int = Field(ge=1)
    tool_name: str
    is_alternative: bool = False
    alternative_id: str | None = None
    arg_bindings: dict[str, ArgBinding] = Field(default_factory=dict)


class AlternativeGroup(BaseModel):
    """The interchangeable sub-chains (members) that can fill one alternative slot."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    kind: Literal["one_to_one", "one_to_many", "many_to_many"]
    corpus_group: str
    step: int
    members: tuple[tuple[PathStep, ...], ...] = Field(min_length=2)

    @property
    def tools(self) -> tuple[str, ...]:
        """Every tool of every member."""
        return tuple(dict.fromkeys(s.tool for m in self.members for s in m))


class ErrorResponse(BaseModel):
    """An explicit synthetic failure, as in the paper: ``{status, message, error_type}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    status: int
    message: str
    error_type: str


class FaultSlot(BaseModel):
    """A place a fault is armed: the tools whose first call (in the slot) becomes the victim."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    tools: tuple[str, ...]
    group: str | None = None


class PerturbationProfile(BaseModel):
    """The fixed synthetic responses of a task under P1–P4 and where they are armed."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    slots: tuple[FaultSlot, ...] = Field(min_length=1)
    p1: ErrorResponse
    p2: ErrorResponse
    p3: Corruption
    p4: Corruption

    def slot_of(self, tool: str) -> FaultSlot | None:
        """The armed slot ``tool`` belongs to, if any."""
        return next((s for s in self.slots if tool in s.tools), None)


class ToolMazeTask(Task):
    """A ToolMaze task: the generic `Task` (workflow = s*) plus the chain, groups and paths."""

    level: Level
    domain: str
    user_input_schema: dict[str, Any]
    chain: tuple[ChainElement, ...]
    alternative_groups: tuple[AlternativeGroup, ...] = ()
    valid_paths: tuple[tuple[str, ...], ...]
    shortest_path: tuple[str, ...]
    perturbations: PerturbationProfile

    @model_validator(mode="after")
    def _paths_match_chain(self) -> ToolMazeTask:
        enumerated = tuple(path_tools(path) for path in self.path_steps())
        if enumerated != self.valid_paths:
            raise ValueError(f"task {self.id}: valid_paths differ from the paths the chain enumerates")
        if self.shortest_path != min(self.valid_paths, key=len):
            raise ValueError(f"task {self.id}: shortest_path is not the first shortest valid path")
        if tuple(s.tool for s in self.workflow.steps) != self.shortest_path:
            raise ValueError(f"task {self.id}: workflow must be the shortest path")
        if self.chain[0].is_alternative or self.chain[-1].is_alternative:
            raise ValueError(f"task {self.id}: an alternative slot may be neither first nor last")
        return self

    def group(self, group_id: str) -> AlternativeGroup:
        """The alternative group ``group_id``."""
        for g in self.alternative_groups:
            if g.id == group_id:
                return g
        raise KeyError(f"task {self.id} has no alternative group {group_id!r}")

    def path_steps(self) -> list[list[tuple[int, PathStep]]]:
        """Every valid path as (chain step number, step) pairs, in enumeration order."""
        options: list[list[list[tuple[int, PathStep]]]] = []
        for element in self.chain:
            if element.is_alternative:
                group = self.group(str(element.alternative_id))
                options.append([[(element.step, s) for s in member] for member in group.members])
            else:
                options.append(
                    [[(element.step, PathStep(tool=element.tool_name, arg_bindings=element.arg_bindings))]]
                )
        return [[pair for part in combo for pair in part] for combo in itertools.product(*options)]

    def golden_workflows(self) -> tuple[Workflow, ...]:
        """Every valid path as a workflow: s* (the task's ``workflow``) first, then the others in order.

        An agent that takes another member of an alternative group (ToolMaze's switch) followed a
        right path, and its workflow metrics are against that path (`episode_workflow_scores`).
        """
        best = self.shortest_path_index()
        others = (path_workflow(p) for i, p in enumerate(self.path_steps()) if i != best)
        return (self.workflow, *others)

    def shortest_path_index(self) -> int:
        """Index of s* among the valid paths."""
        return self.valid_paths.index(self.shortest_path)

    def element(self, step: int) -> ChainElement:
        """The chain element numbered ``step``."""
        return self.chain[step - 1]


def path_workflow(path: Sequence[tuple[int, PathStep]]) -> Workflow:
    """A path as a generic `Workflow` (step ids ``s1``…; bindings become input/step/constant bindings)."""
    ids = [f"s{i + 1}" for i in range(len(path))]
    producer: dict[int, str] = {}
    steps: list[WorkflowStep] = []
    edges: list[tuple[str, str]] = []
    for i, (number, step) in enumerate(path):
        arguments: dict[str, Binding] = {}
        for name, b in step.arg_bindings.items():
            if b.source == "user_input":
                arguments[name] = InputBinding(key=str(b.field))
            elif b.source == "constant":
                arguments[name] = ConstantBinding(value=b.value)
            else:
                origin = ids[i - 1] if b.source == "prev" else producer[int(b.step_number or 0)]
                arguments[name] = StepBinding(step=origin, path=str(b.field))
                if (origin, ids[i]) not in edges:
                    edges.append((origin, ids[i]))
        steps.append(WorkflowStep(id=ids[i], tool=step.tool, arguments=arguments))
        producer[number] = ids[i]
    return Workflow(steps=tuple(steps), edges=tuple(edges))


#: One data-flow edge of a path step: (argument, index of the producing path step, field it reads).
Link = tuple[str, int, str]


def path_links(path: Sequence[tuple[int, PathStep]]) -> list[list[Link]]:
    """For each step of ``path``, the ``prev``/``step`` bindings it has, resolved to producing steps."""
    last_of: dict[int, int] = {}
    links: list[list[Link]] = []
    for i, (number, step) in enumerate(path):
        mine: list[Link] = []
        for name, b in step.arg_bindings.items():
            if b.source == "prev":
                mine.append((name, i - 1, str(b.field)))
            elif b.source == "step":
                mine.append((name, last_of[int(b.step_number or 0)], str(b.field)))
        links.append(mine)
        last_of[number] = i
    return links


def resolve_path_arguments(
    step: PathStep,
    inputs: Mapping[str, Any],
    prev: Mapping[str, Any] | None,
    by_step: Mapping[int, Mapping[str, Any]],
) -> dict[str, Any]:
    """Concrete arguments of ``step`` along a path.

    ``prev`` is the previous call's record, ``by_step`` the latest record each chain step produced
    (an alternative slot's record is its member's last record).
    """
    arguments: dict[str, Any] = {}
    for name, binding in step.arg_bindings.items():
        if binding.source == "constant":
            arguments[name] = binding.value
        elif binding.source == "user_input":
            arguments[name] = inputs[str(binding.field)]
        elif binding.source == "prev":
            arguments[name] = get_path(prev or {}, str(binding.field))
        else:
            arguments[name] = get_path(by_step.get(int(binding.step_number or 0), {}), str(binding.field))
    return arguments


def path_tools(path: Sequence[tuple[int, PathStep]]) -> tuple[str, ...]:
    """The tool names of a path."""
    return tuple(s.tool for _, s in path)


class ToolMazeTaskSet(BaseModel):
    """The stored ToolMaze task set."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    format_version: Literal[2] = 2
    suite: Literal["toolmaze"] = "toolmaze"
    seed: int
    generator: str
    tasks: tuple[ToolMazeTask, ...]
