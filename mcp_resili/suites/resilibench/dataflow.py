"""Did each workflow step run on the right data? The data-flow half of ResiliBench's "full".

A step ran **on the right data** when a successful call of its tool had, for every argument the
ground truth binds, the value the binding gives:

* an input or a constant binding: exactly the task's value;
* a step binding: the value at the bound path of an output the agent actually received from a call
  that itself ran that upstream step on the right data (any such output, so a retry after a fault
  still counts; and order is free as long as the data is there).

Arguments the ground truth does not bind (``timeout``, an unbound ``options``) are free. **The same
data** is one rule for every tool, read from the data itself, never from the receiving tool's
schema (`same_data`): a records payload (an object with ``records``) is its records, a text payload
(an object with ``content``) is its content and format, and their other fields (``record_count``,
``groups``, ``transformation``, ...) are free like unbound arguments; any other value is compared
whole. So the parser's records without its ``record_count`` are the same data wherever they go.
Values compare as JSON (2 equals 2.0; a boolean is no number).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_resili.suites.resilibench.world import same_json
from mcp_resili.tasks.model import ConstantBinding, InputBinding, StepBinding, Task, WorkflowStep
from mcp_resili.trace import ToolCallEvent

_MISSING = object()


@dataclass(frozen=True)
class DataFlow:
    """Per step: the index of the first call that ran it on the right data, and what went wrong before."""

    #: Step id → index (in the calls given) of its first right-data success.
    right: Mapping[str, int]
    #: Step id → why successful calls of its tool did not count (until one did), in call order.
    wrong: Mapping[str, tuple[str, ...]]

    def steps_on_wrong_data(self) -> list[str]:
        """Steps whose tool succeeded only on wrong data (never on the right data)."""
        return [step for step in self.wrong if step not in self.right]


def _at(value: Any, path: str) -> Any:
    for part in path.split("."):
        if not (type(value) is dict or isinstance(value, Mapping)) or part not in value:
            return _MISSING
        value = value[part]
    return value


#: The fields that hold a payload's content: a records payload's, then a text payload's.
CONTENT_FIELDS = (("records",), ("content", "format"))


def same_data(actual: Any, expected: Any) -> bool:
    """Whether ``actual`` is the data ``expected`` holds (the module docstring's rule, for every tool).

    When ``expected`` is a records or text payload, only its content fields are compared (each must be
    there, with the same value, exactly when ``expected`` has it); anything else compares as JSON.
    """
    # (A dict is tested by its type first: `isinstance` against an ABC is a Python-level call.)
    if (type(expected) is dict or isinstance(expected, Mapping)) and (
        type(actual) is dict or isinstance(actual, Mapping)
    ):
        for fields in CONTENT_FIELDS:
            if fields[0] in expected:
                return all(
                    same_json(actual[key], expected[key])
                    if key in actual and key in expected
                    else (key in actual) == (key in expected)
                    for key in fields
                )
    return same_json(actual, expected)


def _mismatch(
    task: Task,
    step: WorkflowStep,
    arguments: Mapping[str, Any],
    outputs: Mapping[str, list[Any]],
    tool_of: Mapping[str, str],
) -> str | None:
    """Why ``arguments`` are not the step's right data, or None when they are (``tool_of``: step → tool)."""
    for name, binding in step.arguments.items():
        if name not in arguments:
            return f"{name} missing"
        actual = arguments[name]
        if isinstance(binding, InputBinding | ConstantBinding):
            expected = task.inputs[binding.key] if isinstance(binding, InputBinding) else binding.value
            if not same_json(actual, expected):
                return f"{name} is not the task's value"
        elif isinstance(binding, StepBinding):
            upstream = tool_of[binding.step]
            received = [_at(r, binding.path) for r in outputs.get(binding.step, [])]
            if not received:
                return f"{name} cannot come from {upstream}, which had not run on the right data"
            if not any(same_data(actual, r) for r in received):
                return f"{name} is not the {binding.path} {upstream} returned"
    return None


class DataFlowTracer:
    """`trace_data_flow` one call at a time: the dependency gate asks after every call of an episode.

    Fed the same calls in the same order, `flow` equals `trace_data_flow` over them (tested).
    """

    def __init__(self, task: Task) -> None:
        self.task = task
        self._by_tool: dict[str, list[WorkflowStep]] = {}
        for step in task.workflow.steps:
            self._by_tool.setdefault(step.tool, []).append(step)
        self._tool_of = {step.id: step.tool for step in task.workflow.steps}
        self._outputs: dict[str, list[Any]] = {}
        self._right: dict[str, int] = {}
        self._wrong: dict[str, list[str]] = {}
        self._calls = 0

    @property
    def right(self) -> Mapping[str, int]:
        """Step id → index of its first right-data success, over the calls added so far."""
        return self._right

    def add(self, call: ToolCallEvent) -> None:
        """Take the episode's next call into account."""
        index = self._calls
        self._calls += 1
        steps = self._by_tool.get(call.tool)
        if call.is_error or steps is None:
            return
        problems = {
            s.id: _mismatch(self.task, s, call.arguments, self._outputs, self._tool_of) for s in steps
        }
        # A call serves one step: the first still open one it fits, else the first it fits at all.
        fits = [sid for sid, problem in problems.items() if problem is None]
        served = next((sid for sid in fits if sid not in self._right), fits[0] if fits else None)
        if served is not None:
            self._outputs.setdefault(served, []).append(call.result)
            self._right.setdefault(served, index)
            return
        for sid, problem in problems.items():
            if sid not in self._right and problem is not None:
                self._wrong.setdefault(sid, []).append(problem)

    def flow(self) -> DataFlow:
        """The data flow of the calls added so far."""
        return DataFlow(right=dict(self._right), wrong={sid: tuple(p) for sid, p in self._wrong.items()})


def trace_data_flow(task: Task, calls: Sequence[ToolCallEvent]) -> DataFlow:
    """Which steps ``calls`` ran on the right data (see the module docstring), in one pass."""
    tracer = DataFlowTracer(task)
    for call in calls:
        tracer.add(call)
    return tracer.flow()
