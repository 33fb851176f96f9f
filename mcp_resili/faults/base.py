"""What every fault and fault plan is given and must provide."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from mcp_resili.registry.spec import ToolSpec

if TYPE_CHECKING:
    from mcp_resili.faults.model import FaultDecision
    from mcp_resili.tasks.model import Task


@dataclass(frozen=True)
class CallOutcome:
    """How an earlier call in the episode ended (the history fault rules look at)."""

    tool: str
    ok: bool


@dataclass(frozen=True)
class CallContext:
    """What a fault plan may know about a call when it decides.

    ``state`` is the episode's private scratch space for plans that remember (armed groups,
    cascades); plans themselves stay immutable data.
    """

    fault_key: str
    tool: ToolSpec
    ordinal: int
    history: Sequence[CallOutcome]
    task: Task | None = None
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolOutcome:
    """A call's result before it becomes an MCP ``CallToolResult``."""

    structured: dict[str, Any] | None
    error_code: str | None = None
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    #: The upstream's own result (a proxied ``CallToolResult``), forwarded as is while no fault touched it.
    upstream: Any = None

    @property
    def is_error(self) -> bool:
        """True when the agent sees an error."""
        return self.error_code is not None


class BaseFault(BaseModel):
    """A fault type. Subclasses add ``type: Literal[...]`` and implement `apply`.

    ``side="request"``: decided and applied before the tool runs (it does not run). ``"response"``:
    the tool runs (its side effect happens), then the fault transforms the result.
    ``delay_seconds`` is waited (times the server's time scale) before the outcome is returned.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    explicit: bool = True
    transient: bool = True
    side: Literal["request", "response"] = "request"
    delay_seconds: float = 0.0

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """The outcome the agent sees; ``outcome`` is None when the tool did not run."""
        raise NotImplementedError


class BasePlan(BaseModel):
    """A fault plan type. Subclasses add ``kind: Literal[...]`` and implement `decide`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: False for plans that never draw (seeding a call's RNG is a measurable share of a call's cost).
    uses_rng: ClassVar[bool] = True

    def decide(self, call: CallContext, rng: random.Random) -> FaultDecision:
        """The ledger entry for ``call``, drawing only from ``rng``."""
        raise NotImplementedError
