"""The one fault injector: decides each call's fault from the plan, and applies it."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcp_resili.faults.model import (
    ErrorFault,
    Fault,
    FaultDecision,
    FaultPlan,
    NoFaults,
    ResiliBenchFaults,
    RuleFaults,
)
from mcp_resili.faults.rng import derive_rng
from mcp_resili.registry.spec import ToolSpec


@dataclass(frozen=True)
class CallOutcome:
    """How an earlier call in the episode ended (the history fault rules look at)."""

    tool: str
    ok: bool


@dataclass(frozen=True)
class CallContext:
    """What the injector may know about a call when it decides."""

    fault_key: str
    tool: ToolSpec
    ordinal: int
    history: Sequence[CallOutcome]


@dataclass(frozen=True)
class ToolOutcome:
    """A call's result before it becomes an MCP ``CallToolResult``."""

    structured: dict[str, Any] | None
    error_code: str | None = None
    message: str = ""

    @property
    def is_error(self) -> bool:
        """True when the agent sees an error."""
        return self.error_code is not None


class FaultInjector:
    """Decides and applies faults for one fault plan and seed. Stateless: history is passed in."""

    def __init__(self, plan: FaultPlan, seed: int) -> None:
        self.plan = plan
        self.seed = seed

    def decide(self, call: CallContext) -> FaultDecision:
        """The ledger entry for ``call``: every roll, the probability it was compared to, the fault."""
        rng = derive_rng(self.seed, call.fault_key, call.tool.name, call.ordinal)
        plan = self.plan
        if isinstance(plan, NoFaults):
            return FaultDecision(plan=plan.kind, ordinal=call.ordinal)
        if isinstance(plan, ResiliBenchFaults):
            p = resilibench_success_probability(plan, call.tool, call.history)
            roll = rng.random()
            fault: Fault | None = None
            if roll >= p:
                codes = call.tool.error_codes or ("OPERATION_FAILED",)
                code = codes[rng.randrange(len(codes))]
                fault = ErrorFault(code=code, message=_describe(call.tool, code), transient=True)
            return FaultDecision(
                plan=plan.kind, ordinal=call.ordinal, roll=roll, success_probability=p, fault=fault
            )
        assert isinstance(plan, RuleFaults)  # the union is closed; mypy checks exhaustiveness above
        for index, rule in enumerate(plan.rules):
            if not fnmatch.fnmatchcase(call.tool.name, rule.tool):
                continue
            if rule.calls is not None and call.ordinal + 1 not in rule.calls:
                continue
            roll = rng.random()
            if roll < rule.probability:
                return FaultDecision(
                    plan=plan.kind, ordinal=call.ordinal, roll=roll, rule=index, fault=rule.fault
                )
        return FaultDecision(plan=plan.kind, ordinal=call.ordinal)

    @staticmethod
    def runs_tool(fault: Fault | None) -> bool:
        """Whether the tool still runs under ``fault`` (response-side faults let the side effect happen)."""
        return fault is None or fault.side == "response"

    @staticmethod
    def apply(fault: Fault | None, outcome: ToolOutcome | None, tool: ToolSpec) -> ToolOutcome:
        """The outcome the agent sees: ``outcome`` (None if the tool did not run) transformed by ``fault``."""
        if fault is None:
            if outcome is None:
                raise ValueError("apply() needs the tool's outcome when no fault fired")
            return outcome
        message = fault.message or _describe(tool, fault.code)
        return ToolOutcome(structured=None, error_code=fault.code, message=message)


def resilibench_success_probability(
    plan: ResiliBenchFaults, tool: ToolSpec, history: Sequence[CallOutcome]
) -> float:
    """ResiliBench's per-call success probability (the rule is written out on `ResiliBenchFaults`)."""
    p = plan.base_success
    for dep in tool.dependencies:
        runs = [h.ok for h in history if h.tool == dep]
        if not any(runs):
            p *= plan.unmet_dependency_factor
        elif not runs[-1]:
            p *= plan.failed_dependency_factor
    window = history if plan.history_window is None else history[-plan.history_window :]
    p *= plan.history_factor ** sum(1 for h in window if not h.ok)
    return min(max(p, plan.min_success), plan.max_success)


def _describe(tool: ToolSpec, code: str) -> str:
    for error in tool.errors:
        if error.code == code:
            return error.description
    return code.replace("_", " ").lower()
