"""Faults and fault plans as data.

A *fault* is one concrete thing done to one tool call (a discriminated union on ``type``). A *fault
plan* says when faults happen (a discriminated union on ``kind``). Both are frozen pydantic models,
loadable from JSON or TOML; per-episode state (counters, history) lives in the server, never here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ErrorFault(BaseModel):
    """The call fails with an explicit error the agent can read (``isError: true``).

    ``side="request"``: the tool does not run (no side effect). ``side="response"``: the tool runs
    (a write happens) and its result is replaced by the error, as after a lost response.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["error"] = "error"
    code: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    message: str = ""
    explicit: Literal[True] = True
    transient: bool = True
    side: Literal["request", "response"] = "request"


Fault = Annotated[ErrorFault, Field(discriminator="type")]


class NoFaults(BaseModel):
    """Never inject a fault."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["none"] = "none"


class ResiliBenchFaults(BaseModel):
    """ResiliBench's probabilistic failure model (paper §3.2/App. C.1; reference code's refinements).

    The success probability of a call to tool ``t`` is::

        p = base_success
            × unmet_dependency_factor ** (dependencies of t never yet run successfully)
            × failed_dependency_factor ** (dependencies of t whose latest run failed)
            × history_factor ** (failed calls among the last ``history_window`` calls of the episode)
        p = min(max(p, min_success), max_success)

    The call fails when ``u >= p`` for ``u`` drawn from the call's own RNG; its error code is drawn
    uniformly from the tool's declared errors with the same RNG. ``history_window=None`` counts the
    whole episode (the paper's text); 3 with the clamps [0.1, 0.95] is the reference code's rule.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
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


class RuleFaults(BaseModel):
    """An ordered list of rules; the first rule that fires decides the call's fault."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["rules"] = "rules"
    rules: tuple[FaultRule, ...]


FaultPlan = Annotated[NoFaults | ResiliBenchFaults | RuleFaults, Field(discriminator="kind")]


class FaultDecision(BaseModel):
    """One entry of the injection ledger: what the plan decided for one call, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    plan: str
    ordinal: int
    roll: float | None = None
    success_probability: float | None = None
    rule: int | None = None
    fault: Fault | None = None

    @property
    def fired(self) -> bool:
        """True when a fault is injected into this call."""
        return self.fault is not None
