"""ReliabilityBench's state-based verifier (paper §4.2), computed from the trace alone.

The verifier replays, on a fresh copy of the task's initial state, every call whose tool actually
ran: successful calls and calls hit by a response-side fault (the write happened even though the
agent read an error or a modified result). Calls stopped by a request-side fault, rejected as
invalid or refused never ran and are skipped. Replaying keeps scoring pure (no server state is
needed) and lets any path that reaches the right end state pass.

* ``passed``: every check of the task's end-state predicate holds and no write was duplicated.
* ``duplicate_writes``: a write tool called again with the same arguments that changed the state
  again (e.g. a second ticket after a HardRateLimit reply hid the first one).
* ``replay_consistent``: every fault-free successful call gave the same result on replay as it did
  live (False means the trace came from a server with different state; the score is then suspect).
* ``faults``, ``harmless_faults``, ``recovered_faults``: calls that met an injected fault; those of
  them whose fault changed nothing the agent had to mend (`HARMLESS_FAULTS`: the correct result, late);
  and those of the others whose tool later succeeded in the same episode (without a fault, or with a
  harmless one).
* ``rolled_calls``, ``cascade_calls``: calls the fault plan decided afresh, and calls failed by a
  running cascade without a decision of their own. ``(faults − cascade_calls) / rolled_calls`` is
  the measured injection rate (the λ profile's nominal rate); ``faults / tool_calls`` is the share
  of calls the agent saw faulted (its effective exposure, higher because of cascades).

Labels: ``full`` (passed, value 1.0) or ``failure`` (0.0): ReliabilityBench is binary, and using the
extreme levels keeps the generic summary table meaningful.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from mcp_resili.scoring.model import Score
from mcp_resili.suites.reliabilitybench.library import reliabilitybench_library
from mcp_resili.suites.reliabilitybench.model import StateCheck, details, expected
from mcp_resili.tasks.model import Task
from mcp_resili.tools import ToolFailure, ToolLibrary
from mcp_resili.trace import ToolCallEvent, Trace

_MISSING = object()


def tool_ran(call: ToolCallEvent) -> bool:
    """Whether the server ran the tool for this call (so its side effect happened)."""
    if call.decision is None:
        # Rejected before the fault decision (unknown tool, invalid input, unmet dependency), or a
        # trace from another server: only a successful call is known to have run.
        return call.error_code is None and not call.is_error
    return call.fault is None or call.fault.side == "response"


@dataclass
class Replay:
    """The end state the calls of a trace produce, and what replaying them revealed."""

    state: dict[str, Any]
    executed: int = 0
    duplicate_writes: list[str] = field(default_factory=list)
    inconsistent: list[int] = field(default_factory=list)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def replay(task: Task, calls: list[ToolCallEvent], library: ToolLibrary | None = None) -> Replay:
    """Run every call that ran, in order, on a fresh copy of ``task``'s initial state."""
    library = library or reliabilitybench_library()
    result = Replay(state=copy.deepcopy(details(task).initial_state))
    changed_by: dict[str, int] = {}
    for call in calls:
        if not tool_ran(call) or call.tool not in library:
            continue
        result.executed += 1
        before = _canonical(result.state)
        try:
            output: dict[str, Any] | None = library.simulate(call.tool, call.arguments, result.state)
        except ToolFailure:
            output = None
        if call.fault is None and not call.is_error and output != call.result:
            result.inconsistent.append(call.seq)
        if library.spec(call.tool).access == "write" and _canonical(result.state) != before:
            key = f"{call.tool}({_canonical(call.arguments)})"
            changed_by[key] = changed_by.get(key, 0) + 1
            if changed_by[key] == 2:
                result.duplicate_writes.append(key)
    return result


def _lookup(state: Any, path: tuple[str, ...]) -> Any:
    value = state
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _without(value: Any, ignore: tuple[str, ...]) -> Any:
    if isinstance(value, dict) and ignore:
        return {k: v for k, v in value.items() if k not in ignore}
    return value


def check(state: dict[str, Any], rule: StateCheck) -> str | None:
    """None when ``rule`` holds on ``state``, else the reason it does not."""
    where = ".".join(rule.path)
    found = _lookup(state, rule.path)
    if rule.op == "absent":
        return None if found is _MISSING else f"{where} should not exist"
    if found is _MISSING:
        return f"{where} is missing"
    if rule.op == "keys":
        keys = sorted(found) if isinstance(found, dict) else None
        return (
            None if keys == sorted(rule.value) else f"{where} has keys {keys}, expected {sorted(rule.value)}"
        )
    if _without(found, rule.ignore) == _without(rule.value, rule.ignore):
        return None
    shown, wanted = _canonical(_without(found, rule.ignore)), _canonical(_without(rule.value, rule.ignore))
    return f"{where} is {shown}, expected {wanted}"


#: Faults that hand the agent the tool's own correct result (only later): nothing to recover from, so
#: they stay out of the recovery rate (a correct agent never calls the tool again after one).
HARMLESS_FAULTS = frozenset({"high_latency"})


def _harmless(call: ToolCallEvent) -> bool:
    return call.fault is not None and getattr(call.fault, "type", None) in HARMLESS_FAULTS


def score(task: Task, trace: Trace) -> Score:
    """Score one ReliabilityBench episode by its end state."""
    calls = trace.tool_calls
    result = replay(task, calls)
    failures = [reason for rule in expected(task).checks if (reason := check(result.state, rule)) is not None]
    faulted = [i for i, c in enumerate(calls) if c.fault is not None]
    cascade = sum(1 for c in calls if c.decision is not None and c.decision.reason == "cascade")
    rolled = sum(1 for c in calls if c.decision is not None) - cascade
    harmless = {i for i in faulted if _harmless(calls[i])}
    recovered = sum(
        1
        for i in faulted
        if i not in harmless
        and any(
            c.tool == calls[i].tool and not c.is_error and (c.fault is None or _harmless(c))
            for c in calls[i + 1 :]
        )
    )
    passed = not failures and not result.duplicate_writes
    reasons = [*failures, *(f"duplicate write: {key}" for key in result.duplicate_writes)]
    if result.inconsistent:
        reasons.append(f"replay differs from the live result at calls {result.inconsistent}")
    finish = trace.finish
    info = details(task)
    return Score(
        suite="reliabilitybench",
        task=task.id,
        label="full" if passed else "failure",
        value=1.0 if passed else 0.0,
        components={
            "passed": passed,
            "domain": info.domain,
            "level": info.level,
            "checks_total": len(expected(task).checks),
            "checks_failed": len(failures),
            "duplicate_writes": len(result.duplicate_writes),
            "replay_consistent": not result.inconsistent,
            "tool_calls": len(calls),
            "executed_calls": result.executed,
            "gold_steps": len(task.workflow.steps),
            "faults": len(faulted),
            "harmless_faults": len(harmless),
            "recovered_faults": recovered,
            "rolled_calls": rolled,
            "cascade_calls": cascade,
            "finish_status": None if finish is None else finish.status,
        },
        reasons=tuple(reasons),
    )
