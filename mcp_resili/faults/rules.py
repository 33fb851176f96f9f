"""Plans that need no model: no faults at all, or explicit rules (tool glob, call numbers, probability)."""

from __future__ import annotations

import fnmatch
import functools
import random
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mcp_resili.faults.base import BasePlan, CallContext, Fault, FaultDecision


class NoFaults(BasePlan):
    """Never inject a fault."""

    kind: Literal["none"] = "none"
    uses_rng: ClassVar[bool] = False

    def decide(self, call: CallContext, rng: random.Random) -> FaultDecision:
        """Nothing fires."""
        return _nothing_fires(self.kind, call.ordinal)


@functools.lru_cache(maxsize=1024)
def _nothing_fires(plan: str, ordinal: int) -> FaultDecision:
    # The same immutable entry for every call with this ordinal: no model to build on every call.
    return FaultDecision(plan=plan, ordinal=ordinal)


class FaultRule(BaseModel):
    """Inject ``fault`` into calls of tools matching ``tool`` (a glob).

    ``calls`` lists the 1-based call numbers of that tool in the episode that are eligible (all calls
    when omitted); an eligible call fires with ``probability``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    tool: str = "*"
    calls: tuple[int, ...] | None = None
    probability: float = Field(1.0, ge=0, le=1)
    fault: Fault

    @model_validator(mode="after")
    def _positive_calls(self) -> FaultRule:
        if self.calls is not None and any(n < 1 for n in self.calls):
            raise ValueError(f"call numbers are 1-based, got {list(self.calls)}")
        return self


class RuleFaults(BasePlan):
    """An ordered list of rules; the first rule that fires decides the call's fault."""

    kind: Literal["rules"] = "rules"
    rules: tuple[FaultRule, ...]

    def decide(self, call: CallContext, rng: random.Random) -> FaultDecision:
        """The first matching rule whose roll comes in under its probability."""
        for index, rule in enumerate(self.rules):
            if not fnmatch.fnmatchcase(call.tool.name, rule.tool):
                continue
            if rule.calls is not None and call.ordinal + 1 not in rule.calls:
                continue
            roll = rng.random()
            if roll < rule.probability:
                return FaultDecision(
                    plan=self.kind, ordinal=call.ordinal, roll=roll, rule=index, fault=rule.fault
                )
        return FaultDecision(plan=self.kind, ordinal=call.ordinal)
