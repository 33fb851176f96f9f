"""How an agent program coped with model-API faults: named components per episode, for any suite.

Pure: ``model_coping(trace)`` reads the episode's ``model_fault`` events (the gateway's ledger, joined
into the trace by the runner: `mcp_resili.trace.ModelFaultEvent`) and how the episode ended, and
returns components named ``llm_*``. `with_model_coping` adds them to a suite's `Score` for episodes
whose model calls went through a gateway, so runs without one keep their components as they were.

Whose failure is it?

* A fault the gateway **injected** that the agent did not survive is the agent's: the harness (its
  retries, its parsing, its loop) is part of what is measured. Survived means the episode went on: a
  later model call was answered without a fault, or the agent ended the episode itself (``finish``).
* A model call that failed with **nobody injecting it** (the upstream unreachable, timing out, or
  answering 429, 5xx, 401 or 403 of its own) is an infrastructure error when it is the episode's last
  call: the episode measured the upstream, not the agent (`uninjected_failure`, `ended_by_upstream`),
  and it is never scored. A 400 or 404 from the upstream answers the agent's own malformed request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcp_resili.faults.model_api import MODEL_FAULT_TYPES
from mcp_resili.scoring.model import Score
from mcp_resili.trace import ModelFaultEvent, Trace, TraceEvent

#: Prefix of every model-API coping component (so exports and reports find them by name).
PREFIX = "llm_"
#: Upstream statuses that say the upstream (not the request) failed.
UPSTREAM_TROUBLE = frozenset({401, 403, 408, 429})
#: What the gateway writes in a ledger entry's detail for a failure nobody injected.
NOT_INJECTED = "(not injected)"
#: Ends the agent chose itself (its ``finish`` call): the episode went on to its end.
_OWN_ENDS = ("completed", "aborted")


@dataclass(frozen=True)
class ModelFaultMet:
    """One injected model-API fault an episode met (its call's ordinal), and whether it survived."""

    type: str
    family: str
    ordinal: int
    survived: bool


def model_events(events: Sequence[TraceEvent]) -> list[ModelFaultEvent]:
    """The episode's model calls, in ordinal order."""
    return sorted((e for e in events if isinstance(e, ModelFaultEvent)), key=lambda e: e.ordinal)


def answered_cleanly(event: ModelFaultEvent) -> bool:
    """A model call answered 200 with no fault injected."""
    return event.status == 200 and not event.decision.fired


def uninjected_failure(event: ModelFaultEvent) -> bool:
    """A model call that failed with nobody injecting it: the upstream, or the way to it, failed."""
    if event.decision.fired:
        return False
    if NOT_INJECTED in event.detail:
        return True
    status = event.upstream_status
    return status is not None and (status >= 500 or status in UPSTREAM_TROUBLE)


def ended_by_upstream(events: Sequence[TraceEvent]) -> ModelFaultEvent | None:
    """The episode's last model call when it failed with nobody injecting it (else None).

    An episode whose agent failed right after such a call measured the upstream: an infrastructure
    error. One that went on past it (a later call answered) did not.
    """
    calls = model_events(events)
    return calls[-1] if calls and uninjected_failure(calls[-1]) else None


def faults_met(trace: Trace) -> list[ModelFaultMet]:
    """Every injected model-API fault of the episode, in call order, with whether it was survived."""
    calls = model_events(trace.events)
    end = trace.end
    own_end = end is not None and end.termination in _OWN_ENDS
    met = []
    for index, call in enumerate(calls):
        fault = call.decision.fault
        if fault is None:
            continue
        went_on = any(answered_cleanly(later) for later in calls[index + 1 :])
        met.append(ModelFaultMet(fault.type, fault.family, call.ordinal, went_on or own_end))
    return met


def model_coping(trace: Trace) -> dict[str, Any]:
    """The model-API coping components of one episode (see the module docstring)."""
    calls = model_events(trace.events)
    met = faults_met(trace)
    survived = sum(m.survived for m in met)
    not_survived = [m for m in met if not m.survived]
    end = trace.end
    components: dict[str, Any] = {
        f"{PREFIX}calls": len(calls),
        f"{PREFIX}faults": len(met),
        f"{PREFIX}survived": survived,
        f"{PREFIX}survival_rate": round(survived / len(met), 4) if met else None,
        f"{PREFIX}uninjected_failures": sum(1 for c in calls if uninjected_failure(c)),
        # The injected fault the agent did not get past, when the episode ended in a failure after it.
        f"{PREFIX}failed_after": not_survived[-1].type
        if not_survived and (end is None or end.termination not in _OWN_ENDS)
        else None,
        f"{PREFIX}harness_failure": end is not None and end.termination == "harness_failure",
    }
    for kind in MODEL_FAULT_TYPES:
        components[f"{PREFIX}{kind}_met"] = sum(1 for m in met if m.type == kind)
        components[f"{PREFIX}{kind}_survived"] = sum(1 for m in met if m.type == kind and m.survived)
    return components


def through_gateway(trace: Trace) -> bool:
    """Whether the episode's model calls went through a gateway (its plan in the header, or events)."""
    return trace.header.model_fault_plan is not None or any(
        isinstance(e, ModelFaultEvent) for e in trace.events
    )


def with_model_coping(score: Score, trace: Trace) -> Score:
    """``score`` with the ``llm_*`` components added, when the episode's model calls met a gateway."""
    if not through_gateway(trace):
        return score
    return score.model_copy(update={"components": {**score.components, **model_coping(trace)}})
