"""ToolMaze's rule-based judge and metrics (paper §4): I_succ, I_pert, I_recov, c, c*; TSR, PRR, RC.

Per trajectory, from the trace and the task alone:

* **I_pert**: a call was perturbed (a ``toolmaze`` fault fired on it).
* **taint**: the values a corruption changed in the fields later steps read (the record id, the
  figure, the subject: `corrupt.CONSUMED_FACETS`) are tainted; a later call whose arguments contain a
  tainted value *propagated* the corruption, and the values it returns in those fields become tainted
  in turn, except values that are no evidence of the corruption: the task's inputs, and values a
  clean call also produced (the subject a consumer passes on, a figure the corruption left as it
  was). A clean redo of the corrupted steps is then clean.
* **I_succ**: some valid path was completed by *clean* calls (no error, no fault, no tainted
  argument) on the right data: every argument a path step binds to an earlier step (``prev`` /
  ``step``) equals that field of a clean call of the producing step made before it (figures within a
  cent), every ``user_input`` argument is the task's input, in any order the DAG allows (parallel
  branches in either order); and the agent did not abort. Constants (the action ``priority``) are
  not checked.
* **I_recov**: every perturbed slot was handled by a valid strategy, judged from the first
  perturbed call of the slot (victim ``v``):

  - transient (P1, P3): ``v`` called again (retry) or a tool of another member of its group called
    (switch);
  - permanent (P2, P4) in an alternative group: switch;
  - permanent on a step without alternatives (C1): graceful abort: no other tool called after ``v``
    and the agent aborted (``finish`` status ``aborted`` or "task aborted" in its text);
  - implicit modes (P3, P4) additionally: the corruption was never propagated.

  I_recov does not depend on final success (paper).
* **c**: tool calls after the first perturbed call (a ``finish`` the server refused for invalid
  arguments is no tool call of the task, as an accepted one is not: it counts nowhere, neither in
  c nor as a tool called after a victim; a refused call of a task tool does count in c, as a call
  the agent spent, though never as a retry or a switch); **c***: the fewest calls any agent needs
  from there to finish (`optimal_recovery_calls`); **C_rec** = 1 − c*/max(c, c*)·I_succ (1 when
  perturbed and failed, 0 when not perturbed), the paper's formula.
* **C_rec (abort-aware)**, our addition: the paper's formula gives 1 to every trajectory of an
  unsolvable episode (C1 under a permanent fault: I_succ is always 0), a perfect abort included. There
  the goal is a graceful abort and c* = 0, so we score C_rec' = 1 − I_abort/(1 + c): 0 for an abort
  right after the victim, 1 − 1/3 after two retries, 1 without a graceful abort. Elsewhere C_rec' =
  C_rec. Both are reported (``c_rec``, ``c_rec_abort``; RC and RC').
* **duplicate side effects**: an action (a write) that executed more than once (retried or switched
  after it had already run, e.g. a booking whose confirmation came back corrupted) is flagged in the
  verdict (``duplicate_writes``, the reasons name it and, for bookings, what was booked) and its rate
  is reported beside PRR. It changes neither I_succ nor I_recov (the paper's definitions).

Aggregates over the trajectories of a mode m: TSR = mean I_succ; PRR = Σ I_recov·I_pert / Σ I_pert
(None without perturbed runs); RC = Σ I_pert·C_rec / |T_m|; composite = (TSR + PRR + 1 − RC)/3, where
an undefined PRR counts as 0 under a perturbation mode (no recovery was shown: an agent that never
reaches its fault must not outscore one that meets it) and NP's is the mean of TSR and 1 − RC; RC'
likewise from C_rec'; DUP = share of trajectories with a duplicate side effect.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_resili.constants import FINISH_TOOL
from mcp_resili.scoring.model import Score
from mcp_resili.suites.toolmaze.corrupt import CorruptFault, changed_paths, consumed_paths, get_path
from mcp_resili.suites.toolmaze.faults import MODES, TRANSIENT_MODES
from mcp_resili.suites.toolmaze.library import corpus_index
from mcp_resili.suites.toolmaze.model import PathStep, ToolMazeTask, path_links
from mcp_resili.tasks.model import Task
from mcp_resili.trace import FinishEvent, ModelTurnEvent, ToolCallEvent, Trace
from mcp_resili.trace.codes import DEPENDENCY_NOT_MET, INVALID_INPUT, UNKNOWN_TOOL

ABORT_PHRASE = "task aborted"
#: Error codes of calls the server refused before running any tool.
REFUSED_BEFORE_RUNNING = frozenset({INVALID_INPUT, UNKNOWN_TOOL, DEPENDENCY_NOT_MET})
#: How far a figure passed on may be from the one received (agents may round to cents).
TOLERANCE = 0.005


def _plan_mode(plan: Mapping[str, Any]) -> str:
    """The mode of a plan of ours: ``NP`` (no faults), a ToolMaze mode, or ``other``."""
    if plan.get("kind") == "toolmaze":
        return str(plan.get("mode", "other"))
    return "NP" if plan.get("kind") == "none" else "other"


def trace_mode(trace: Trace) -> str:
    """The ToolMaze mode a trace ran under: ``NP``, ``P1``…``P4``, or ``other``.

    From the header's fault plan when our server or runner wrote it (over ``--server``, our server's
    plan the runner put under ``plan``); for a run against another server (header plan ``external``)
    from the first ToolMaze fault in the events' ledger: a trajectory that met none is then ``other``.
    Protocol faults on top of a mode make a condition of their own, e.g. ``P1+protocol:heavy`` (not a
    paper mode: `aggregate` shows it, and leaves it out of its averages over the modes).
    """
    plan = trace.header.fault_plan
    if plan.get("kind") == "external" and isinstance(plan.get("plan"), dict):
        plan = plan["plan"]
    if plan.get("kind") == "protocol":
        base = plan.get("base")
        inner = _plan_mode(base) if isinstance(base, dict) else "NP"
        return f"{inner}+protocol:{plan.get('profile') or 'custom'}" if inner != "other" else "other"
    mode = _plan_mode(plan)
    if mode != "other":
        return mode
    for call in trace.tool_calls:
        if call.fault is not None and call.decision is not None and call.decision.plan == "toolmaze":
            return {(True, True): "P1", (True, False): "P2", (False, True): "P3", (False, False): "P4"}[
                (call.fault.explicit, call.fault.transient)
            ]
    return "other"


def _key(value: Any) -> tuple[str, Any] | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return ("num", float(value))
    if isinstance(value, str):
        return ("str", value)
    if value is None:
        return ("null", None)
    return None


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _argument_keys(arguments: Mapping[str, Any]) -> set[tuple[str, Any]]:
    return {k for k in (_key(v) for v in _leaves(dict(arguments))) if k is not None}


#: Values a corruption writes (an id emptied, a field nulled) that clean records may hold elsewhere:
#: a clean call producing one does not make it clean where the corruption put it.
_BLANK = frozenset({("null", None), ("str", "")})


def taint(
    calls: Sequence[ToolCallEvent], inputs: Mapping[str, Any] | None = None
) -> tuple[set[int], dict[int, str]]:
    """Indices of calls that consumed corrupted values, and for each the corrupted tool it traces to.

    Only values the corrupted world alone produced are evidence: not the task's own inputs (a
    record's subject), not a value some clean call produced too (a figure the corruption left as it
    was, which the clean redo of a step returns again). A clean call's values are only known once the
    consumers are, so the two are settled together (the set of clean values only grows, so this ends).
    """
    clean_values = _argument_keys(inputs or {}) - _BLANK
    while True:
        consumers, origin = _consumers(calls, clean_values)
        grown = clean_values | (
            _produced(c for i, c in enumerate(calls) if i not in consumers and c.fault is None) - _BLANK
        )
        if grown == clean_values:
            return consumers, origin
        clean_values = grown


def _produced(calls: Iterable[ToolCallEvent]) -> set[tuple[str, Any]]:
    """The values successful ``calls`` returned in the fields later steps read."""
    known = corpus_index().tools
    values: set[tuple[str, Any]] = set()
    for call in calls:
        if not call.is_error and call.result is not None and call.tool in known:
            for path in consumed_paths(call.tool):
                key = _key(get_path(call.result, path))
                if key is not None:
                    values.add(key)
    return values


def _consumers(
    calls: Sequence[ToolCallEvent], clean_values: set[tuple[str, Any]]
) -> tuple[set[int], dict[int, str]]:
    known = corpus_index().tools
    tainted: dict[tuple[str, Any], int] = {}
    consumers: set[int] = set()
    origin: dict[int, str] = {}
    for i, call in enumerate(calls):
        hits = _argument_keys(call.arguments) & tainted.keys()
        if hits:
            # Taint is traced back to the corrupted call it started from, through any consumers.
            root = tainted[min(hits, key=str)]
            consumers.add(i)
            origin[i] = calls[root].tool
            if not call.is_error and call.result is not None and call.tool in known:
                for path in consumed_paths(call.tool):
                    key = _key(get_path(call.result, path))
                    if key is not None and key[0] != "null" and key not in clean_values:
                        tainted.setdefault(key, root)
        if isinstance(call.fault, CorruptFault) and not call.is_error and call.result is not None:
            read = set(consumed_paths(call.tool))
            for path in changed_paths(call.tool, call.fault.corruption):
                key = _key(get_path(call.result, path)) if path in read else None
                if key is not None and key not in clean_values:
                    tainted.setdefault(key, i)
    return consumers, origin


def _close(given: Any, expected: Any) -> bool:
    if isinstance(expected, bool) or isinstance(given, bool):
        return given is expected
    if isinstance(expected, int | float) and isinstance(given, int | float):
        return abs(float(given) - float(expected)) <= TOLERANCE + 1e-9 * abs(float(expected))
    return expected is not None and given == expected


def _inputs_match(step: PathStep, arguments: Mapping[str, Any], inputs: Mapping[str, Any]) -> bool:
    for name, binding in step.arg_bindings.items():
        if binding.source == "user_input":
            given, wanted = arguments.get(name), inputs.get(str(binding.field))
            if not isinstance(given, str) or str(wanted).strip().casefold() != given.strip().casefold():
                return False
    return True


def reached_calls(
    task: ToolMazeTask, path: Sequence[tuple[int, PathStep]], calls: Sequence[ToolCallEvent], clean: set[int]
) -> list[list[int]]:
    """For each step of ``path``, the clean calls that performed it on the right data."""
    links = path_links(path)
    reached: list[list[int]] = []
    for i, (_, step) in enumerate(path):
        hits = []
        for c, call in enumerate(calls):
            if c not in clean or call.tool != step.tool or call.result is None:
                continue
            if not _inputs_match(step, call.arguments, task.inputs):
                continue
            if all(
                any(
                    p < c and _close(call.arguments.get(arg), get_path(calls[p].result, field))
                    for p in reached[j]
                )
                for arg, j, field in links[i]
            ):
                hits.append(c)
        reached.append(hits)
    return reached


def _slot_cost(task: ToolMazeTask, element_step: int, done: set[str], armed: set[str]) -> int:
    element = task.element(element_step)
    if not element.is_alternative:
        return 0 if element.tool_name in done else 1
    group = task.group(str(element.alternative_id))
    cost = min(len(m) - sum(1 for s in m if s.tool in done) for m in group.members)
    return cost + (1 if group.id in armed and cost > 0 else 0)


def optimal_recovery_calls(
    task: ToolMazeTask, mode: str, victim: str, done: Iterable[str] | None = None
) -> int:
    """c*: the fewest tool calls after the first perturbed call (on ``victim``) that finish the task.

    The perturbed slot costs a retry plus the rest of its member (transient) or the cheapest other
    member (a switch); every other armed slot still to do costs one failed call plus its shortest
    member (the first tool tried there is perturbed whatever it is); other steps still to do cost one
    call each. ``done`` names the tools that already ran cleanly before the perturbed call; without
    it, every step before the victim's in chain order counts as done (an agent walking the chain in
    order). A permanent fault on a step without alternatives cannot be recovered: stopping (0).
    """
    transient = mode in TRANSIENT_MODES
    slot = task.perturbations.slot_of(victim)
    if slot is None:
        raise ValueError(f"task {task.id}: {victim!r} is in no armed slot")
    armed = {s.group for s in task.perturbations.slots if s.group and s.id != slot.id}
    if slot.group is None:
        position = next(e.step for e in task.chain if e.tool_name == victim)
        if not transient:
            return 0
        here = 1
    else:
        group = task.group(slot.group)
        position = group.step
        others = [len(m) for m in group.members if victim not in {s.tool for s in m}]
        if transient:
            member = next(m for m in group.members if victim in {s.tool for s in m})
            retry = len(member) - [s.tool for s in member].index(victim)
            here = min([retry, *others])
        else:
            here = min(others)
    if done is None:
        path = task.path_steps()[task.shortest_path_index()]
        done_tools = {s.tool for n, s in path if n < position}
    else:
        done_tools = set(done)
    rest = sum(
        _slot_cost(task, e.step, done_tools, {str(a) for a in armed})
        for e in task.chain
        if e.step != position
    )
    return here + rest


def _before_finish(trace: Trace) -> tuple[list[ToolCallEvent], int]:
    """The tool calls up to the agent's (first accepted) ``finish``, and how many came after it.

    The agent declared the task over: a step done afterwards does not complete it.
    """
    calls: list[ToolCallEvent] = []
    after = 0
    finished = False
    for event in trace.events:
        if isinstance(event, FinishEvent):
            finished = True
        elif isinstance(event, ToolCallEvent):
            if finished:
                after += 1
            else:
                calls.append(event)
    return calls, after


def _refused(call: ToolCallEvent) -> bool:
    """Whether the server refused ``call`` before any tool ran (no fault decided: the agent's mistake).

    A tool's own ``INVALID_INPUT`` comes after the decision, so it is an attempt like any other.
    """
    return (
        call.is_error
        and call.fault is None
        and call.decision is None
        and call.error_code in REFUSED_BEFORE_RUNNING
    )


def _refused_finish(call: ToolCallEvent) -> bool:
    """Whether ``call`` is a ``finish`` the server refused (bad arguments): no attempt at anything.

    An accepted ``finish`` is a `FinishEvent`, never a tool call; a refused one is the same signal
    sent wrong, so it is no tool call either: it counts in neither c nor the calls after a victim.
    """
    return call.tool == FINISH_TOOL and _refused(call)


def _aborted(trace: Trace) -> bool:
    finish = trace.finish
    if finish is not None:
        return finish.status == "aborted"
    return any(ABORT_PHRASE in e.text.lower() for e in trace.events if isinstance(e, ModelTurnEvent))


def side_effects(calls: Sequence[ToolCallEvent]) -> dict[str, list[int]]:
    """For each action op, the calls that executed it (the tool ran: its write happened)."""
    index = corpus_index()
    executed: dict[str, list[int]] = defaultdict(list)
    for i, call in enumerate(calls):
        tool = index.tools.get(call.tool)
        # An explicit fault stops the call before the tool runs; a corruption is applied after it ran.
        if tool is None or call.is_error:
            continue
        for op in tool.ops:
            if index.ops[op].role == "action":
                executed[op].append(i)
    return dict(executed)


def _duplicates(calls: Sequence[ToolCallEvent]) -> tuple[int, list[str]]:
    index = corpus_index()
    extra = 0
    reasons = []
    for op, runs in side_effects(calls).items():
        if len(runs) < 2:
            continue
        extra += len(runs) - 1
        tools = ", ".join(dict.fromkeys(calls[i].tool for i in runs))
        reason = f"duplicate side effect: {op} executed {len(runs)} times (via {tools})"
        booked = index.ops[op].facets.booked
        if booked:
            options = [str(get_path(calls[i].result, booked)) for i in runs if calls[i].result is not None]
            reason += f"; booked {', '.join(options)}"
        reasons.append(reason)
    return extra, reasons


def score(task: Task, trace: Trace) -> Score:
    """Judge one ToolMaze trajectory; the reasons say which rule decided each indicator."""
    if not isinstance(task, ToolMazeTask):
        raise TypeError(f"the ToolMaze judge needs a ToolMazeTask, got {type(task).__name__} {task.id}")
    mode = trace_mode(trace)
    # The paper's mode under protocol faults on top (``P1+protocol:heavy``) judges recovery as P1.
    base_mode = mode.split("+", 1)[0]
    calls, after_finish = _before_finish(trace)
    reasons: list[str] = []
    if after_finish:
        reasons.append(f"{after_finish} call(s) after finish did not count")
    refused_finishes = sum(1 for c in calls if _refused_finish(c))
    if refused_finishes:
        # A refused finish is not a tool call of the task (see `_refused_finish`): dropped here, it
        # cannot count in c, in "other tools called after the victim", nor in ``tool_calls``.
        calls = [c for c in calls if not _refused_finish(c)]
        reasons.append(f"{refused_finishes} refused finish call(s) did not count")
    consumers, origin = taint(calls, task.inputs)
    clean = {i for i, c in enumerate(calls) if not c.is_error and c.fault is None and i not in consumers}
    aborted = _aborted(trace)

    progress: dict[tuple[str, ...], list[list[int]]] = {}
    for path in task.path_steps():
        progress[tuple(s.tool for _, s in path)] = reached_calls(task, path, calls, clean)
    completed = [p for p, hits in progress.items() if all(hits)]
    i_succ = bool(completed) and not aborted
    if completed and aborted:
        reasons.append("a valid path was completed but the agent aborted")
    elif not completed:
        best = max(task.valid_paths, key=lambda p: (sum(1 for h in progress[p] if h), -len(p)))
        missing = [tool for tool, hits in zip(best, progress[best], strict=True) if not hits]
        reasons.append(
            f"missing required tools: {', '.join(missing)} (closest path, clean and on the right data)"
        )
    else:
        reasons.append(f"completed valid path {' → '.join(completed[0])}")

    perturbed = [
        i for i, c in enumerate(calls) if c.fault is not None and c.decision and c.decision.plan == "toolmaze"
    ]
    i_pert = bool(perturbed)
    recovered: list[bool] = []
    unsolvable_abort: bool | None = None
    first_by_slot: dict[str, int] = {}
    for i in perturbed:
        slot = task.perturbations.slot_of(calls[i].tool)
        first_by_slot.setdefault(slot.id if slot else calls[i].tool, i)
    transient = base_mode in TRANSIENT_MODES
    for slot_id, i0 in first_by_slot.items():
        victim = calls[i0].tool
        # A call the server refused (bad arguments, unknown tool) never reached a tool: no retry, no
        # switch. Its other effects stand (it is still a call after the victim).
        later = [c for c in calls[i0 + 1 :] if not _refused(c)]
        slot = task.perturbations.slot_of(victim)
        group = task.group(slot.group) if slot is not None and slot.group else None
        alternatives = (
            {s.tool for m in group.members if victim not in {s.tool for s in m} for s in m}
            if group
            else set()
        )
        times = 1 + sum(1 for c in later if c.tool == victim)
        switched_to = next((c.tool for c in later if c.tool in alternatives), None)
        propagated = list(
            dict.fromkeys(calls[j].tool for j in sorted(consumers) if j > i0 and origin.get(j) == victim)
        )
        others_after = sorted({c.tool for c in calls[i0 + 1 :] if c.tool != victim})
        if propagated:
            reasons.append(f"corrupted output of {victim} propagated into {', '.join(propagated)}")
        if transient:
            ok = (times >= 2 or switched_to is not None) and not propagated
            if times >= 2:
                reasons.append(f"slot {slot_id}: retried {victim} ({times} calls)")
            elif switched_to:
                reasons.append(f"slot {slot_id}: switched from {victim} to {switched_to}")
            else:
                reasons.append(f"slot {slot_id}: no retry on {victim} (called {times} time, need ≥2)")
                if aborted:
                    reasons.append(f"slot {slot_id}: aborted although the fault on {victim} was transient")
        elif group is not None:
            ok = switched_to is not None and not propagated
            if switched_to:
                reasons.append(f"slot {slot_id}: switched from {victim} to {switched_to}")
            else:
                reasons.append(
                    f"slot {slot_id}: {victim} permanently failed but agent did not switch to alt tool"
                )
        else:
            ok = aborted and not others_after and not propagated
            unsolvable_abort = ok
            if others_after:
                reasons.append(
                    f"slot {slot_id}: agent should have stopped but called other tools after victim "
                    f"{victim}: {', '.join(others_after)}"
                )
            elif not aborted:
                reasons.append(
                    f"slot {slot_id}: {victim} cannot work and has no alternative, but agent did not abort"
                )
            else:
                reasons.append(f"slot {slot_id}: aborted gracefully after {victim} failed permanently")
        recovered.append(ok)
    i_recov = i_pert and all(recovered)

    c = c_star = 0
    c_rec = c_rec_abort = 0.0
    if i_pert:
        first = perturbed[0]
        c = len(calls) - first - 1
        done = {calls[j].tool for j in clean if j < first}
        c_star = optimal_recovery_calls(task, base_mode, calls[first].tool, done)
        worst = max(c, c_star)
        c_rec = 1.0 - ((c_star / worst) if worst else 1.0) * float(i_succ)
        c_rec_abort = c_rec if unsolvable_abort is None else 1.0 - float(unsolvable_abort) / (1 + c)
    duplicate_writes, duplicate_reasons = _duplicates(calls)
    reasons.extend(duplicate_reasons)
    return Score(
        suite="toolmaze",
        task=task.id,
        label="full" if i_succ else "failure",  # the generic summary counts "full" as success
        value=float(i_succ),
        components={
            "mode": mode,
            "level": task.level,
            "i_succ": i_succ,
            "i_pert": i_pert,
            "i_recov": i_recov,
            "c": c,
            "c_star": c_star,
            "c_rec": round(c_rec, 6),
            "c_rec_abort": round(c_rec_abort, 6),
            "duplicate_writes": duplicate_writes,
            "victims": ",".join(calls[i].tool for i in first_by_slot.values()) or None,
            "tool_calls": len(calls),
            "propagated": bool(consumers),
        },
        reasons=tuple(reasons),
    )


@dataclass(frozen=True)
class Metrics:
    """ToolMaze metrics over one group of trajectories (a mode, a level, or both)."""

    mode: str
    level: str
    n: int
    perturbed: int
    tsr: float
    prr: float | None
    rc: float
    composite: float
    #: RC with the abort-aware C_rec' (differs from RC only on unsolvable episodes: C1, P2/P4).
    rc_abort: float = 0.0
    #: Share of trajectories in which some write executed more than once.
    duplicates: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


def metrics_of(scores: Iterable[Score], mode: str = "all", level: str = "all") -> Metrics:
    """TSR, PRR, RC and the composite over ``scores`` (paper §4.1 formulas), plus RC' and DUP."""
    rows = [s.components for s in scores]
    if not rows:
        raise ValueError("no trajectories to aggregate")
    n = len(rows)
    perturbed = sum(1 for r in rows if r["i_pert"])
    tsr = sum(1 for r in rows if r["i_succ"]) / n
    prr = sum(1 for r in rows if r["i_pert"] and r["i_recov"]) / perturbed if perturbed else None
    rc = sum(float(r["c_rec"] or 0.0) for r in rows if r["i_pert"]) / n
    rc_abort = sum(float(r.get("c_rec_abort", r["c_rec"]) or 0.0) for r in rows if r["i_pert"]) / n
    duplicates = sum(1 for r in rows if int(r.get("duplicate_writes") or 0) > 0) / n
    return Metrics(
        mode, level, n, perturbed, tsr, prr, rc, composite(mode, tsr, prr, rc), rc_abort, duplicates
    )


def recovery_term(mode: str, prr: float | None) -> float | None:
    """PRR as the composite takes it: 0 where a perturbation mode's runs never met their fault."""
    if prr is None and mode.split("+", 1)[0] in MODES and not mode.startswith("NP"):
        return 0.0
    return prr


def composite(mode: str, tsr: float, prr: float | None, rc: float) -> float:
    """The paper's composite, (TSR + PRR + 1 − RC)/3 (PRR as `recovery_term` takes it).

    Without a PRR (NP, conditions that are not the paper's modes) it is the mean of TSR and 1 − RC.
    """
    term = recovery_term(mode, prr)
    return (tsr + term + 1 - rc) / 3 if term is not None else (tsr + 1 - rc) / 2


def mean_over_modes(per_mode: Sequence[Metrics], mode: str = "all", level: str = "all") -> Metrics:
    """The paper's overall scores: each per-mode value averaged over the modes (§4.1 protocol).

    "Compute TSR_m, PRR_m and RC for the mode [...] Average the per-mode values": every mode weighs
    the same, however many of its runs met their fault. PRR averages the modes where it is defined
    (not NP); the composite is computed from the averages (its PRR term counts a perturbation mode
    without a PRR as 0, `recovery_term`). ``n`` and ``perturbed`` are totals.
    """
    if not per_mode:
        raise ValueError("no modes to average")

    def mean(values: Sequence[float]) -> float:
        return sum(values) / len(values)

    prrs = [m.prr for m in per_mode if m.prr is not None]
    terms = [term for m in per_mode if (term := recovery_term(m.mode, m.prr)) is not None]
    tsr, rc = mean([m.tsr for m in per_mode]), mean([m.rc for m in per_mode])
    prr = mean(prrs) if prrs else None
    term = mean(terms) if terms else None
    return Metrics(
        mode,
        level,
        sum(m.n for m in per_mode),
        sum(m.perturbed for m in per_mode),
        tsr,
        prr,
        rc,
        (tsr + term + 1 - rc) / 3 if term is not None else (tsr + 1 - rc) / 2,
        mean([m.rc_abort for m in per_mode]),
        mean([m.duplicates for m in per_mode]),
    )


def aggregate(scores: Iterable[Score]) -> list[Metrics]:
    """Metrics per (mode, level), per mode over all levels, per level over all modes, and overall.

    A mode's rows pool its trajectories (the paper's per-mode values); rows of mode ``all`` average
    the per-mode values instead (`mean_over_modes`, the paper's overall scores).
    """
    groups: dict[tuple[str, str], list[Score]] = defaultdict(list)
    for s in scores:
        mode, level = str(s.components["mode"]), str(s.components["level"])
        groups[mode, level].append(s)
        groups[mode, "all"].append(s)
    metrics = {key: metrics_of(members, *key) for key, members in groups.items()}
    for level in {level for _, level in groups}:
        per_mode = [m for (mode, at), m in metrics.items() if at == level and mode in MODES]
        if per_mode:  # other conditions (``other``, ``P1+protocol:heavy``) are not the paper's modes
            metrics["all", level] = mean_over_modes(per_mode, "all", level)
    return [metrics[key] for key in sorted(metrics)]
