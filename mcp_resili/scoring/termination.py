"""Stop rules: when the runner ends an episode early, and which rule did it. Each suite owns its set.

A `StopRules` set has a name (recorded in every ``episode_end`` event) and a check that, given the
episode's tool calls so far, names the rule that fires (`StopDecision`) or returns None. The runner
applies the suite's set after every turn (``run --stop-rules NAME`` picks another registered set),
records the rule in the trace's ``episode_end`` event and in the stored episode row.

Sets defined here (suites may define their own):

* ``resilibench`` (`RESILIBENCH_STOP_RULES`), the reference ResiliBench executor's rules: the
  episode ends at the first call where the last 5 calls all failed (``too_many_errors``), more
  than 15 calls have succeeded (``too_many_calls``), or the last 5 successful calls were the same
  tool (``loop``). The default of a suite that does not choose.
* ``none`` (`NO_STOP_RULES`): only the episode's budgets (turns, tokens, time) and the agent end it.

**The call budget**: an episode may make at most ``budget`` calls (the episode's ``max_turns``).
Every tool call counts, failed and refused ones included, and so does ``finish`` (the completion
signal takes a call); discovery calls (``search_tools``, ``tool_info``) do not: they are no part of
the failure model (never faulted, no draw), and the paper counts searches as turns, not calls. It is
a budget of *calls*, not of model turns, because the call is the one unit
every trace shows: the server sees no model turns, so only a call budget can be enforced on the
server-side traces of an agent we did not run. With the paper's one call per turn the two are the
same; a model that makes several calls in one turn spends several. The runner stops making calls
when the budget is spent (`counts_against_budget`); the scorer ignores whatever an agent did past
it, and everything after the first ``finish`` (`within_budget`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from mcp_resili import DISCOVERY_TOOLS
from mcp_resili.trace import FinishEvent, ToolCallEvent, TraceEvent

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


@dataclass(frozen=True)
class StopDecision:
    """A stop rule that fired: its name, and the episode termination it maps to."""

    rule: str
    termination: Literal["too_many_errors", "loop"]


@dataclass(frozen=True)
class StopRules:
    """A named set of stop rules; ``check(calls)`` names the rule that fires on ``calls``, if any."""

    name: str
    #: One line for ``docs`` and ``--help``: what ends an episode under this set.
    description: str
    check: Callable[[Sequence[ToolCallEvent]], StopDecision | None]


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
NO_STOP_RULES = StopRules(
    "none", "no early stop: only the budgets and the agent end an episode", lambda _: None
)
#: Rule sets a run can ask for by name (``run --stop-rules``), beside its suite's own.
STOP_RULE_SETS: dict[str, StopRules] = {r.name: r for r in (RESILIBENCH_STOP_RULES, NO_STOP_RULES)}


def resolve_stop_rules(rules: StopRules | bool) -> StopRules:
    """A suite's ``stop_rules`` as a set: True is ResiliBench's rules (the old default), False none."""
    if isinstance(rules, StopRules):
        return rules
    return RESILIBENCH_STOP_RULES if rules else NO_STOP_RULES


def counts_against_budget(event: TraceEvent) -> bool:
    """Whether ``event`` spends one call of the budget: any tool call but discovery, and ``finish``."""
    if isinstance(event, FinishEvent):
        return True
    return isinstance(event, ToolCallEvent) and event.tool not in DISCOVERY_TOOLS


@dataclass(frozen=True)
class BudgetCut:
    """The part of a trace that counts under a call budget."""

    #: The events that count, in order: everything before the first call past the budget, up to
    #: and including the first ``finish``.
    events: tuple[TraceEvent, ...]
    budget: int
    #: Calls that count against the budget among ``events``.
    spent: int
    #: Calls made past the budget (before any ``finish``): ignored.
    over_budget: int
    #: Calls made after the first ``finish``: ignored.
    after_finish: int


def within_budget(events: Sequence[TraceEvent], budget: int) -> BudgetCut:
    """Cut ``events`` to what counts: at most ``budget`` calls, and nothing after the first ``finish``."""
    if budget < 1:
        raise ValueError(f"a call budget must be at least 1, got {budget}")
    kept: list[TraceEvent] = []
    spent = over = after = 0
    finished = False
    for event in events:
        costs = counts_against_budget(event)
        if finished:
            after += costs
        elif costs and spent >= budget:
            over += 1
        elif not over:
            kept.append(event)
            spent += costs
            finished = isinstance(event, FinishEvent)
    return BudgetCut(tuple(kept), budget, spent, over, after)
