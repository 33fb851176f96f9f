"""Episode termination rules shared by the runner (to stop an agent) and scorers (to judge any trace).

The reference ResiliBench executor's rules: the episode ends at the first call where the last 5
calls all failed (``too_many_errors``), more than 15 calls have succeeded (``too_many_calls``), or
the last 5 successful calls were the same tool (``loop``).
"""

from __future__ import annotations

from mcp_resili.trace import ToolCallEvent

CONSECUTIVE_FAILURES = 5
MAX_SUCCESSFUL_CALLS = 15
LOOP_REPEATS = 5
#: Phrases that count as an explicit completion signal in an agent's text (case-insensitive).
COMPLETION_PHRASES = (
    "task_completed",
    "task completed",
    "task is complete",
    "finished executing",
    "all steps completed",
    "workflow complete",
    "done with the task",
    "successfully completed the task",
    "task has been completed",
)


def termination_index(calls: list[ToolCallEvent]) -> tuple[int, str | None]:
    """How many calls count, and which termination rule (if any) cut the episode there."""
    successes: list[str] = []
    for i in range(len(calls)):
        window = calls[max(0, i - CONSECUTIVE_FAILURES + 1) : i + 1]
        if len(window) == CONSECUTIVE_FAILURES and all(c.is_error for c in window):
            return i + 1, "too_many_errors"
        if not calls[i].is_error:
            successes.append(calls[i].tool)
            if len(successes) > MAX_SUCCESSFUL_CALLS:
                return i + 1, "too_many_calls"
            last = successes[-LOOP_REPEATS:]
            if len(last) == LOOP_REPEATS and len(set(last)) == 1:
                return i + 1, "loop"
    return len(calls), None
