"""How an agent coped with protocol faults: named components per episode, for any suite.

Pure: ``coping(trace)`` reads the episode's events — each ``tools/call`` that met a protocol fault,
then what the client did afterwards, as the server recorded it (`ProtocolEvent`: listed the tools
again, initialized again, called a renamed tool by its new name, answered a request) — and returns
components named ``coping_*``. `with_coping` adds them to a suite's `Score`, but only for episodes
played under a plan that holds protocol faults, so runs without them keep their components as they
were.

Recovered, per fault type (the fault's call is the one that met it):

* ``tool_removed``: the tools were listed again and the removed name was never called after that;
* ``tool_renamed``: a later call used the new name; ``tool_added``: the tools were listed again;
* ``schema_changed``: a later call of that tool passed the new schema;
* ``session_expired``, ``unauthorized``, ``server_restart``: a later call succeeded (the server
  refuses every request until the client initializes again or presents a refreshed token);
* ``response_delayed``, ``response_dropped``, ``stream_stalled``, ``transport_reset``: the episode went
  on (a later successful call or an explicit finish) without calling a tool that is not read-only
  again with the same arguments (its first call ran: a retry is a duplicate write);
* ``response_duplicated``, ``oversized_result``, ``progress_flood``, ``log_flood``: the client kept working
  (the episode did not end in a broken connection, an overflowing context or its time limit);
* ``elicitation_request``, ``sampling_request``: the client answered (accepted, declined, cancelled or
  refused with an error), or was never asked because it declared no such capability.

The 2026-07-28 family:

* ``stale_listing``: renamed, a later call reached the tool by its new name; removed, as ``tool_removed``
  (no notice came: only a client that refetches within ``ttlMs`` finds out);
* ``notification_dropped``, ``notification_duplicated``: the tools were listed again (the new tool found)
  and the client kept working;
* ``handle_expired``: a later call succeeded (a new ``start_episode`` resumes the episode; without
  handles, the session expired and the client initialized again);
* ``input_required``: the rounds ended in well-formed answers or a clean refusal (decline, cancel), or
  the client was never asked (it declared no elicitation capability); malformed answers until the
  server gives up, or none, are not coping;
* ``discover_changed``: the episode went on (a later successful call or an explicit finish).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mcp_resili.errors import UserError
from mcp_resili.faults.protocol import ALL_PROTOCOL_TYPES, FAMILY_OF, has_protocol_faults
from mcp_resili.scoring.model import Score
from mcp_resili.scoring.model_coping import with_model_coping
from mcp_resili.tasks.model import Task
from mcp_resili.trace import EpisodeEndEvent, FinishEvent, ProtocolEvent, ToolCallEvent, Trace, TraceEvent

#: Prefix of every coping component (so exports and reports find them by name).
PREFIX = "coping_"
_CATALOGUE_RELIST = ("tool_removed", "tool_renamed", "tool_added", "schema_changed")
_SESSION = ("session_expired", "unauthorized", "server_restart", "handle_expired")
_LOST = ("response_delayed", "response_dropped", "stream_stalled", "transport_reset")
_ANSWERS = ("accept", "decline", "cancel", "answered", "not_supported")
_CLEAN_ENDS = ("completed", "aborted", "agent_stopped")
_BROKEN_ENDS = ("infrastructure_error", "context_exceeded", "time_limit")


@dataclass(frozen=True)
class FaultMet:
    """One protocol fault an episode met, and whether the agent recovered from it."""

    type: str
    tool: str
    recovered: bool


def _after(events: Sequence[TraceEvent], index: int) -> Sequence[TraceEvent]:
    return events[index + 1 :]


def _went_on(later: Sequence[TraceEvent]) -> bool:
    return any((isinstance(e, ToolCallEvent) and not e.is_error) or isinstance(e, FinishEvent) for e in later)


def _survived(later: Sequence[TraceEvent]) -> bool:
    """The client kept working: the episode did not end in a broken connection, overflow or timeout."""
    return not any(isinstance(e, EpisodeEndEvent) and e.termination in _BROKEN_ENDS for e in later)


def _read_only(later: Sequence[TraceEvent]) -> bool:
    for event in later:
        if isinstance(event, ProtocolEvent) and event.kind == "delivered":
            return bool(event.detail.get("read_only", False))
    return False


def _recovered(kind: str, call: ToolCallEvent, later: Sequence[TraceEvent]) -> bool:
    tool = call.tool
    protocol = [e for e in later if isinstance(e, ProtocolEvent)]
    calls = [e for e in later if isinstance(e, ToolCallEvent)]
    if kind == "stale_listing":
        # Renamed: a call reached the tool by its new name. Removed: listed again, old name left alone.
        if any(e.kind == "renamed_call" and e.detail.get("tool") == tool for e in protocol):
            return True
        kind = "tool_removed"
    if kind in ("notification_dropped", "notification_duplicated"):
        # Dropped: it found the new tool without the notice. Doubled: it acted on the notice and lived.
        return any(e.kind == "list_tools" for e in protocol) and _survived(later)
    if kind == "input_required":
        # Every round answered well-formed, or refused cleanly (decline, cancel), or never asked.
        ends = [str(e.detail.get("answer")) for e in protocol if (e.kind, e.method) == ("answered", kind)]
        return bool({"complete", "declined"} & set(ends)) or ends[:1] == ["not_supported"]
    if kind == "discover_changed":
        return _went_on(later)
    if kind == "tool_removed":
        relist = next(
            (i for i, e in enumerate(later) if isinstance(e, ProtocolEvent) and e.kind == "list_tools"), None
        )
        if relist is None:
            return False
        return not any(isinstance(e, ToolCallEvent) and e.tool == tool for e in later[relist + 1 :])
    if kind == "tool_renamed":
        return any(e.kind == "renamed_call" and e.detail.get("tool") == tool for e in protocol)
    if kind == "tool_added":
        return any(e.kind == "list_tools" for e in protocol)
    if kind == "schema_changed":
        return any(e.tool == tool and not e.is_error for e in calls)
    if kind in _SESSION:
        return any(not e.is_error for e in calls)
    if kind in _LOST:
        retried_write = not _read_only(later) and any(
            e.tool == tool and e.arguments == call.arguments for e in calls
        )
        return _went_on(later) and not retried_write
    if kind in ("elicitation_request", "sampling_request"):
        answers = [str(e.detail.get("answer", "")) for e in protocol if e.kind == "answered"]
        return bool(answers) and (answers[0] in _ANSWERS or answers[0].startswith("error"))
    return _survived(later)


def faults_met(trace: Trace) -> list[FaultMet]:
    """Every protocol fault the episode met, in order, with whether the agent recovered."""
    events = trace.events
    met = []
    for index, event in enumerate(events):
        if isinstance(event, ToolCallEvent) and event.fault is not None:
            kind = getattr(event.fault, "type", None)
            if isinstance(kind, str) and kind in FAMILY_OF:
                met.append(FaultMet(kind, event.tool, _recovered(kind, event, _after(events, index))))
    return met


def coping(trace: Trace) -> dict[str, Any]:
    """The coping components of one episode (see the module for what recovered means per type)."""
    met = faults_met(trace)
    protocol = [e for e in trace.events if isinstance(e, ProtocolEvent)]
    first = next(
        (
            i
            for i, e in enumerate(trace.events)
            if isinstance(e, ToolCallEvent)
            and e.fault is not None
            and getattr(e.fault, "type", None) in FAMILY_OF
        ),
        None,
    )
    after_first = (
        [] if first is None else [e for e in trace.events[first + 1 :] if isinstance(e, ProtocolEvent)]
    )
    recovered = sum(m.recovered for m in met)
    end = trace.end
    schema = [m for m in met if m.type == "schema_changed"]
    components: dict[str, Any] = {
        f"{PREFIX}faults": len(met),
        f"{PREFIX}recovered": recovered,
        f"{PREFIX}recovery_rate": round(recovered / len(met), 4) if met else None,
        f"{PREFIX}relisted": any(e.kind == "list_tools" for e in after_first),
        f"{PREFIX}reinitialized": any(e.kind == "initialize" for e in after_first),
        f"{PREFIX}used_new_schema": all(m.recovered for m in schema) if schema else None,
        f"{PREFIX}retried_writes": sum(
            1 for m in met if m.type in _LOST and not m.recovered and _retried(trace, m)
        ),
        # A trace an outside agent left (serve --trace-dir) has no runner's end record: its accepted
        # finish is its clean end.
        f"{PREFIX}ended_cleanly": bool(met)
        and (
            end.termination in _CLEAN_ENDS
            if end is not None
            else any(isinstance(e, FinishEvent) for e in trace.events)
        ),
        f"{PREFIX}refused_requests": sum(1 for e in protocol if e.kind == "refused"),
    }
    for kind in ALL_PROTOCOL_TYPES:
        components[f"{PREFIX}{kind}_met"] = sum(1 for m in met if m.type == kind)
        components[f"{PREFIX}{kind}_recovered"] = sum(1 for m in met if m.type == kind and m.recovered)
    return components


def _retried(trace: Trace, met: FaultMet) -> bool:
    return sum(1 for e in trace.events if isinstance(e, ToolCallEvent) and e.tool == met.tool) > 1


class ScoringSuite(Protocol):
    """What scoring needs of a suite (a `mcp_resili.registry.suites.Suite` is one), handed down."""

    @property
    def name(self) -> str:
        """The suite's name, for error messages."""

    @property
    def score(self) -> Callable[[Task, Trace], Score]:
        """The suite's scorer."""


def score_episode(suite: ScoringSuite, task: Task, trace: Trace) -> Score:
    """An episode's score as every reader gives it (the runner, ``score``, inspect).

    The suite's scorer, plus the coping components when the plan holds protocol faults, and the
    model-API coping components when its model calls went through a gateway. A scorer that
    raises, or returns what cannot be stored, is `ScorerError`: a bug in the suite, never the agent's
    doing, stopped in one line (a run keeps what it stored; ``--resume`` plays the rest).
    """
    try:
        score = suite.score(task, trace)
    except Exception as exc:  # whatever a suite's scorer raises: name it, never a traceback
        raise ScorerError(
            f"suite {suite.name!r} failed to score task {task.id!r} ({type(exc).__name__}: {exc}); "
            "the suite's scorer is at fault, not the agent"
        ) from exc
    if not isinstance(score, Score):
        raise ScorerError(
            f"suite {suite.name!r} scored task {task.id!r} with a {type(score).__name__}, not a Score"
        )
    try:
        score.label.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no store or report could hold the label
        raise ScorerError(
            f"suite {suite.name!r} scored task {task.id!r} with the label {score.label!r}, "
            "which is not UTF-8 text"
        ) from None
    return with_model_coping(with_coping(score, trace), trace)


class ScorerError(UserError):
    """A suite's scorer raised, or returned a score that cannot be stored."""


def with_coping(score: Score, trace: Trace) -> Score:
    """``score`` with the coping components added, when the episode's plan holds protocol faults."""
    if not has_protocol_faults(trace.header.fault_plan):
        return score
    return score.model_copy(update={"components": {**score.components, **coping(trace)}})
