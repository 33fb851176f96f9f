"""Exact optimal workflows by dynamic programming (the paper's bound (iii)) and the clairvoyant bound (ii).

The paper (§1, §3.3, App. D) frames tool use as an MDP and approximates its optimum with PPO. Under
ResiliBench's failure model the MDP is small enough to solve exactly, so we do.

**The MDP** is over the episode's *call budget* (`mcp_resili.scoring.termination`: every call
counts, ``finish`` included; how an agent groups calls into model turns does not matter, since
seeing results between calls can only help, so the MDP makes one call per step):

* state = (set of workflow steps that have succeeded, the fault model's history summary, the number
  of consecutive failed calls, calls left). The history summary is the last ``history_window``
  outcomes (or the count of all failures when the window is ``None``), which is all the
  `ResiliBenchFaults` rule reads once dependencies are enforced.
* actions = call a *ready* step (every DAG predecessor has succeeded), make a call the server
  refuses (a step whose DAG predecessors have not succeeded on the task's data, `gate`; an unknown
  tool; bad arguments: it costs a call and counts as a failed call for the termination rule, but
  never reaches the fault model), make a *filler* call (a tool outside the pending steps, a step
  that already succeeded, or a ready step on other data: it meets the fault model like any call and
  moves the history, but no step), make a *failing* call (arguments the world refuses: it fails
  whatever the draw), or finish. These are all the moves the server admits.
* a call of a ready step succeeds with ``p = clamp(base · history_factor^failures)``: with
  dependencies enforced every dependency has succeeded and (never being called again) its latest
  run is that success, so the dependency factors are 1.
* the episode is lost when ``CONSECUTIVE_FAILURES`` calls in a row fail (the termination rule), or
  when the calls run out before every step has succeeded and ``finish`` has been called.

The value is the probability of **full success** (all steps succeeded, in DAG order, and the
completion signal), maximised over policies; the plan is the DP's choice of step when every call
succeeds. A consequence worth knowing: with enforced dependencies ``p`` does not depend on which
ready step is called, so every topological order is optimal and the DP proves it (see
`policy_success_probability`); order matters only under the soft rule (``enforce`` off), which the
suite does not use.

**Bound (ii)** (`clairvoyant_full_success`): an agent that knows every fault draw in advance (the
roll of call ``o`` of tool ``t`` is ``derive_rng(seed, fault_key, t, o).random()``). A depth-first
search decides whether some sequence of calls reaches full success. Its moves: call a ready step
(its next draw decides), spend a ready step's failing draw, or make a filler call that succeeds.
Filler calls are assumed to succeed whenever the agent wants one (with some twenty tools outside any
workflow, a clairvoyant agent nearly always has one whose next draw succeeds), and rules that only
cut an agent short (more than 15 successes, a loop) are left out: both over-approximate. Every other
move the server admits is dominated by one of these (a refused call, a failing filler or failing
call, a success on other data: each leaves the agent no better off, and being better off is kept by
every later move), and the server's success probability of a call is never above the search's (the
dependency factors are at most 1). Calls of a step that is not ready are refused before any draw
(`gate`), so no move spends a draw of a step before it is ready. Hence "impossible" is a proof;
`tests/suites/resilibench/test_bound_proof.py` checks it against a clairvoyant adversary that searches the
server's real moves and replays what it finds through the real server (docs/resilibench.md).
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, Literal

from mcp_resili.faults.base import FaultSpecError, parse_plan
from mcp_resili.faults.rng import derive_rng
from mcp_resili.faults.rules import NoFaults
from mcp_resili.suites.resilibench.faults import ResiliBenchFaults
from mcp_resili.suites.resilibench.stop_rules import CONSECUTIVE_FAILURES
from mcp_resili.tasks.model import SameTask, Task, Workflow
from mcp_resili.tools import ToolLibrary

#: A history summary: the last ``window`` outcomes (True = success), or the total failure count.
History = tuple[bool, ...] | int
#: A policy's move: call step index ``i``, make a refused call, a filler call, a failing call, or finish.
Action = tuple[str, int]
CALL, REFUSED, FILLER, FAILING, FINISH = "call", "refused", "filler", "failing", "finish"
#: Depth-first-search nodes bound (ii) may visit before it answers "unknown" (None).
CLAIRVOYANT_NODE_BUDGET = 200_000


def ready_probability(faults: ResiliBenchFaults, failures: int) -> float:
    """Success probability of a call whose dependencies all succeeded, after ``failures`` counted failures."""
    p = faults.base_success * faults.history_factor**failures
    return min(max(p, faults.min_success), faults.max_success)


def _start(faults: ResiliBenchFaults) -> History:
    return 0 if faults.history_window is None else ()


def _push(faults: ResiliBenchFaults, history: History, ok: bool) -> History:
    if isinstance(history, int):
        return history + (0 if ok else 1)
    window = faults.history_window or 1
    return (*history, ok)[-window:]


def _failures(history: History) -> int:
    return history if isinstance(history, int) else sum(1 for ok in history if not ok)


@dataclass(frozen=True)
class _Graph:
    """The workflow as bitmasks: step ``i``'s predecessors, and the mask of all steps."""

    ids: tuple[str, ...]
    tools: tuple[str, ...]
    preds: tuple[int, ...]
    full: int

    @classmethod
    def of(cls, workflow: Workflow) -> _Graph:
        ids = tuple(s.id for s in workflow.steps)
        index = {sid: i for i, sid in enumerate(ids)}
        preds = [0] * len(ids)
        for a, b in workflow.edges:
            preds[index[b]] |= 1 << index[a]
        return cls(ids, tuple(s.tool for s in workflow.steps), tuple(preds), (1 << len(ids)) - 1)

    def ready(self, done: int) -> list[int]:
        return [
            i for i in range(len(self.ids)) if not done >> i & 1 and self.preds[i] & done == self.preds[i]
        ]

    def remaining(self, done: int) -> int:
        return len(self.ids) - done.bit_count()


@dataclass(frozen=True)
class OptimalWorkflow:
    """The DP's answer for one task under one fault model and turn budget."""

    steps: tuple[str, ...]
    tools: tuple[str, ...]
    success_probability: float
    max_turns: int
    faults: dict[str, Any]

    def to_metadata(self) -> dict[str, Any]:
        """JSON-ready form, as stored in ``task.metadata["optimal_workflow"]``."""
        return {
            "steps": list(self.steps),
            "tools": list(self.tools),
            "success_probability": round(self.success_probability, 6),
            "max_turns": self.max_turns,
            "faults": self.faults,
            "method": "dynamic programming over (succeeded steps, fault history, consecutive failures, "
            "turns left); one call per turn, finish takes a turn",
        }


def _check_rule(faults: ResiliBenchFaults) -> None:
    if faults.history_window is not None and faults.history_window > 8:
        raise ValueError(f"history_window {faults.history_window} is too large for the exact DP (max 8)")


def solve_optimal_workflow(
    workflow: Workflow, library: ToolLibrary, faults: ResiliBenchFaults, max_turns: int
) -> OptimalWorkflow:
    """Solve the MDP exactly: the plan maximising P(full success) and that probability (bound (iii))."""
    _check_rule(faults)
    for step in workflow.steps:
        library.spec(step.tool)  # an unknown tool is a broken task, not a zero
    graph = _Graph.of(workflow)
    value = _value_function(graph, faults)
    plan: list[int] = []
    done, history, turns = 0, _start(faults), max_turns
    while done != graph.full:
        ready = graph.ready(done)
        # Ties go to workflow order, so the plan is the listed order whenever that is optimal.
        best = max(
            ready, key=lambda i: (value(done | 1 << i, _push(faults, history, True), 0, turns - 1), -i)
        )
        plan.append(best)
        done, history, turns = done | 1 << best, _push(faults, history, True), turns - 1
    return OptimalWorkflow(
        steps=tuple(graph.ids[i] for i in plan),
        tools=tuple(graph.tools[i] for i in plan),
        success_probability=value(0, _start(faults), 0, max_turns),
        max_turns=max_turns,
        faults=faults.to_dict(),
    )


def _value_function(graph: _Graph, faults: ResiliBenchFaults) -> Callable[[int, History, int, int], float]:
    @cache
    def value(done: int, history: History, consecutive: int, turns: int) -> float:
        if done == graph.full:
            return 1.0 if turns >= 1 else 0.0
        if turns - 1 < graph.remaining(done):
            return 0.0
        p = ready_probability(faults, _failures(history))
        lost = consecutive + 1 >= CONSECUTIVE_FAILURES
        fail = 0.0 if lost else value(done, _push(faults, history, False), consecutive + 1, turns - 1)
        best = 0.0  # finishing now (or stopping) loses
        for i in graph.ready(done):
            best = max(
                best, p * value(done | 1 << i, _push(faults, history, True), 0, turns - 1) + (1 - p) * fail
            )
        # A filler call: same odds as a step, no progress (never better, but the DP proves it).
        best = max(best, p * value(done, _push(faults, history, True), 0, turns - 1) + (1 - p) * fail)
        best = max(best, fail)  # a failing call (arguments the world refuses): never better either
        if len(graph.ready(done)) < graph.remaining(done) and not lost:
            best = max(best, value(done, history, consecutive + 1, turns - 1))  # a refused call
        return best

    return value


#: A policy maps (succeeded-steps mask, history, consecutive failures, turns left) to an action.
Policy = Callable[[int, History, int, int], Action]


def policy_success_probability(
    workflow: Workflow, faults: ResiliBenchFaults, max_turns: int, policy: Policy
) -> float:
    """Exact P(full success) of a deterministic ``policy`` in the same MDP (to check the DP against).

    Calling a step that is not ready is a refused call; calling a step that already succeeded is a
    filler call.
    """
    _check_rule(faults)
    graph = _Graph.of(workflow)

    @cache
    def value(done: int, history: History, consecutive: int, turns: int) -> float:
        if turns <= 0:
            return 0.0
        kind, i = policy(done, history, consecutive, turns)
        if kind == FINISH:
            return 1.0 if done == graph.full else 0.0
        lost = consecutive + 1 >= CONSECUTIVE_FAILURES
        if kind == FAILING:
            return 0.0 if lost else value(done, _push(faults, history, False), consecutive + 1, turns - 1)
        filler = kind == FILLER or (kind == CALL and bool(done >> i & 1))
        if not filler and (kind == REFUSED or i not in graph.ready(done)):
            # Refused by the dependency gate: a failed call for the termination rule, unseen by faults.
            return 0.0 if lost else value(done, history, consecutive + 1, turns - 1)
        p = ready_probability(faults, _failures(history))
        fail = 0.0 if lost else value(done, _push(faults, history, False), consecutive + 1, turns - 1)
        gained = 0 if filler else 1 << i
        return p * value(done | gained, _push(faults, history, True), 0, turns - 1) + (1 - p) * fail

    return value(0, _start(faults), 0, max_turns)


def first_pending_policy(workflow: Workflow) -> Policy:
    """The oracle agent's rule: call the first step (in workflow order) that has not succeeded yet."""
    graph = _Graph.of(workflow)

    def policy(done: int, history: History, consecutive: int, turns: int) -> Action:
        for i in range(len(graph.ids)):
            if not done >> i & 1:
                return (CALL, i)
        return (FINISH, -1)

    return policy


def random_policy(workflow: Workflow, seed: int) -> Policy:
    """A deterministic, arbitrary policy (seeded table): any step, refused, filler, failing calls, finish."""
    graph = _Graph.of(workflow)

    def policy(done: int, history: History, consecutive: int, turns: int) -> Action:
        rng = random.Random(f"{seed}:{done}:{history}:{consecutive}:{turns}")
        if done == graph.full:
            return (FINISH, -1)
        choices: list[Action] = [(CALL, i) for i in graph.ready(done)]
        blocked = [i for i in range(len(graph.ids)) if not done >> i & 1 and i not in graph.ready(done)]
        choices += [(CALL, i) for i in blocked]  # refused by the server
        choices += [(FILLER, -1), (CALL, rng.randrange(len(graph.ids)))]  # may re-call a finished step
        choices += [(FAILING, -1), (REFUSED, -1)]
        if rng.random() < 0.05:
            return (FINISH, -1)
        return rng.choice(choices)

    return policy


def clairvoyant_full_success(
    workflow: Workflow, faults: ResiliBenchFaults, max_turns: int, seed: int, fault_key: str
) -> bool | None:
    """Bound (ii) for one episode: whether an agent that knows every fault draw could reach full success.

    None when the search exceeds `CLAIRVOYANT_NODE_BUDGET` nodes (never seen on the suite's tasks).
    The last `CLAIRVOYANT_CACHE` answers are kept: a task's prompt variants and models meet the same
    draws (they share its fault key), and a run plays them side by side.
    """
    return _clairvoyant(_Graph.of(workflow), faults, max_turns, seed, fault_key)


#: How many bound (ii) answers `clairvoyant_full_success` keeps (a few hundred bytes each).
CLAIRVOYANT_CACHE = 1024


@lru_cache(maxsize=CLAIRVOYANT_CACHE)
def _clairvoyant(
    graph: _Graph, faults: ResiliBenchFaults, max_turns: int, seed: int, fault_key: str
) -> bool | None:
    count, tools, full = len(graph.ids), graph.tools, graph.full
    rolls: dict[tuple[str, int], float] = {}

    def succeeds(i: int, ordinal: int, p: float) -> bool:
        """Whether step ``i``'s tool succeeds at its ``ordinal``-th call with odds ``p``."""
        key = (tools[i], ordinal)
        roll = rolls.get(key)
        if roll is None:  # drawn only when the search first looks: a path found early draws less
            roll = rolls[key] = derive_rng(seed, fault_key, tools[i], ordinal).random()
        return roll < p

    # Per state (succeeded steps, ordinals, history, failure streak): the most turns known to fall
    # short. Fewer fall short too (every move takes a turn; finishing early is always allowed).
    short: dict[tuple[int, tuple[int, ...], History, int], int] = {}
    nodes = 0
    # The search revisits the same masks and histories: compute their ready steps and odds once.
    ready_of: dict[int, list[int]] = {}
    probability: dict[History, float] = {}

    def search(done: int, ordinals: tuple[int, ...], history: History, consecutive: int, turns: int) -> bool:
        nonlocal nodes
        if done == full:
            return turns >= 1
        if turns - 1 < count - done.bit_count():
            return False
        key = (done, ordinals, history, consecutive)
        if short.get(key, -1) >= turns:
            return False
        nodes += 1
        if nodes > CLAIRVOYANT_NODE_BUDGET:
            raise _BudgetExceeded
        p = probability.get(history)
        if p is None:
            p = probability[history] = ready_probability(faults, _failures(history))
        ready = ready_of.get(done)
        if ready is None:
            ready = ready_of[done] = graph.ready(done)
        cleaner = _push(faults, history, True)
        # Successes first: a feasible episode is then found along its first path.
        for i in ready:
            if succeeds(i, ordinals[i], p) and search(done | 1 << i, ordinals, cleaner, 0, turns - 1):
                return True
        # A filler success: no progress, but a cleaner history and no failure streak.
        if search(done, ordinals, cleaner, 0, turns - 1):
            return True
        if consecutive + 1 < CONSECUTIVE_FAILURES:
            dirtier = _push(faults, history, False)
            for i in ready:  # burn a failing draw to reach the next one
                if not succeeds(i, ordinals[i], p):
                    bumped = (*ordinals[:i], ordinals[i] + 1, *ordinals[i + 1 :])
                    if search(done, bumped, dirtier, consecutive + 1, turns - 1):
                        return True
        short[key] = turns
        return False

    try:
        return search(0, (0,) * count, _start(faults), 0, max_turns)
    except _BudgetExceeded:
        return None


class _BudgetExceeded(Exception):
    pass


_EpisodePlan = ResiliBenchFaults | Literal["none"] | None

#: The last fault plan read: a copy of its dict, what it reads as, and that plan's sorted JSON (a run's
#: episodes all carry the same plan; an equal dict reads the same).
_last_plan: tuple[dict[str, Any], _EpisodePlan, str] | None = None


def _episode_plan(fault_plan: dict[str, Any]) -> _EpisodePlan:
    return _read_plan(fault_plan)[0]


def _read_plan(fault_plan: dict[str, Any]) -> tuple[_EpisodePlan, str]:
    """What a trace header's fault plan means to the bounds, and (for a ResiliBench plan) its JSON."""
    global _last_plan
    last = _last_plan
    if last is not None and last[0] == fault_plan:
        return last[1], last[2]
    plan: _EpisodePlan = None  # a plan the bounds do not know, or one that does not parse
    try:
        parsed = parse_plan(fault_plan)
    except FaultSpecError:
        parsed = None
    if isinstance(parsed, NoFaults):
        plan = "none"
    elif isinstance(parsed, ResiliBenchFaults):
        plan = parsed
    plan_json = json.dumps(plan.to_dict(), sort_keys=True) if isinstance(plan, ResiliBenchFaults) else ""
    _last_plan = (copy.deepcopy(fault_plan), plan, plan_json)
    return plan, plan_json


def episode_bound_ii(
    task: Task, fault_plan: dict[str, Any], seed: int, fault_key: str, max_turns: int | None = None
) -> bool | None:
    """Bound (ii) for a recorded episode, from its trace header's fault plan, seed, fault key and budget.

    True/False under the ResiliBench plan, True under no faults (if the budget allows the steps),
    None for any other plan (the search only knows the ResiliBench rule).
    """
    plan = _episode_plan(fault_plan)
    turns = max_turns or task.constraints.max_turns
    if plan == "none":
        return len(task.workflow.steps) + 1 <= turns
    if plan is None:
        return None
    return clairvoyant_full_success(task.workflow, plan, turns, seed, fault_key)


_BOUND_III: dict[tuple[str, int, str], float] = {}


@lru_cache(maxsize=64)
def _stored_faults_json(task: SameTask) -> str:
    """The fault plan the task's stored DP value was solved for, as sorted JSON (once per task object)."""
    return json.dumps(task.task.metadata.get("optimal_workflow", {}).get("faults"), sort_keys=True)


def episode_bound_iii(task: Task, fault_plan: dict[str, Any], max_turns: int | None = None) -> float | None:
    """Bound (iii) for an episode's fault plan and turn budget.

    The DP value stored with the task when plan and budget are the suite's defaults, else solved now
    (and remembered per task, budget and plan).
    """
    plan, plan_json = _read_plan(fault_plan)
    turns = max_turns or task.constraints.max_turns
    if plan == "none":
        return 1.0 if len(task.workflow.steps) + 1 <= turns else 0.0
    if plan is None:
        return None
    stored = task.metadata.get("optimal_workflow", {})
    if (
        stored.get("max_turns") == turns
        and _stored_faults_json(SameTask(task)) == plan_json
        and isinstance(stored.get("success_probability"), int | float)
    ):
        return float(stored["success_probability"])
    key = (task.id, turns, plan_json)
    if key not in _BOUND_III:
        from mcp_resili.suites.resilibench.library import resilibench_library

        solved = solve_optimal_workflow(task.workflow, resilibench_library(), plan, turns)
        _BOUND_III[key] = round(solved.success_probability, 6)
    return _BOUND_III[key]
