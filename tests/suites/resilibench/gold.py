"""Ground-truth runs of ResiliBench tasks on the simulators, for building traces in tests."""

from dataclasses import dataclass
from typing import Any

from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.world import initial_state
from mcp_resili.tasks import Task, resolve_arguments
from mcp_resili.trace import FinishEvent, ModelTurnEvent, ToolCallEvent, Trace, TraceHeader


@dataclass(frozen=True)
class GoldCall:
    step: str
    tool: str
    arguments: dict[str, Any]
    result: dict[str, Any]


def gold_run(task: Task) -> list[GoldCall]:
    """Every step of ``task`` in workflow order, with its ground-truth arguments and real result."""
    library = resilibench_library()
    state, results, calls = initial_state(task), {}, []
    for step in task.workflow.steps:
        arguments = resolve_arguments(step, task.inputs, results)
        results[step.id] = library.simulate(step.tool, arguments, state)
        calls.append(GoldCall(step.id, step.tool, arguments, results[step.id]))
    return calls


def call_event(
    seq: int, tool: str, arguments: dict[str, Any], result: dict[str, Any] | None, ok: bool = True
):
    """A tool-call event as the server records it (a failure is an injected TIMEOUT)."""
    if ok:
        return ToolCallEvent(
            episode="e", seq=seq, tool=tool, arguments=arguments, is_error=False, result=result
        )
    return ToolCallEvent(
        episode="e",
        seq=seq,
        tool=tool,
        arguments=arguments,
        is_error=True,
        error_code="TIMEOUT",
        result={"code": "TIMEOUT", "message": "injected"},
    )


def trace_from(task: Task, events: list, *, max_turns: int | None = None, fault_plan=None) -> Trace:
    """A trace of ``task`` holding ``events`` (renumbered in order)."""
    header = TraceHeader(
        suite="resilibench",
        task=task.id,
        episode="e",
        seed=0,
        fault_plan=fault_plan or {"kind": "none"},
        fault_key="k",
        max_turns=max_turns,
    )
    numbered = [
        e.model_copy(update={"seq": i}) if isinstance(e, ToolCallEvent | FinishEvent) else e
        for i, e in enumerate(events, 1)
    ]
    return Trace(header=header, events=tuple(numbered))


def finish(status: str = "completed") -> FinishEvent:
    """A ``finish`` event."""
    return FinishEvent(episode="e", seq=0, status=status)


def turn(text: str = "") -> ModelTurnEvent:
    """A model turn saying ``text``."""
    return ModelTurnEvent(episode="e", turn=1, text=text)
