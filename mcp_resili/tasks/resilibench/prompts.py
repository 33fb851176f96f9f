"""ResiliBench task prompts (our own wording, following the paper's App. B.2 structure)."""

from __future__ import annotations

import json

from mcp_resili.tasks.model import Task

VARIANTS = ("baseline",)

_INSTRUCTIONS = """\
Use the available tools to complete the task. Pass real data between steps: give each tool the \
`data` object returned by the step that produced what it needs. Some tools must run after others \
(their descriptions and errors say which). Tools can fail; read every result before the next step.
When the task is done, call the `finish` tool with status "completed" and a one-line summary. If it \
cannot be done, call `finish` with status "aborted" and say which step failed and why."""


def render_prompt(task: Task, variant: str = "baseline") -> str:
    """The user prompt for ``task``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown ResiliBench variant {variant!r}; choose from {list(VARIANTS)}")
    inputs = json.dumps(task.inputs, indent=2, sort_keys=True)
    return f"Task: {task.description}\n\nInputs:\n{inputs}\n\n{_INSTRUCTIONS}"
