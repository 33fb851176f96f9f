"""ResiliBench's dependency gate: a step runs only once every step before it in the task's DAG has succeeded.

The paper's environment refuses a tool whose dependencies have not been executed successfully
(App. B.1.4; the MDP's dependency filter, App. D.2.1), and its tasks' only ordering constraints are
those dependencies. Ours have two kinds of edge: a tool's declared dependencies (the registry's, 15,232
of the suite's 30,453 edges) and data edges (a step reads an earlier step's output: the other 15,221).
The server gates both, the same way: a call of a workflow step's tool is refused with
``DEPENDENCY_NOT_MET``, before any fault draw, unless every DAG predecessor of the step has
**succeeded on the task's data** in this episode, by the scorer's own rule (`dataflow`): the gate,
the scorer, the DP (bound iii) and the clairvoyant search (bound ii) share one notion of a step being
ready. Without it an agent could call a step before its input exists, spend that tool's fault draws
early and meet a better draw later, a move the bounds' model of the paper's environment does not have
(docs/resilibench.md, "Bound (ii) is a proof").

Tools the task does not use, and episodes without a task, keep only the declared dependencies.
"""

from __future__ import annotations

import functools
import operator
import weakref
from collections.abc import Mapping, Sequence

from mcp_resili.constants import DISCOVERY_TOOLS
from mcp_resili.suites.resilibench.dataflow import DataFlowTracer
from mcp_resili.tasks.model import SameTask, Task
from mcp_resili.trace import ToolCallEvent, TraceEvent


class _EpisodeFlow:
    """One episode's data flow so far, advanced by the calls the gate has not taken in yet.

    The server passes an episode's kept calls as a list that only grows, and answers an episode's calls
    one at a time. A list that does not start with the events already taken in (by identity: another
    list, or a changed one) is traced again from its start.
    """

    def __init__(self, task: Task, first: TraceEvent) -> None:
        self.tracer = DataFlowTracer(task)
        self.key = id(first)
        # Held weakly so that the entry goes with the episode; the later events are held here.
        self.first = weakref.ref(first, functools.partial(_forget, self.key))
        self.later: list[TraceEvent] = []
        self.taken = 0

    def continued_by(self, task: Task, events: Sequence[TraceEvent]) -> bool:
        """Whether ``events`` are this episode's events so far, and maybe more."""
        return (
            self.tracer.task is task
            and self.first() is events[0]
            and len(events) >= self.taken
            and all(map(operator.is_, self.later, events[1 : self.taken]))
        )

    def advance(self, events: Sequence[TraceEvent]) -> Mapping[str, int]:
        """Take in the events past those already taken in; the steps done so far (`DataFlow.right`)."""
        for event in events[self.taken :]:
            if isinstance(event, ToolCallEvent) and event.tool not in DISCOVERY_TOOLS:
                self.tracer.add(event)
        self.later.extend(events[max(self.taken, 1) :])
        self.taken = len(events)
        return self.tracer.right


#: id(an episode's first kept event) → its flow; an entry goes when that event is collected.
_FLOWS: dict[int, _EpisodeFlow] = {}


def _forget(key: int, _: object) -> None:
    _FLOWS.pop(key, None)


def _done_steps(task: Task, events: Sequence[TraceEvent]) -> Mapping[str, int]:
    """The steps ``events`` ran on the right data, traced incrementally over one episode's calls."""
    if not events:
        return {}
    flow = _FLOWS.get(id(events[0]))
    if flow is None or not flow.continued_by(task, events):
        flow = _FLOWS[id(events[0])] = _EpisodeFlow(task, events[0])
    return flow.advance(events)


@functools.lru_cache(maxsize=256)
def _predecessors(task: SameTask) -> dict[str, dict[str, list[str]]]:
    """Per tool of the task's steps: each of its steps' DAG predecessors (worked out once per task object)."""
    workflow = task.task.workflow
    table: dict[str, dict[str, list[str]]] = {}
    for step in workflow.steps:
        table.setdefault(step.tool, {})[step.id] = []
    tool_of = {step.id: step.tool for step in workflow.steps}
    for a, b in workflow.edges:
        table[tool_of[b]][b].append(a)
    return table


def task_dag_gate(
    task: Task | None, tool: str, events: Sequence[TraceEvent]
) -> tuple[tuple[str, ...], str] | None:
    """None when ``tool`` may run now; else (its steps' unmet predecessor tools, the refusal message).

    A tool that serves several steps (none does in the stored suite) may run when any of them is ready.
    """
    if task is None:
        return None
    before = _predecessors(SameTask(task)).get(tool)
    if before is None or all(not preds for preds in before.values()):
        return None
    done = _done_steps(task, events)
    if any(all(p in done for p in preds) for preds in before.values()):
        return None
    tool_of = {step.id: step.tool for step in task.workflow.steps}
    unmet = tuple(tool_of[p] for p in next(iter(before.values())) if p not in done)
    return unmet, (
        f"{tool} cannot run yet: in this task it needs {', '.join(unmet)} to have succeeded first, "
        "on the task's data"
    )
