"""The tiny suite's own fault plan, ``tiny`` (``tiny:p=0.5``): each call fails with probability ``p``.

A failed call gets one of the tool's declared errors (``UNAVAILABLE`` for a tool that declares
none), drawn from the call's own RNG, marked transient. Defining the class registers the kind
``tiny``, so traces and stored runs that name it read back once this package is imported.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field, ValidationError

from mcp_resili import BasePlan, CallContext, ErrorFault, FaultDecision, FaultSpecError, parse_overrides


class TinyFaults(BasePlan):
    """Every call fails with probability ``failure``, whatever came before."""

    kind: Literal["tiny"] = "tiny"
    failure: float = Field(0.3, ge=0, le=1)

    def decide(self, call: CallContext, rng: random.Random) -> FaultDecision:
        """One roll: below ``failure`` the call fails with a declared (or generic) error."""
        roll = rng.random()
        fault = None
        if roll < self.failure:
            codes = call.tool.error_codes or ("UNAVAILABLE",)
            code = codes[rng.randrange(len(codes))]
            fault = ErrorFault(code=code, message=f"{call.tool.name} failed ({code})", transient=True)
        return FaultDecision(
            plan=self.kind, ordinal=call.ordinal, roll=roll, success_probability=1 - self.failure, fault=fault
        )


def parse_tiny_spec(spec: str, args: str) -> BasePlan:
    """``tiny`` or ``tiny:p=P``."""
    try:
        return TinyFaults.model_validate(parse_overrides(spec, args, {"p": "failure"}))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise FaultSpecError(f"fault spec {spec!r}: {problems} (keys: p)") from None
