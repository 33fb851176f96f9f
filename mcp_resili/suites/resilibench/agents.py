"""ResiliBench's scripted agents: one that follows the plan in its prompt, one that calls greedily.

``scripted:plan-follower`` (`PlanFollowerAgent`) trusts the workflow plan printed in its prompt (the
``optimal`` and ``flawed:*`` variants): it calls the numbered "Execute TOOL" steps in that order,
with the arguments the plan gives each step ("`source`: "data/x.csv" (task input `source`)",
"`data`: the `data` returned by TOOL", a JSON constant, "the raw XML text returned by TOOL"),
retrying a failed call up to the task's ``max_retries`` times before it moves on. A flawed plan is
followed as written: wrong tools, wrong order, wrong or missing arguments, wrong formats and all.
Without a plan in the prompt it follows the ground-truth plan (the ``optimal`` variant's).

``scripted:greedy-retry`` (`GreedyRetryAgent`) makes several calls per model turn: every workflow
step that has not succeeded and whose upstream data it holds, with the ground-truth arguments, and
retries greedily: a step that failed ``k`` times is sent ``1 + k`` times at once (at most
``max_copies``), retries sent before any answer is in. It exercises the call budget, which counts
calls, not turns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from mcp_resili.agents.model import AssistantMessage, ModelRequest, ModelResponse, ToolCall, UserMessage
from mcp_resili.agents.scripted import call_results, finish_response, require_task
from mcp_resili.suites.resilibench.flaws import optimal_plan
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.tasks.model import StepBinding, Task, resolve_arguments

_PLAN_HEADING = "## Workflow execution plan"
_STEP = re.compile(r"^\d+\. Execute ([A-Za-z0-9_.-]+)$")
_ARGUMENT = re.compile(r"^ {3}- `([^`]+)`: (.*)$")
_FROM_INPUT = re.compile(r"^(.*) \(task input `[^`]*`\)$")
_FROM_STEP = re.compile(r"^the `([^`]+)` returned by ([A-Za-z0-9_.-]+)$")
_RAW_TEXT = re.compile(r"^the raw ([A-Za-z]+) text returned by ([A-Za-z0-9_.-]+)$")


@dataclass(frozen=True)
class PlannedCall:
    """One step of a plan as printed: the tool, and each argument's source as the plan words it."""

    tool: str
    arguments: tuple[tuple[str, str], ...] = ()


def read_plan(prompt: str) -> list[PlannedCall] | None:
    """The plan printed in ``prompt`` (`prompts.render_plan`'s layout), or None when it has none."""
    if _PLAN_HEADING not in prompt:
        return None
    steps: list[PlannedCall] = []
    for line in prompt.split(_PLAN_HEADING, 1)[1].splitlines():
        if line.startswith("###"):
            break
        step = _STEP.match(line)
        argument = _ARGUMENT.match(line)
        if step is not None:
            steps.append(PlannedCall(step.group(1)))
        elif argument is not None and steps:
            last = steps[-1]
            steps[-1] = PlannedCall(last.tool, (*last.arguments, (argument.group(1), argument.group(2))))
    return steps


def _at(value: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return {}
        value = value[part]
    return value


def argument_value(source: str, received: Mapping[str, Any]) -> Any:
    """The value a plan's wording of an argument stands for, given the latest output of each tool.

    Output of a tool that has not answered yet is an empty object: the agent has nothing to pass.
    """
    from_step = _FROM_STEP.match(source)
    if from_step is not None:
        return _at(received.get(from_step.group(2), {}), from_step.group(1))
    raw = _RAW_TEXT.match(source)
    if raw is not None:
        data = _at(received.get(raw.group(2), {}), "data")
        content = data.get("content") if isinstance(data, Mapping) else None
        text = content if isinstance(content, str) else json.dumps(data, sort_keys=True)
        return {"content": text, "format": raw.group(1).lower()}
    from_input = _FROM_INPUT.match(source)
    text = from_input.group(1) if from_input is not None else source
    try:
        return json.loads(text)
    except ValueError:
        return text


def _ground_truth_plan(task: Task) -> list[PlannedCall]:
    plan = optimal_plan(task, resilibench_library())
    return [PlannedCall(s.tool, tuple(s.arguments.items())) for s in plan.steps]


@dataclass(frozen=True)
class PlanFollowerAgent:
    """Calls the prompt's plan in order, with its arguments; each step gets ``1 + max_retries`` attempts."""

    #: It answers without awaiting anything: the episode's time limit runs out only between turns.
    answers_at_once: ClassVar[bool] = True
    name: str = "scripted:plan-follower"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The next call of the plan, or finish."""
        task = require_task(request, self.name)
        prompt = next((m.text for m in request.messages if isinstance(m, UserMessage)), "")
        plan = read_plan(prompt) or _ground_truth_plan(task)
        pairs = call_results(request)
        position, attempts = 0, 0
        for _, result in pairs:  # replay the conversation: where in the plan are we?
            attempts += 1
            if not result.is_error or attempts > task.constraints.max_retries:
                position, attempts = position + 1, 0
        turn = len(pairs) + 1
        if position >= len(plan):
            return finish_response(turn, "completed", "plan done")
        received = {c.name: r.structured for c, r in pairs if not r.is_error and r.structured is not None}
        step = plan[position]
        arguments = {name: argument_value(source, received) for name, source in step.arguments}
        call = ToolCall(f"call_{turn}", step.tool, arguments)
        return ModelResponse(tool_calls=(call,), stop_reason="tool_use")


@dataclass(frozen=True)
class GreedyRetryAgent:
    """Every pending step whose data is in hand, once more per earlier failure, until all succeeded."""

    #: It answers without awaiting anything: the episode's time limit runs out only between turns.
    answers_at_once: ClassVar[bool] = True
    name: str = "scripted:greedy-retry"
    max_copies: int = 3

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The calls of the turn, or finish when every step has succeeded."""
        task = require_task(request, self.name)
        pairs = call_results(request)
        done: dict[str, Any] = {}
        for step in task.workflow.steps:
            ok = [r.structured for c, r in pairs if c.name == step.tool and not r.is_error and r.structured]
            if ok:
                done[step.id] = ok[-1]
        turn = 1 + sum(1 for m in request.messages if isinstance(m, AssistantMessage))
        calls: list[ToolCall] = []
        for step in task.workflow.steps:
            upstream = {b.step for b in step.arguments.values() if isinstance(b, StepBinding)}
            if step.id in done or not upstream <= set(done):
                continue
            arguments = resolve_arguments(step, task.inputs, done)
            failures = sum(1 for c, r in pairs if c.name == step.tool and r.is_error)
            copies = min(1 + failures, self.max_copies)
            calls += [ToolCall(f"call_{turn}_{step.id}_{k}", step.tool, arguments) for k in range(copies)]
        if len(done) == len(task.workflow.steps):
            return finish_response(turn, "completed", "every step succeeded")
        if not calls:
            return finish_response(turn, "aborted", "no step can run")
        return ModelResponse(tool_calls=tuple(calls), stop_reason="tool_use")
