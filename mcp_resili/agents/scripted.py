"""Scripted agents: offline, deterministic providers of the `Model` interface.

They read the task's ground-truth workflow and derive their next move from the conversation so far
(no hidden state), so they behave the same over any transport and after a resume.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from mcp_resili.agents.model import (
    AssistantMessage,
    Model,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
)
from mcp_resili.agents.text_protocol import TextOracleAgent
from mcp_resili.constants import FINISH_TOOL
from mcp_resili.tasks.model import SameTask, StepBinding, Task, WorkflowStep, resolve_binding


def call_results(request: ModelRequest) -> list[tuple[ToolCall, ToolResult]]:
    """Every (call, result) pair of the conversation so far, in order."""
    calls: dict[str, ToolCall] = {}
    pairs: list[tuple[ToolCall, ToolResult]] = []
    for message in request.messages:
        if isinstance(message, AssistantMessage):
            calls.update({c.id: c for c in message.tool_calls})
        elif isinstance(message, ToolResultsMessage):
            pairs.extend((calls[r.call_id], r) for r in message.results if r.call_id in calls)
    return pairs


def require_task(request: ModelRequest, agent: str) -> Task:
    """The task's ground truth, which scripted agents read; an error when the request carries none."""
    if request.task is None:
        raise ValueError(f"{agent} needs the task's ground truth; it can only run tasks of a known suite")
    return request.task


def _call(turn: int, step: WorkflowStep, task: Task, results: dict[str, object]) -> ToolCall:
    """The call of ``step``; an upstream result that is missing (it failed) becomes an empty payload."""
    available: dict[str, object] = {sid: r for sid, r in results.items() if r is not None}
    for binding in step.arguments.values():
        if isinstance(binding, StepBinding) and binding.step not in available:
            available[binding.step] = {"data": {}}
    arguments: dict[str, object] = {}
    for name, binding in step.arguments.items():
        try:
            arguments[name] = resolve_binding(binding, task.inputs, available)
        except (KeyError, TypeError):
            # The upstream result lacks the bound path (e.g. a drifted schema): pass nothing usable
            # and let the server reject it, as it would a real agent's bad argument.
            arguments[name] = None
    return ToolCall(id=f"call_{turn}_{step.id}", name=step.tool, arguments=arguments)


def _usable(task: Task, step: WorkflowStep, result: object) -> bool:
    """Whether ``result`` has every path later steps bind to (a drifted or stale reply may not)."""
    for parts in _bound_paths(SameTask(task)).get(step.id, ()):
        value = result
        for part in parts:
            if not isinstance(value, dict) or part not in value:
                return False
            value = value[part]
    return True


@lru_cache(maxsize=256)
def _bound_paths(task: SameTask) -> dict[str, list[tuple[str, ...]]]:
    """Per step id, the result paths other steps bind to: asked every turn, computed once per task."""
    paths: dict[str, list[tuple[str, ...]]] = {}
    for later in task.task.workflow.steps:
        for binding in later.arguments.values():
            if isinstance(binding, StepBinding):
                paths.setdefault(binding.step, []).append(tuple(binding.path.split(".")))
    return paths


def finish_response(turn: int, status: str, summary: str) -> ModelResponse:
    """A turn that calls ``finish`` with ``status`` and ``summary``."""
    call = ToolCall(
        id=f"call_{turn}_finish", name=FINISH_TOOL, arguments={"status": status, "summary": summary}
    )
    return ModelResponse(text="", tool_calls=(call,), stop_reason="tool_use")


@dataclass(frozen=True)
class OracleAgent:
    """Follows the ground-truth order and retries a failed call until it succeeds or turns run out.

    A success whose result lacks a path a later step needs (a drifted schema) counts as a failure.
    """

    #: It answers without awaiting anything: the episode's time limit runs out only between turns.
    answers_at_once: ClassVar[bool] = True
    name: str = "scripted:oracle"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Call the first workflow step that has not succeeded yet; finish when all have."""
        task = require_task(request, self.name)
        # `call_results` in one pass, keeping only what the oracle reads: it runs at every turn.
        tool_of: dict[str, str] = {}  # call id -> tool, of the calls made so far
        succeeded: dict[str, list[object]] = {}  # per tool, its successful results in order
        turn = 1
        for message in request.messages:
            if isinstance(message, AssistantMessage):
                for call in message.tool_calls:
                    tool_of[call.id] = call.name
            elif isinstance(message, ToolResultsMessage):
                for result in message.results:
                    tool = tool_of.get(result.call_id)
                    if tool is not None:
                        turn += 1
                        if not result.is_error:
                            succeeded.setdefault(tool, []).append(result.structured)
        done: dict[str, object] = {}
        for step in task.workflow.steps:
            # The step's latest usable result.
            for structured in reversed(succeeded.get(step.tool, ())):
                if _usable(task, step, structured):
                    done[step.id] = structured
                    break
        for step in task.workflow.steps:
            if step.id not in done:
                return ModelResponse(tool_calls=(_call(turn, step, task, done),), stop_reason="tool_use")
        return finish_response(turn, "completed", f"ran {len(task.workflow.steps)} steps")


@dataclass(frozen=True)
class NaiveAgent:
    """Calls every workflow step once, in order, whatever happens; then claims completion."""

    #: It answers without awaiting anything: the episode's time limit runs out only between turns.
    answers_at_once: ClassVar[bool] = True
    name: str = "scripted:naive"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Call the next step of the plan once; never retry."""
        task = require_task(request, self.name)
        pairs = call_results(request)
        turn = len(pairs) + 1
        results: dict[str, object] = {}
        steps = list(task.workflow.steps)
        for step, (_, result) in zip(steps, pairs, strict=False):
            results[step.id] = None if result.is_error else result.structured
        if len(pairs) < len(steps):
            return ModelResponse(
                tool_calls=(_call(turn, steps[len(pairs)], task, results),), stop_reason="tool_use"
            )
        return finish_response(turn, "completed", "ran every step once")


SCRIPTED_AGENTS: dict[str, Callable[[], Model]] = {
    "oracle": OracleAgent,
    "naive": NaiveAgent,
    "text-oracle": TextOracleAgent,
}
