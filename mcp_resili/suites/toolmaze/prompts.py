"""ToolMaze prompts: the plain one and the failure-aware hint (our wording of the paper's §5 setup)."""

from __future__ import annotations

from mcp_resili.tasks.model import Task

VARIANTS = ("baseline", "hint")

_INSTRUCTIONS = """\
Use the available tools. Each tool returns a record with an id (a field ending in `_id`) and a \
figure; a later step takes them as its inputs. When the request is done, call `finish` with status \
"completed" and a one-line summary."""

_HINT = """\
Be careful: tools may fail or return unexpected data.
- A sub-task may be achievable with a different tool or combination of tools; if one keeps failing, \
look for an alternative that does the same job.
- Check every result before using it: required fields present, values reasonable (no negative \
prices or counts, percentages within 0-100, dates in order, the record is about what you asked), \
types right, no debugging output.
- If a required step cannot be done by any tool, stop: call `finish` with status "aborted" and a \
summary that starts "Task aborted:" and says which step failed and why."""


def render_prompt(task: Task, variant: str = "baseline") -> str:
    """The user prompt for ``task``; ``hint`` adds the failure-aware guidance."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown ToolMaze variant {variant!r}; choose from {list(VARIANTS)}")
    text = f"{task.description}\n\n{_INSTRUCTIONS}"
    return f"{text}\n\n{_HINT}" if variant == "hint" else text
