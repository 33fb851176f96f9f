"""The tiny suite's scorer: pure, ``score(task, trace) -> Score`` with named components.

A step is *done* when a successful call of its tool carried the step's golden arguments (its
bindings resolved over the tools' clean outputs). ``full``: every step done, in an order the DAG
allows, every write right and none extra, and the agent finished; ``partial``: some step done;
``failure``: none.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_resili import Score, Task, Trace, resolve_arguments
from tiny_suite.tools import library

LEVEL_VALUES = {"full": 1.0, "partial": 0.5, "failure": 0.0}


def golden_arguments(task: Task) -> dict[str, dict[str, Any]]:
    """Each step's right arguments, by step id."""
    tools = library()
    state: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    arguments: dict[str, dict[str, Any]] = {}
    for step in task.workflow.steps:  # listed in a topological order
        arguments[step.id] = resolve_arguments(step, task.inputs, outputs)
        outputs[step.id] = tools.simulate(step.tool, arguments[step.id], state)
    return arguments


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def score(task: Task, trace: Trace) -> Score:
    """Steps done with the right data, writes right, order and finish; see the module docstring."""
    golden = golden_arguments(task)
    succeeded = [call for call in trace.tool_calls if not call.is_error]
    first_done: dict[str, int] = {}
    for step in task.workflow.steps:
        for call in succeeded:
            if call.tool == step.tool and _same(call.arguments, golden[step.id]):
                first_done[step.id] = call.seq
                break
    golden_writes = [golden[s.id] for s in task.workflow.steps if library().spec(s.tool).access == "write"]
    writes = [c for c in succeeded if library().spec(c.tool).access == "write"]
    wrong_writes = len(writes) - sum(
        1 for expected in golden_writes if any(_same(c.arguments, expected) for c in writes)
    )
    order_ok = all(
        first_done[a] < first_done[b] for a, b in task.workflow.edges if a in first_done and b in first_done
    )
    finished = trace.finish is not None and trace.finish.status == "completed"
    steps = len(task.workflow.steps)
    complete = len(first_done) == steps and order_ok and wrong_writes == 0 and finished
    label = "full" if complete else "partial" if first_done else "failure"
    reasons = [
        f"step {s.id} ({s.tool}) never succeeded with {golden[s.id]}"
        for s in task.workflow.steps
        if s.id not in first_done
    ]
    if wrong_writes:
        reasons.append(f"{wrong_writes} write(s) wrong or repeated")
    if not order_ok:
        reasons.append("a step ran before a step it needs")
    if not finished:
        reasons.append("no completed finish")
    return Score(
        suite="tiny",
        task=task.id,
        label=label,
        value=LEVEL_VALUES[label],
        components={
            "steps_done": len(first_done),
            "steps_needed": steps,
            "wrong_writes": wrong_writes,
            "order_ok": order_ok,
            "finished": finished,
        },
        reasons=tuple(reasons),
    )
