"""Tasks and their ground truth, as validated data (published as JSON Schema)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

if TYPE_CHECKING:
    import networkx as nx


class InputBinding(BaseModel):
    """An argument taken from the task's user inputs."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    source: Literal["input"] = "input"
    key: str


class StepBinding(BaseModel):
    """An argument taken from an earlier step's structured result, at a dotted ``path``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    source: Literal["step"] = "step"
    step: str
    path: str = "data"


class ConstantBinding(BaseModel):
    """A fixed argument value."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    source: Literal["constant"] = "constant"
    value: Any


Binding = Annotated[InputBinding | StepBinding | ConstantBinding, Field(discriminator="source")]


class WorkflowStep(BaseModel):
    """One node of the ground-truth workflow: a tool call and where its arguments come from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    tool: str
    arguments: dict[str, Binding] = Field(default_factory=dict)


def _acyclic(nodes: list[str], edges: set[tuple[str, str]]) -> bool:
    """Kahn's algorithm; plain Python because it runs for each of the suite's 5,040 tasks at load."""
    indegree = dict.fromkeys(nodes, 0)
    successors: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        indegree[b] += 1
        successors[a].append(b)
    ready = [n for n, d in indegree.items() if d == 0]
    seen = 0
    while ready:
        node = ready.pop()
        seen += 1
        for nxt in successors[node]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    return seen == len(nodes)


class Workflow(BaseModel):
    """The ground-truth DAG: nodes are tool calls, an edge ``(a, b)`` means ``a`` must precede ``b``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    steps: tuple[WorkflowStep, ...]
    edges: tuple[tuple[str, str], ...] = ()

    @model_validator(mode="after")
    def _is_dag(self) -> Workflow:
        ids = [s.id for s in self.steps]
        if len(set(ids)) != len(ids):
            raise ValueError(f"workflow step ids must be unique, got {ids}")
        known = set(ids)
        edges = set(self.edges)
        for a, b in edges:
            if a not in known or b not in known:
                raise ValueError(f"edge ({a!r}, {b!r}) names an unknown step")
        for step in self.steps:
            for name, binding in step.arguments.items():
                if isinstance(binding, StepBinding) and (binding.step, step.id) not in edges:
                    raise ValueError(
                        f"step {step.id!r} argument {name!r} reads {binding.step!r} without an edge"
                    )
        if not _acyclic(ids, edges):
            raise ValueError("workflow edges form a cycle")
        return self

    def graph(self) -> nx.DiGraph[str]:
        """The workflow as a networkx DAG over step ids."""
        import networkx as nx  # on use: most commands never draw a workflow's graph

        graph: nx.DiGraph[str] = nx.DiGraph()
        graph.add_nodes_from(s.id for s in self.steps)
        graph.add_edges_from(self.edges)
        return graph

    def step(self, step_id: str) -> WorkflowStep:
        """The step with id ``step_id``."""
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(f"no step {step_id!r} in workflow")

    def tool_order_is_consistent(self, tools: list[str]) -> bool:
        """True when calling ``tools`` in this order never runs a step before one it depends on."""
        position = {s.id: tools.index(s.tool) for s in self.steps if s.tool in tools}
        return all(position[a] < position[b] for a, b in self.edges if a in position and b in position)


def resolve_arguments(
    step: WorkflowStep, inputs: Mapping[str, Any], results: Mapping[str, Any]
) -> dict[str, Any]:
    """Concrete arguments of ``step`` given the task inputs and earlier steps' structured results."""
    return {name: resolve_binding(binding, inputs, results) for name, binding in step.arguments.items()}


def resolve_binding(binding: Binding, inputs: Mapping[str, Any], results: Mapping[str, Any]) -> Any:
    """The concrete value of one argument binding (``KeyError``/``TypeError`` when a path is missing)."""
    if isinstance(binding, InputBinding):
        return inputs[binding.key]
    if isinstance(binding, ConstantBinding):
        return binding.value
    value: Any = results[binding.step]
    for part in binding.path.split("."):
        value = value[part]
    return value


class TaskConstraints(BaseModel):
    """Execution limits the agent is told about and the runner enforces."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    timeout: float = 300
    max_retries: int = 3
    max_turns: int = 20


class Task(BaseModel):
    """One benchmark task: what the agent is asked, and the ground truth it is scored against."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[A-Za-z0-9_.:-]+$")
    suite: str
    task_type: str
    complexity: Literal["easy", "medium", "hard"]
    description: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    expected_outputs: dict[str, Any] = Field(default_factory=dict)
    required_tools: tuple[str, ...]
    workflow: Workflow
    constraints: TaskConstraints = Field(default_factory=TaskConstraints)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def instance_id(self) -> str:
        """ResiliBench's name for ``id`` (paper Table 8)."""
        return self.id

    @computed_field  # type: ignore[prop-decorator]
    @property
    def original_description(self) -> str:
        """The description before any rewording (paper Table 8); ours are never reworded."""
        return str(self.metadata.get("original_description", self.description))

    @model_validator(mode="before")
    @classmethod
    def _accept_computed_fields(cls, data: Any) -> Any:
        """Let a dumped task validate again: the computed fields must agree with what they compute."""
        if not isinstance(data, dict) or not ({"instance_id", "original_description"} & set(data)):
            return data
        data = dict(data)
        instance_id = data.pop("instance_id", data.get("id"))
        if instance_id != data.get("id"):
            raise ValueError(f"instance_id {instance_id!r} differs from id {data.get('id')!r}")
        original = data.pop("original_description", None)
        if original is not None and original != data.get("description"):
            data["metadata"] = {**data.get("metadata", {}), "original_description": original}
        return data

    def golden_workflows(self) -> tuple[Workflow, ...]:
        """Every workflow that solves the task, the reference ``workflow`` first.

        A suite whose tasks have several valid paths overrides it (ToolMaze's alternative tools), so
        workflow metrics judge an agent against the path it took rather than against one of them.
        """
        return (self.workflow,)

    @model_validator(mode="after")
    def _required_tools_match_workflow(self) -> Task:
        workflow_tools = {s.tool for s in self.workflow.steps}
        if set(self.required_tools) != workflow_tools:
            raise ValueError(
                f"task {self.id}: required_tools {sorted(self.required_tools)} differ from the workflow's "
                f"tools {sorted(workflow_tools)}"
            )
        if not self.workflow.tool_order_is_consistent(list(self.required_tools)):
            raise ValueError(f"task {self.id}: required_tools order contradicts the workflow DAG")
        for step in self.workflow.steps:
            for binding in step.arguments.values():
                if isinstance(binding, InputBinding) and binding.key not in self.inputs:
                    raise ValueError(f"task {self.id}: step {step.id} reads missing input {binding.key!r}")
        return self


class SameTask:
    """A task as a cache key, by identity: a `Task` holds dicts, so it has no hash of its own.

    For remembering what is worked out from a task object (a prompt's text, a plan): a cache that
    holds the key holds the task, so its id cannot pass to another object meanwhile.
    """

    __slots__ = ("task",)

    def __init__(self, task: Task) -> None:
        self.task = task

    def __hash__(self) -> int:
        return id(self.task)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SameTask) and other.task is self.task


class TaskSet(BaseModel):
    """A versioned list of tasks, as stored in a suite's data file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    format_version: Literal[1] = 1
    suite: str
    seed: int | None = None
    generator: str | None = None
    tasks: tuple[Task, ...]
