"""The unions: every fault type (on ``type``) and the injection-ledger entry.

A new fault type is a module with a `BaseFault` subclass, added to `Fault` here.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from mcp_resili.faults.chaos import ChaosFault
from mcp_resili.faults.corrupt import CorruptFault
from mcp_resili.faults.error import ErrorFault

Fault = Annotated[ErrorFault | ChaosFault | CorruptFault, Field(discriminator="type")]


class FaultDecision(BaseModel):
    """One entry of the injection ledger: what the plan decided for one call, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    plan: str
    ordinal: int
    roll: float | None = None
    success_probability: float | None = None
    rule: int | None = None
    reason: str | None = None
    fault: Fault | None = None

    @property
    def fired(self) -> bool:
        """True when a fault is injected into this call."""
        return self.fault is not None
