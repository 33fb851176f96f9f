"""ResiliBench's probabilistic failure model (paper §3.2, App. B.3; reference code refinements)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from mcp_resili.faults.base import BasePlan, CallContext, CallOutcome, FaultDecision, FaultSpecError
from mcp_resili.faults.error import ErrorFault, describe_error
from mcp_resili.faults.spec import parse_overrides
from mcp_resili.tools.spec import ToolSpec

# The models of a decision, built by their validators: without `BaseModel.__init__`'s Python frame and
# keyword packing, the same models for a quarter less of their cost (one decision per call).
_new_decision = FaultDecision.__pydantic_validator__.validate_python
_new_error_fault = ErrorFault.__pydantic_validator__.validate_python


class ResiliBenchFaults(BasePlan):
    """Every call fails with a probability that depends on dependencies and recent failures.

    The success probability of a call to tool ``t`` is::

        p = base_success
            × unmet_dependency_factor ** (dependencies of t never yet run successfully)
            × failed_dependency_factor ** (dependencies of t whose latest run failed)
            × history_factor ** (failed calls among the last ``history_window`` calls of the episode)
        p = min(max(p, min_success), max_success)

    The call fails when ``u >= p`` for ``u`` drawn from the call's own RNG; its error code is drawn
    uniformly from the tool's declared errors with the same RNG. ``history_window=None`` counts the
    whole episode (the paper's text); 3 with the clamps [0.1, 0.95] is the reference code's rule
    and our default. When the server enforces dependencies (ResiliBench does, per App. B.1.4), a
    call with unmet dependencies is refused before this rule runs, so that factor applies only to
    servers that do not enforce them.
    """

    kind: Literal["resilibench"] = "resilibench"
    base_success: float = Field(0.8, gt=0, le=1)
    unmet_dependency_factor: float = Field(0.5, ge=0, le=1)
    failed_dependency_factor: float = Field(0.7, ge=0, le=1)
    history_factor: float = Field(0.9, ge=0, le=1)
    history_window: int | None = Field(3, ge=1)
    min_success: float = Field(0.1, ge=0, le=1)
    max_success: float = Field(0.95, ge=0, le=1)

    @model_validator(mode="after")
    def _ordered_clamp(self) -> ResiliBenchFaults:
        if self.min_success > self.max_success:
            raise ValueError(f"min_success {self.min_success} exceeds max_success {self.max_success}")
        return self

    def success_probability(self, tool: ToolSpec, history: Sequence[CallOutcome]) -> float:
        """The rule written out in the class docstring."""
        p = self.base_success
        for dep in tool.dependencies:
            runs = [h.ok for h in history if h.tool == dep]
            if not any(runs):
                p *= self.unmet_dependency_factor
            elif not runs[-1]:
                p *= self.failed_dependency_factor
        window = history if self.history_window is None else history[-self.history_window :]
        p *= self.history_factor ** sum(1 for h in window if not h.ok)
        return min(max(p, self.min_success), self.max_success)

    def decide(self, call: CallContext, rng: random.Random) -> FaultDecision:
        """Roll against the success probability; on failure pick a declared error code."""
        p = self.success_probability(call.tool, call.history)
        roll = rng.random()
        fault = None
        if roll >= p:
            codes = call.tool.error_codes or ("OPERATION_FAILED",)
            code = codes[rng.randrange(len(codes))]
            fault = _new_error_fault({"code": code, "message": describe_error(call, code), "transient": True})
        decision: FaultDecision = _new_decision(
            {
                "plan": self.kind,
                "ordinal": call.ordinal,
                "roll": roll,
                "success_probability": p,
                "fault": fault,
            }
        )
        return decision


#: Short names for the parameters, usable as ``resilibench:base=0.7,window=all``.
ALIASES = {
    "base": "base_success",
    "unmet": "unmet_dependency_factor",
    "failed": "failed_dependency_factor",
    "history": "history_factor",
    "window": "history_window",
    "min": "min_success",
    "max": "max_success",
}


def parse_resilibench_spec(spec: str, args: str) -> BasePlan:
    """``resilibench`` with optional overrides, e.g. ``resilibench:base=0.7,window=all``."""
    overrides = parse_overrides(spec, args, ALIASES)
    try:
        return ResiliBenchFaults.model_validate(overrides)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or spec}: {e['msg']}" for e in exc.errors())
        raise FaultSpecError(
            f"fault spec {spec!r}: {problems} (keys: {', '.join(sorted(ALIASES))})"
        ) from None
