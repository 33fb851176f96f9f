"""ResiliBench task prompts in four variants (our own wording, following the paper's App. B.2 structure).

* ``baseline``: the task, its inputs and expected output, how to use the tools, four steps, finish.
* ``cot``: baseline plus a request to reason step by step before acting (App. B.2.2).
* ``optimal``: baseline plus the DP-optimal workflow plan (App. B.2.3): numbered steps with the
  reason, the dependencies and where every argument comes from, the critical tools, the predicted
  probability of full success, and an execution strategy.
* ``flawed:TYPE[:SEVERITY[:METHOD]]``: the optimal prompt with a flawed plan (App. B.2.4, C.3;
  `flaws`). The episode is still scored against the task's ground truth.
"""

from __future__ import annotations

import json
from functools import cache, lru_cache

from mcp_resili.suites.resilibench.flaws import FlawError, Plan, apply_flaw, optimal_plan, parse_flaw
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.tasks.model import SameTask, Task
from mcp_resili.tools import ToolLibrary
from mcp_resili.tools.search import ToolIndex

VARIANTS = ("baseline", "cot", "optimal", "flawed")

_INSTRUCTIONS = """\
How to work:
1. Work out which operations the task needs.
2. Find the tools for them{discovery}.
3. Call the tools one at a time, in an order that respects their dependencies. Pass real data \
between steps: give each tool the `data` object returned by the step that produced what it needs.
4. Read every result before the next call: tools can fail, and a failed step can be retried.

When the task is done, call the `finish` tool with status "completed" and a one-line summary. If it \
cannot be done, call `finish` with status "aborted" and say which step failed and why."""

_DISCOVERY = (
    ' (`search_tools` finds tools by keywords such as "file reader writer", "data validation '
    'parser" or "network api fetch"; `tool_info` shows a tool\'s parameters, errors and dependencies)'
)

_COT = """\
Think before you act. Before your first call, reason step by step about which tools the task needs \
and why, and in which order they must run; explain that reasoning, then follow it. Begin your first \
response with "Reasoning:"."""

_STRATEGY = """\
### Execution strategy
- Follow the plan in order; each step's inputs are listed with it.
- If a call fails, retry it before moving on; steps that depend on it cannot run until it succeeds.
- Pay special attention to the critical tools: everything after them depends on their output."""


@cache
def _library() -> ToolLibrary:
    return resilibench_library()


@cache
def _index() -> ToolIndex:
    return ToolIndex(_library().specs)


#: Tasks whose base text and optimal plan are kept: a run plays a task's variants and trials side by
#: side (`RunPlan.iter_cells`), each with the same base text and (optimal, flawed) the same plan.
_RECENT_TASKS = 64


@lru_cache(maxsize=_RECENT_TASKS)
def _base_of(task: SameTask, discovery: bool) -> str:
    return _base(task.task, discovery)


@lru_cache(maxsize=_RECENT_TASKS)
def _optimal_plan_of(task: SameTask) -> Plan:
    return optimal_plan(task.task, _library())


def _base(task: Task, discovery: bool) -> str:
    inputs = json.dumps(task.inputs, indent=2, sort_keys=True)
    outputs = ", ".join(task.expected_outputs.get("outputs_from", [])) or "the last step"
    return (
        f"Task: {task.description}\n\nInputs:\n{inputs}\n\n"
        f"Expected output: the results of {outputs}, each with a success status.\n\n"
        + _INSTRUCTIONS.format(discovery=_DISCOVERY if discovery else "")
    )


def render_plan(task: Task, plan: Plan) -> str:
    """The plan section of the optimal and flawed prompts (same layout for both)."""
    lines = ["## Workflow execution plan"]
    for number, step in enumerate(plan.steps, 1):
        lines.append(f"{number}. Execute {step.tool}")
        lines.append(f"   - Reason: {step.reason}")
        if step.requires:
            lines.append(f"   - Requires: {', '.join(step.requires)}")
        for name, source in step.arguments.items():
            lines.append(f"   - `{name}`: {source}")
        if step.note:
            lines.append(f"   - Note: {step.note}")
    dependents = {a for a, _ in task.workflow.edges}
    critical = list(dict.fromkeys(s.tool for s in task.workflow.steps if s.id in dependents))
    lines.append("")
    lines.append("### Analysis")
    lines.append(f"Critical tools identified: {', '.join(critical) or 'none'}")
    probability = task.metadata.get("optimal_workflow", {}).get("success_probability")
    if isinstance(probability, int | float):
        lines.append(f"Predicted probability of full success when following this plan: {probability:.1%}")
    lines.append("")
    lines.append(_STRATEGY)
    return "\n".join(lines)


def flawed_plan(task: Task, flaw: str) -> Plan:
    """The plan of ``task`` corrupted by ``flaw`` (``TYPE[:SEVERITY[:METHOD]]``)."""
    kind, severity, method = parse_flaw(flaw)
    plan = _optimal_plan_of(SameTask(task))
    return apply_flaw(task, plan, _library(), _index(), kind, severity, method)


def render_prompt(task: Task, variant: str = "baseline", *, discovery: bool = True) -> str:
    """The user prompt for ``task`` in ``variant``; ``ValueError`` (naming it) for an unknown variant."""
    name, _, argument = variant.partition(":")
    if name not in VARIANTS or (argument and name != "flawed"):
        raise ValueError(
            f"unknown ResiliBench variant {variant!r}; choose from baseline, cot, optimal, "
            "flawed:TYPE[:SEVERITY[:METHOD]]"
        )
    base = _base_of(SameTask(task), discovery)
    if name == "baseline":
        return base
    if name == "cot":
        return f"{base}\n\n{_COT}"
    if name == "optimal":
        return f"{base}\n\n{render_plan(task, _optimal_plan_of(SameTask(task)))}"
    if not argument:
        raise FlawError("the flawed variant needs a flaw type: flawed:TYPE[:SEVERITY[:METHOD]]")
    return f"{base}\n\n{render_plan(task, flawed_plan(task, argument))}"
