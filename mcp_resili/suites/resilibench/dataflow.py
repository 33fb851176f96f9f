"""Did each workflow step run on the right data? The data-flow half of ResiliBench's "full".

A step ran **on the right data** when a successful call of its tool had, for every argument the
ground truth binds, the value the binding gives:

* an input or a constant binding: exactly the task's value;
* a step binding: the value at the bound path of an output the agent actually received from a call
  that itself ran that upstream step on the right data (any such output, so a retry after a fault
  still counts; and order is free as long as the data is there).

Arguments the ground truth does not bind (``timeout``, an unbound ``options``) are free. Where a
tool's schema declares the fields of an object argument (``records``; ``content`` and ``format``)
only those fields are compared, so an agent that passes the records without the upstream step's
``record_count`` passes the same data. Values compare as JSON (2 equals 2.0; a boolean is no number).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_resili.suites.resilibench.world import same_json
from mcp_resili.tasks.model import ConstantBinding, InputBinding, StepBinding, Task, WorkflowStep
from mcp_resili.tools import ToolLibrary
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
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def same_data(schema: Mapping[str, Any], actual: Any, expected: Any) -> bool:
    """Equal as the argument's schema reads it: only the declared fields of an object, if it declares any."""
    declared = schema.get("properties")
    if isinstance(declared, Mapping) and isinstance(actual, Mapping) and isinstance(expected, Mapping):
        return all(
            same_json(actual.get(key, _MISSING), expected.get(key, _MISSING))
            if key in actual and key in expected
            else (key in actual) == (key in expected)
            for key in declared
        )
    return same_json(actual, expected)


def _mismatch(
    task: Task,
    step: WorkflowStep,
    arguments: Mapping[str, Any],
    outputs: Mapping[str, list[Any]],
    library: ToolLibrary,
    tool_of: Mapping[str, str],
) -> str | None:
    """Why ``arguments`` are not the step's right data, or None when they are (``tool_of``: step → tool)."""
    properties = library.spec(step.tool).input_schema.get("properties", {})
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
            if not any(same_data(properties.get(name, {}), actual, r) for r in received):
                return f"{name} is not the {binding.path} {upstream} returned"
    return None


def trace_data_flow(task: Task, calls: Sequence[ToolCallEvent], library: ToolLibrary) -> DataFlow:
    """Which steps ``calls`` ran on the right data (see the module docstring), in one pass."""
    by_tool: dict[str, list[WorkflowStep]] = {}
    tool_of = {step.id: step.tool for step in task.workflow.steps}
    for step in task.workflow.steps:
        by_tool.setdefault(step.tool, []).append(step)
    outputs: dict[str, list[Any]] = {}
    right: dict[str, int] = {}
    wrong: dict[str, list[str]] = {}
    for index, call in enumerate(calls):
        if call.is_error or call.tool not in by_tool:
            continue
        problems = {
            s.id: _mismatch(task, s, call.arguments, outputs, library, tool_of) for s in by_tool[call.tool]
        }
        # A call serves one step: the first still open one it fits, else the first it fits at all.
        fits = [sid for sid, problem in problems.items() if problem is None]
        served = next((sid for sid in fits if sid not in right), fits[0] if fits else None)
        if served is not None:
            outputs.setdefault(served, []).append(call.result)
            right.setdefault(served, index)
            continue
        for sid, problem in problems.items():
            if sid not in right and problem is not None:
                wrong.setdefault(sid, []).append(problem)
    return DataFlow(right=right, wrong={sid: tuple(p) for sid, p in wrong.items()})
