"""Workflows as graphs of labelled steps, and the files `mcp-resili compare` reads.

A workflow is a list of steps (``id``, ``label`` and, for tool calls, optionally ``arguments``) and,
optionally, DAG edges ``(a, b)`` meaning ``a`` must precede ``b``. ``kind`` says how steps are
identified across workflows: ``tools`` (the label is a tool name, matched exactly; arguments too
when asked and both steps carry them) or ``text`` (the label is a step description, matched by
`mcp_resili.workflow.match.text_similarity`).

``edges = None`` marks a *sequence*: steps in the order they happened, claiming nothing about
dependencies (an executed trace). As a golden workflow a sequence means the chain of its steps.

File formats (see docs/reports.md):

* **workflow JSON**: ``{"kind": "tools"|"text", "steps": [{"id": "s1", "label": "...",
  "arguments": {...}}, ...],
  "edges": [["s1", "s2"], ...]}``; ``edges`` may be omitted (a sequence). Steps are listed in a
  topological order.
* **trace JSONL** (from ``serve --trace-dir`` or the runner): the successful tool calls in order,
  as a ``tools`` sequence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mcp_resili.errors import UserError, plain_validation_error
from mcp_resili.tasks.model import Task, Workflow
from mcp_resili.trace import Trace, TraceError, trace_lines

WorkflowKind = Literal["tools", "text"]


class WorkflowFileError(UserError):
    """A workflow file that cannot be read; the message names the file and the problem."""


class Step(BaseModel):
    """One node: a stable id, the label that identifies it across workflows, and a call's arguments."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(min_length=1)
    label: str
    # Written only when known, so workflow files without arguments round-trip unchanged.
    arguments: dict[str, Any] | None = Field(default=None, exclude_if=lambda value: value is None)


def _cycle(edges: tuple[tuple[str, str], ...]) -> list[str]:
    """One cycle of the directed graph ``edges`` as its nodes, the first repeated at the end; [] if none."""
    try:
        found = nx.find_cycle(nx.DiGraph(list(edges)))
    except nx.NetworkXNoCycle:
        return []
    return [str(a) for a, _ in found] + [str(found[0][0])]


class WorkflowGraph(BaseModel):
    """Steps in a topological order, with DAG edges (or ``None`` for an order-only sequence)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: WorkflowKind = "tools"
    steps: tuple[Step, ...]
    edges: tuple[tuple[str, str], ...] | None = None

    @model_validator(mode="after")
    def _valid_dag(self) -> WorkflowGraph:
        ids = [s.id for s in self.steps]
        if len(set(ids)) != len(ids):
            duplicates = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"step ids must be unique; repeated: {duplicates}")
        position = {step_id: n for n, step_id in enumerate(ids)}
        for a, b in self.edges or ():
            if a not in position or b not in position:
                raise ValueError(f"edge ({a!r}, {b!r}) names an unknown step")
            if position[a] >= position[b]:
                cycle = _cycle(self.edges or ())
                if cycle:
                    raise ValueError(
                        f"the edges form a cycle ({' → '.join(cycle)}): a workflow must be a DAG"
                    )
                raise ValueError(f"edge ({a!r}, {b!r}) goes backwards: list steps in a topological order")
        return self

    @property
    def is_sequence(self) -> bool:
        """True when the workflow asserts only an order (no dependency edges)."""
        return self.edges is None

    @property
    def structure(self) -> tuple[tuple[str, str], ...]:
        """The edges, or the chain through the listed order for a sequence."""
        if self.edges is not None:
            return self.edges
        return tuple((a.id, b.id) for a, b in zip(self.steps, self.steps[1:], strict=False))

    def graph(self) -> nx.DiGraph[str]:
        """The structure as a networkx DAG."""
        graph: nx.DiGraph[str] = nx.DiGraph()
        graph.add_nodes_from(s.id for s in self.steps)
        graph.add_edges_from(self.structure)
        return graph

    def labels(self) -> list[str]:
        """Step labels in the listed order."""
        return [s.label for s in self.steps]


def workflow_from_task(task: Task) -> WorkflowGraph:
    """A task's ground truth as a ``tools`` workflow (steps in a topological order)."""
    return workflow_graph(task.workflow)


def workflow_graph(workflow: Workflow) -> WorkflowGraph:
    """A task workflow (a DAG of tool steps) as a ``tools`` workflow, steps in a topological order."""
    graph = workflow.graph()
    listed = [s.id for s in workflow.steps]
    # The listed order is kept wherever the DAG allows it, so reports read like the task file.
    order = list(nx.lexicographical_topological_sort(graph, key=listed.index))
    return WorkflowGraph(
        kind="tools",
        steps=tuple(Step(id=i, label=workflow.step(i).tool) for i in order),
        edges=tuple(workflow.edges),
    )


def workflow_from_trace(trace: Trace) -> WorkflowGraph:
    """The executed workflow of a trace: its successful tool calls in order (with arguments), as a sequence.

    Failed attempts are not executed steps; a retry that succeeds counts once.
    """
    calls = [c for c in trace.tool_calls if not c.is_error]
    return WorkflowGraph(
        kind="tools",
        steps=tuple(Step(id=f"call{c.seq}", label=c.tool, arguments=dict(c.arguments)) for c in calls),
        edges=None,
    )


def load_workflow(path: Path) -> WorkflowGraph:
    """Read a workflow JSON file, or a trace JSONL file (its executed tool sequence)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkflowFileError(f"cannot read workflow {path}: {exc}") from None
    first = next((line for line in trace_lines(text) if line.strip()), "")
    try:
        head = json.loads(first) if first else None
    except json.JSONDecodeError:
        head = None
    if isinstance(head, dict) and head.get("event") == "header":
        try:
            return workflow_from_trace(Trace.from_lines(trace_lines(text), origin=str(path)))
        except TraceError as exc:
            raise WorkflowFileError(str(exc)) from None
    try:
        return WorkflowGraph.model_validate_json(text)
    except ValidationError as exc:
        raise WorkflowFileError(
            f"{path} is neither a workflow JSON file nor a trace JSONL file: {plain_validation_error(exc)}"
        ) from None
