"""The tiny suite's six tasks, each with its ground-truth workflow (a DAG of tool calls).

Every argument is bound to a task input, a constant, or an earlier step's output. No task calls a
tool twice (the scripted oracle matches a step by its tool). Worked out by hand:

========  =========  ===============================================  ===============================
task      type       workflow                                         golden values
========  =========  ===============================================  ===============================
tiny-1    lookup     lookup(apple)                                    3
tiny-2    compute    lookup(pear) → scale(×4)                         5, 20
tiny-3    store      lookup(plum) → scale(×3) → record(plums)         7, 21, record plums=21
tiny-4    store      lookup(fig) ∥ echo(figs) → record                11, "figs", record figs=11
tiny-5    store      lookup(kiwi) → scale(×2) → record → list_records 13, 26, record kiwis=26, 1 row
tiny-6    compute    lookup(apple) → scale(×2, a constant);           3, 6, "apples", record
                     echo(apples); both → record                      apples=6
========  =========  ===============================================  ===============================
"""

from __future__ import annotations

from functools import cache
from typing import Any

from mcp_resili import Task, TaskSet


def _input(key: str) -> dict[str, str]:
    return {"source": "input", "key": key}


def _step(step: str, path: str) -> dict[str, str]:
    return {"source": "step", "step": step, "path": path}


def _task(
    number: int,
    task_type: str,
    complexity: str,
    description: str,
    inputs: dict[str, Any],
    steps: list[dict[str, Any]],
    edges: list[tuple[str, str]],
) -> dict[str, Any]:
    return {
        "id": f"tiny-{number}",
        "suite": "tiny",
        "task_type": task_type,
        "complexity": complexity,
        "description": description,
        "inputs": inputs,
        "required_tools": [step["tool"] for step in steps],
        "workflow": {"steps": steps, "edges": [list(edge) for edge in edges]},
        "constraints": {"max_turns": 12},
    }


TASKS = [
    _task(
        1,
        "lookup",
        "easy",
        "Look up the number filed under apple.",
        {"key": "apple"},
        [{"id": "look", "tool": "lookup", "arguments": {"key": _input("key")}}],
        [],
    ),
    _task(
        2,
        "compute",
        "easy",
        "Look up pear and multiply its number by 4.",
        {"key": "pear", "factor": 4},
        [
            {"id": "look", "tool": "lookup", "arguments": {"key": _input("key")}},
            {
                "id": "times",
                "tool": "scale",
                "arguments": {"value": _step("look", "value"), "factor": _input("factor")},
            },
        ],
        [("look", "times")],
    ),
    _task(
        3,
        "store",
        "medium",
        "Look up plum, multiply its number by 3 and file the product as plums.",
        {"key": "plum", "factor": 3, "label": "plums"},
        [
            {"id": "look", "tool": "lookup", "arguments": {"key": _input("key")}},
            {
                "id": "times",
                "tool": "scale",
                "arguments": {"value": _step("look", "value"), "factor": _input("factor")},
            },
            {
                "id": "file",
                "tool": "record",
                "arguments": {"label": _input("label"), "value": _step("times", "value")},
            },
        ],
        [("look", "times"), ("times", "file")],
    ),
    _task(
        4,
        "store",
        "medium",
        "Look up fig, echo the label figs, and file fig's number under the echoed label.",
        {"key": "fig", "label": "figs"},
        [
            {"id": "look", "tool": "lookup", "arguments": {"key": _input("key")}},
            {"id": "say", "tool": "echo", "arguments": {"text": _input("label")}},
            {
                "id": "file",
                "tool": "record",
                "arguments": {"label": _step("say", "text"), "value": _step("look", "value")},
            },
        ],
        [("look", "file"), ("say", "file")],
    ),
    _task(
        5,
        "store",
        "hard",
        "Look up kiwi, double its number, file it as kiwis, then list what was filed.",
        {"key": "kiwi", "factor": 2, "label": "kiwis"},
        [
            {"id": "look", "tool": "lookup", "arguments": {"key": _input("key")}},
            {
                "id": "times",
                "tool": "scale",
                "arguments": {"value": _step("look", "value"), "factor": _input("factor")},
            },
            {
                "id": "file",
                "tool": "record",
                "arguments": {"label": _input("label"), "value": _step("times", "value")},
            },
            {"id": "check", "tool": "list_records", "arguments": {}},
        ],
        [("look", "times"), ("times", "file"), ("file", "check")],
    ),
    _task(
        6,
        "compute",
        "hard",
        "Look up apple and double its number; echo the label apples; file the double under it.",
        {"key": "apple", "label": "apples"},
        [
            {"id": "look", "tool": "lookup", "arguments": {"key": _input("key")}},
            {
                "id": "times",
                "tool": "scale",
                "arguments": {"value": _step("look", "value"), "factor": {"source": "constant", "value": 2}},
            },
            {"id": "say", "tool": "echo", "arguments": {"text": _input("label")}},
            {
                "id": "file",
                "tool": "record",
                "arguments": {"label": _step("say", "text"), "value": _step("times", "value")},
            },
        ],
        [("look", "times"), ("times", "file"), ("say", "file")],
    ),
]


@cache
def tasks() -> tuple[Task, ...]:
    """The six tasks, validated as a task file would be."""
    return TaskSet.model_validate({"suite": "tiny", "generator": "written by hand", "tasks": TASKS}).tasks
