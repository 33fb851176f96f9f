"""The union of fault plan types (on ``kind``). A new plan type is a `BasePlan` subclass added here."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from mcp_resili.faults.chaos import ChaosFaults
from mcp_resili.faults.resilibench import ResiliBenchFaults
from mcp_resili.faults.rules import NoFaults, RuleFaults
from mcp_resili.faults.toolmaze import ToolMazeFaults

FaultPlan = Annotated[
    NoFaults | ResiliBenchFaults | RuleFaults | ChaosFaults | ToolMazeFaults, Field(discriminator="kind")
]
