"""The one fault injector: every decision and every application of a fault goes through here."""

from __future__ import annotations

import random

from mcp_resili.faults.base import BaseFault, BasePlan, CallContext, FaultDecision, ToolOutcome
from mcp_resili.faults.rng import derive_rng

_DREW = "a plan or fault that declares uses_rng = False drew a random number"


class _NoDraws(random.Random):
    """Handed to plans and faults that declare they never draw (``uses_rng = False``): a draw is a bug.

    Every draw of `random.Random` comes from one of these two.
    """

    def random(self) -> float:
        """Refused."""
        raise RuntimeError(_DREW)

    def getrandbits(self, k: int, /) -> int:
        """Refused."""
        raise RuntimeError(_DREW)


_UNUSED_RNG = _NoDraws(0)


class FaultInjector:
    """Decides and applies faults for one plan and seed. Holds no episode state."""

    def __init__(self, plan: BasePlan, seed: int) -> None:
        self.plan = plan
        self.seed = seed

    def decide(self, call: CallContext) -> FaultDecision:
        """The ledger entry for ``call``: the plan's decision with the call's own RNG."""
        if not self.plan.uses_rng:
            return self.plan.decide(call, _UNUSED_RNG)
        return self.plan.decide(call, derive_rng(self.seed, call.fault_key, call.tool.name, call.ordinal))

    @staticmethod
    def runs_tool(fault: BaseFault | None) -> bool:
        """Whether the tool still runs under ``fault`` (response-side faults let the side effect happen)."""
        return fault is None or fault.side == "response"

    def apply(self, fault: BaseFault | None, outcome: ToolOutcome | None, call: CallContext) -> ToolOutcome:
        """The outcome the agent sees: ``outcome`` (None if the tool did not run) transformed by ``fault``."""
        if fault is None:
            if outcome is None:
                raise ValueError("apply() needs the tool's outcome when no fault fired")
            return outcome
        if not fault.uses_rng:
            return fault.apply(outcome, call, _UNUSED_RNG)
        # A second, independent stream for the fault's own randomness (e.g. which field to corrupt).
        rng = derive_rng(self.seed, call.fault_key + "/apply", call.tool.name, call.ordinal)
        return fault.apply(outcome, call, rng)
