"""Stop rules: when the runner ends an episode early, and which rule did it. Each suite owns its set.

A `StopRules` set has a name (recorded in every ``episode_end`` event) and a check that, given the
episode's tool calls so far, names the rule that fires (`StopDecision`) or returns None. The runner
applies the suite's set after every turn (``run --stop-rules NAME`` picks another registered set),
records the rule in the trace's ``episode_end`` event and in the stored episode row.

The framework's own set is ``none`` (`NO_STOP_RULES`): only the episode's budgets (turns, tokens,
time) and the agent end an episode; it is what a suite that names no rules gets. Suites define their
own (ResiliBench's in ``suites/resilibench/stop_rules.py``, ReliabilityBench's likewise).

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

from mcp_resili.constants import DISCOVERY_TOOLS
from mcp_resili.trace import FinishEvent, ToolCallEvent, TraceEvent


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


NO_STOP_RULES = StopRules(
    "none", "no early stop: only the budgets and the agent end an episode", lambda _: None
)


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
