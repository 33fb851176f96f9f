"""ResiliBench's stop rules: when the reference executor ends an episode early (the scorer applies them too).

The episode ends at the first call where the last `CONSECUTIVE_FAILURES` calls all failed
(``too_many_errors``), more than `MAX_SUCCESSFUL_CALLS` calls have succeeded (``too_many_calls``), or
the last `LOOP_REPEATS` successful calls were the same tool (``loop``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from mcp_resili.scoring.termination import StopDecision, StopRules
from mcp_resili.trace import ToolCallEvent

CONSECUTIVE_FAILURES = 5
MAX_SUCCESSFUL_CALLS = 15
LOOP_REPEATS = 5

_RESILIBENCH_TERMINATION: dict[str, Literal["too_many_errors", "loop"]] = {
    "too_many_errors": "too_many_errors",
    "too_many_calls": "too_many_errors",
    "loop": "loop",
}


def termination_index(calls: Sequence[ToolCallEvent]) -> tuple[int, str | None]:
    """How many calls count, and which ResiliBench rule (if any) cut the episode there.

    The rules, in the order they are checked at each call: `CONSECUTIVE_FAILURES` failed calls in a
    row; more than `MAX_SUCCESSFUL_CALLS` successful calls; the same tool in `LOOP_REPEATS` successful
    calls in a row (failed calls between them do not break the row). One pass with running counts: the
    agent loop asks this after every turn.
    """
    failed_in_row = successes = same_in_row = 0
    last_success: str | None = None
    for i, call in enumerate(calls):
        if call.is_error:
            failed_in_row += 1
            if failed_in_row == CONSECUTIVE_FAILURES:
                return i + 1, "too_many_errors"
            continue
        failed_in_row = 0
        successes += 1
        if successes > MAX_SUCCESSFUL_CALLS:
            return i + 1, "too_many_calls"
        same_in_row = same_in_row + 1 if call.tool == last_success else 1
        last_success = call.tool
        if same_in_row == LOOP_REPEATS:
            return i + 1, "loop"
    return len(calls), None


def _resilibench_check(calls: Sequence[ToolCallEvent]) -> StopDecision | None:
    _, rule = termination_index(calls)
    return None if rule is None else StopDecision(rule, _RESILIBENCH_TERMINATION[rule])


RESILIBENCH_STOP_RULES = StopRules(
    "resilibench",
    f"{CONSECUTIVE_FAILURES} failed calls in a row, more than {MAX_SUCCESSFUL_CALLS} successful calls, "
    f"or the same tool {LOOP_REPEATS} successful times in a row",
    _resilibench_check,
)
