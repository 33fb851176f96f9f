"""resili-invoices: a worked third-party mcp-resili suite (three tools, five tasks, a data-flow scorer).

mcp-resili loads it through the ``mcp_resili.suites`` entry point named in ``pyproject.toml``; it
imports from ``mcp_resili`` alone (the public face): `Suite`, `ToolLibrary`/`load_specs`, `ToolFailure`,
`TaskSet`, `Score`, `Trace` and `resolve_arguments`. It names no stop rules, and inherits none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from mcp_resili import (
    Score,
    Suite,
    Task,
    TaskSet,
    ToolFailure,
    ToolLibrary,
    ToolState,
    Trace,
    load_specs,
    resolve_arguments,
)

ORDERS = {
    "ORD-1001": (120.0, "EUR"),
    "ORD-1002": (75.5, "USD"),
    "ORD-1003": (42.0, "GBP"),
    "ORD-1004": (9.99, "EUR"),
}
#: Units of EUR per unit of each currency (fixed, so every run is reproducible).
EUR_PER_UNIT = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17}


def lookup_order(arguments: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """The order's amount and currency; an unknown id is the tool's own declared error."""
    order_id = arguments["order_id"]
    if order_id not in ORDERS:
        raise ToolFailure("ORDER_NOT_FOUND", f"no order {order_id}")
    amount, currency = ORDERS[order_id]
    return {"order_id": order_id, "amount": amount, "currency": currency}


def convert_currency(arguments: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """``amount`` in ``source`` → ``target``, rounded to cents."""
    eur = arguments["amount"] * EUR_PER_UNIT[arguments["source"]]
    return {"amount": round(eur / EUR_PER_UNIT[arguments["target"]], 2), "currency": arguments["target"]}


def send_invoice(arguments: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Record the invoice in the episode's state (a write: a retry after a lost reply sends twice)."""
    sent = state.setdefault("invoices", [])
    sent.append(dict(arguments))
    return {"invoice_id": f"INV-{len(sent):04d}"}


@cache
def library() -> ToolLibrary:
    """The three tools (``tools.json``) bound to their simulators."""
    simulators = {
        "lookup_order": lookup_order,
        "convert_currency": convert_currency,
        "send_invoice": send_invoice,
    }
    return ToolLibrary("invoices", load_specs(__name__, "tools.json"), simulators)


@cache
def tasks() -> tuple[Task, ...]:
    """The five tasks (``tasks.json``)."""
    text = resources.files(__name__).joinpath("tasks.json").read_text(encoding="utf-8")
    return TaskSet.model_validate_json(text).tasks


def golden_arguments(task: Task) -> dict[str, dict[str, Any]]:
    """Each step's right arguments: its bindings resolved over the tools' clean outputs."""
    outputs: dict[str, Any] = {}
    arguments: dict[str, dict[str, Any]] = {}
    tools = library()
    for step in task.workflow.steps:  # listed in a topological order
        arguments[step.id] = resolve_arguments(step, task.inputs, outputs)
        outputs[step.id] = tools.simulators[step.tool](arguments[step.id], {})
    return arguments


def score(task: Task, trace: Trace) -> Score:
    """``full``: every invoice of the task went out with the right amount and currency, and the agent
    finished; ``partial``: some did; ``failure``: none did."""
    golden = golden_arguments(task)
    sends = [step.id for step in task.workflow.steps if step.tool == "send_invoice"]
    sent = [c.arguments for c in trace.tool_calls if c.tool == "send_invoice" and not c.is_error]
    right = [
        s
        for s in sends
        if any(json.dumps(a, sort_keys=True) == json.dumps(golden[s], sort_keys=True) for a in sent)
    ]
    wrong = len(sent) - len(right)
    finished = trace.finish is not None and trace.finish.status == "completed"
    label = (
        "full" if len(right) == len(sends) and finished and wrong == 0 else "partial" if right else "failure"
    )
    return Score(
        suite="invoices",
        task=task.id,
        label=label,
        value={"full": 1.0, "partial": 0.5, "failure": 0.0}[label],
        components={
            "invoices_right": len(right),
            "invoices_needed": len(sends),
            "extra_or_wrong": wrong,
            "finished": finished,
        },
        reasons=tuple(
            f"missing or wrong invoice for step {s}: expected {golden[s]}" for s in sends if s not in right
        ),
    )


def render_prompt(task: Task, variant: str) -> str:
    """The user prompt: the task's description and how to finish."""
    return f"{task.description}\nWhen done, call `finish` with status 'completed' and a summary."


def suite() -> Suite:
    """The suite (the ``mcp_resili.suites`` entry point)."""
    return Suite(
        name="invoices",
        description="Invoice a customer's order in their currency (a worked third-party suite).",
        library=library(),
        load_tasks=tasks,
        render_prompt=render_prompt,
        score=score,
        default_faults="lambda=0.2",
    )
