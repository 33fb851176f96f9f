"""A clairvoyant adversary for ResiliBench's bound (ii): a full search over the moves the real server admits.

It knows every fault draw (the roll of call ``o`` of tool ``t`` is ``derive_rng(seed, fault_key, t,
o).random()``) and searches, depth first with memoisation, for calls the suite's scorer labels full.
Its model of the server is the server's own rule set, computed with the real code: the fault plan's
``success_probability`` on the episode's real call history (dependency factors and history window
included), the declared-dependency gate and, unless told otherwise, the suite's DAG gate; every call
costs a call of the budget, ``finish`` one more; the stop rules (5 failed calls in a row, more than 15
successful calls, 5 successes of one tool in a row) end the episode as the scorer does.

Moves, each a real MCP call with real arguments (`Recipes`):

* ``right``: a step's tool with its ground-truth arguments, upstream data taken from the outputs the
  replay received (progress when the step is pending and the draw succeeds; a success and no
  progress when the step is done);
* ``wrong``: the step's tool with made-up data for every upstream value: the world accepts it, the
  scorer does not count it. On a step that is not ready it is the probe that spends the tool's draws
  before they matter; only the DAG gate stops it;
* ``broken``: the step's tool with an argument the world refuses (a failure whatever the draw);
* ``filler``: a tool outside the workflow, with arguments the world accepts;
* ``refused``: a call the server refuses before any draw (an unknown tool).

`replay` plays a found sequence through a real `ResiliServer` over an MCP client, checks that every
call met the model's prediction (error or not; for drawn calls the roll and the success probability),
and returns the suite's score of the server's own record.
"""

from __future__ import annotations

import contextlib
import copy
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp import Client

from mcp_resili.faults import CallOutcome
from mcp_resili.faults.rng import derive_rng
from mcp_resili.registry.suites import Suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.suites.resilibench.faults import ResiliBenchFaults
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.optimal import CALL, FAILING, FILLER, FINISH, Policy
from mcp_resili.suites.resilibench.stop_rules import CONSECUTIVE_FAILURES, LOOP_REPEATS, MAX_SUCCESSFUL_CALLS
from mcp_resili.suites.resilibench.world import initial_state
from mcp_resili.tasks.model import StepBinding, Task, WorkflowStep, resolve_arguments
from mcp_resili.tools import ToolFailure
from mcp_resili.tools.validator import argument_problems, compiled
from mcp_resili.trace import FinishEvent, ToolCallEvent, Trace, TraceHeader

FILLER_CANDIDATES = ("utility_logger", "utility_tracker", "utility_cache", "file_operations_compressor")
MADE_UP_RECORDS = {"records": [{"id": 9001, "name": "made-up", "category": "none", "value": 1.5}]}
MADE_UP_TEXT = {"content": "id,name,category,value\n9001,made-up,none,1.5\n", "format": "csv"}
UNKNOWN_TOOL_NAME = "no_such_tool"
DEFAULT_NODE_BUDGET = 400_000


def _accepted(tool: str, arguments: dict[str, Any], task: Task) -> bool:
    """Schema-valid and run by the tool in the task's fresh world (no fault)."""
    library = resilibench_library()
    if argument_problems(compiled(library.spec(tool).input_schema), arguments) is not None:
        return False
    try:
        library.simulate(tool, arguments, initial_state(task))
    except ToolFailure:
        return False
    return True


def _refused_by_world(tool: str, arguments: dict[str, Any], task: Task) -> bool:
    """Schema-valid, so the call is drawn, but the tool's own check fails it."""
    library = resilibench_library()
    if argument_problems(compiled(library.spec(tool).input_schema), arguments) is not None:
        return False
    try:
        library.simulate(tool, arguments, initial_state(task))
    except ToolFailure:
        return True
    return False


@dataclass
class Recipes:
    """Concrete arguments for every move on one task (None where the world leaves no such move)."""

    task: Task
    wrong: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    broken: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    fillers: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, task: Task, filler_count: int = 2) -> Recipes:
        recipes = cls(task)
        for step in task.workflow.steps:
            recipes.wrong[step.id] = recipes._wrong(step)
            recipes.broken[step.id] = recipes._broken(step)
        used = {s.tool for s in task.workflow.steps}
        for tool in FILLER_CANDIDATES:
            arguments = {"data": copy.deepcopy(MADE_UP_RECORDS)}
            independent = not resilibench_library().spec(tool).dependencies
            if tool not in used and independent and _accepted(tool, arguments, task):
                recipes.fillers[tool] = arguments
            if len(recipes.fillers) == filler_count:
                break
        return recipes

    def _template(self, step: WorkflowStep, made_up: dict[str, Any]) -> dict[str, Any]:
        """The step's arguments with every upstream value replaced by ``made_up``."""
        results = {b.step: None for b in step.arguments.values() if isinstance(b, StepBinding)}
        arguments = {}
        for name, binding in step.arguments.items():
            if isinstance(binding, StepBinding):
                arguments[name] = copy.deepcopy(made_up)
            else:
                arguments[name] = resolve_arguments(
                    WorkflowStep(id=step.id, tool=step.tool, arguments={name: binding}),
                    self.task.inputs,
                    results,
                )[name]
        return arguments

    def _wrong(self, step: WorkflowStep) -> dict[str, Any] | None:
        if not any(isinstance(b, StepBinding) for b in step.arguments.values()):
            return None  # every accepted call of it is the right data
        for made_up in (
            MADE_UP_RECORDS,
            MADE_UP_TEXT,
            {"records": MADE_UP_RECORDS["records"], **MADE_UP_TEXT},
        ):
            arguments = self._template(step, made_up)
            if _accepted(step.tool, arguments, self.task):
                return arguments
        return None

    def _broken(self, step: WorkflowStep) -> dict[str, Any] | None:
        base = self._template(step, MADE_UP_RECORDS)
        candidates: list[dict[str, Any]] = []
        for name, value in base.items():
            if isinstance(value, str):
                for bad in ("nowhere/missing.bin", "http://nowhere.invalid/x", "no-such-service"):
                    candidates.append({**base, name: bad})
            elif isinstance(value, dict):
                candidates += [{**base, name: {}}, {**base, name: {"operation": "no-such-operation"}}]
        candidates += [{**base, "options": {"operation": "no-such-operation"}}, {**base, "data": {}}]
        for arguments in candidates:
            if _refused_by_world(step.tool, arguments, self.task):
                return arguments
        return None


@dataclass(frozen=True)
class Move:
    """One call of a found sequence and what the model predicts the server answers."""

    kind: str  # right | wrong | broken | filler | refused
    tool: str
    step: str | None
    #: "progress", "success", "failure" (drawn) or "refused" (no draw)
    outcome: str
    roll: float | None = None
    probability: float | None = None


@dataclass
class SearchResult:
    """The adversary's answer: a full sequence, "none exists", or "gave up" (node budget spent)."""

    moves: list[Move] | None
    exhausted: bool
    nodes: int


@dataclass
class _State:
    """Where an episode stands, as far as the server's rules and the scorer can tell."""

    ordinals: dict[str, int]
    history: list[CallOutcome] = field(default_factory=list)
    done: int = 0
    consecutive: int = 0
    turns: int = 0
    successes: int = 0
    last: str | None = None
    row: int = 0
    #: Per dependency tool: 0 never succeeded, 1 its latest run succeeded, 2 it succeeded once but its
    #: latest run failed (all the fault rule and the declared gate read of a tool's own history).
    status: dict[str, int] = field(default_factory=dict)


class Adversary:
    """The search (see the module docstring) for one episode: task, fault plan, seed, fault key, budget."""

    def __init__(
        self,
        task: Task,
        plan: ResiliBenchFaults,
        seed: int,
        fault_key: str,
        budget: int,
        *,
        dag_gate: bool = True,
        recipes: Recipes | None = None,
        node_budget: int = DEFAULT_NODE_BUDGET,
    ) -> None:
        if plan.history_window is None:
            raise ValueError("the adversary's memo keys assume a finite history window")
        self.task, self.plan, self.seed, self.key, self.budget = task, plan, seed, fault_key, budget
        self.dag_gate = dag_gate
        self.recipes = recipes or Recipes.of(task)
        self.node_budget = node_budget
        library = resilibench_library()
        self.steps = task.workflow.steps
        index = {s.id: i for i, s in enumerate(self.steps)}
        self.step_of_tool = {s.tool: i for i, s in enumerate(self.steps)}
        self.preds = [0] * len(self.steps)
        for a, b in task.workflow.edges:
            self.preds[index[b]] |= 1 << index[a]
        self.full = (1 << len(self.steps)) - 1
        self.tools = [s.tool for s in self.steps] + list(self.recipes.fillers)
        self.specs = {t: library.spec(t) for t in self.tools}
        self.dep_tools = sorted({d for t in self.tools for d in self.specs[t].dependencies})
        self._rolls: dict[tuple[str, int], float] = {}
        self._odds: dict[tuple[Any, ...], float] = {}
        self.window = plan.history_window or 1
        #: No call succeeds above this, whatever the history: every factor of the rule is at most 1.
        self.ceiling = min(max(plan.base_success, plan.min_success), plan.max_success)

    def roll(self, tool: str, ordinal: int) -> float:
        """The draw of call ``ordinal`` of ``tool`` (what the server's injector will roll)."""
        key = (tool, ordinal)
        if key not in self._rolls:
            self._rolls[key] = derive_rng(self.seed, self.key, tool, ordinal).random()
        return self._rolls[key]

    def start(self) -> _State:
        """The state before the episode's first call."""
        return _State(
            ordinals=dict.fromkeys(self.tools, 0), turns=self.budget, status=dict.fromkeys(self.dep_tools, 0)
        )

    def probability(self, tool: str, state: _State) -> float:
        """The plan's own success probability of a call of ``tool`` now, memoised on what it reads."""
        deps = self.specs[tool].dependencies
        key = (tool, tuple(h.ok for h in state.history[-self.window :]), tuple(state.status[d] for d in deps))
        odds = self._odds.get(key)
        if odds is None:
            odds = self._odds[key] = self.plan.success_probability(self.specs[tool], state.history)
        return odds

    def moves(self, state: _State) -> list[tuple[Move, int, bool]]:
        """Every distinct outcome the server can give a call now: (move, steps done after it, success).

        Progress first, then other successes, then failures, then the refused call.
        """
        children: list[tuple[Move, int, bool]] = []
        done = state.done
        for tool in self.tools:
            if not all(state.status[d] for d in self.specs[tool].dependencies):
                continue  # the declared-dependency gate refuses it (the refused move stands for it)
            i = self.step_of_tool.get(tool)
            ready = i is not None and self.preds[i] & done == self.preds[i]
            if self.dag_gate and i is not None and not ready:
                continue  # the DAG gate refuses it
            p = self.probability(tool, state)
            u = self.roll(tool, state.ordinals[tool])
            if i is None:  # a filler
                children.append(
                    (Move("filler", tool, None, "success" if u < p else "failure", u, p), done, u < p)
                )
                continue
            step = self.steps[i].id
            pending = not done >> i & 1
            has_wrong = self.recipes.wrong[step] is not None
            has_broken = self.recipes.broken[step] is not None
            if u >= p:
                kind = "right" if ready else "wrong" if has_wrong else "broken" if has_broken else None
                if kind is not None:
                    children.append((Move(kind, tool, step, "failure", u, p), done, False))
                continue
            if pending and ready:
                children.append((Move("right", tool, step, "progress", u, p), done | 1 << i, True))
            if not pending:
                children.append((Move("right", tool, step, "success", u, p), done, True))
            elif has_wrong:
                children.append((Move("wrong", tool, step, "success", u, p), done, True))
            if has_broken:
                children.append((Move("broken", tool, step, "failure", u, p), done, False))
        order = {"progress": 0, "success": 1, "failure": 2}
        children.sort(key=lambda c: order[c[0].outcome])
        children.append((Move("refused", UNKNOWN_TOOL_NAME, None, "refused"), done, False))
        return children

    def step(self, state: _State, move: Move, done: int, ok: bool) -> tuple[Any, ...] | None:
        """Apply a move (None if a stop rule ends the episode there); returns what `undo` needs."""
        consecutive = 0 if ok else state.consecutive + 1
        successes = state.successes + ok
        row = (state.row + 1 if move.tool == state.last else 1) if ok else state.row
        if consecutive >= CONSECUTIVE_FAILURES or successes > MAX_SUCCESSFUL_CALLS or row >= LOOP_REPEATS:
            return None
        saved = (
            state.done,
            state.consecutive,
            state.successes,
            state.last,
            state.row,
            state.status.get(move.tool),
        )
        if move.outcome != "refused":
            state.history.append(CallOutcome(move.tool, ok))
            state.ordinals[move.tool] += 1
            if move.tool in state.status:
                before = state.status[move.tool]
                state.status[move.tool] = 1 if ok else (2 if before else 0)
        state.done, state.consecutive, state.successes = done, consecutive, successes
        state.last = move.tool if ok else state.last
        state.row = row
        state.turns -= 1
        return saved

    def undo(self, state: _State, move: Move, saved: tuple[Any, ...]) -> None:
        """Take a move back."""
        if move.outcome != "refused":
            state.history.pop()
            state.ordinals[move.tool] -= 1
        state.done, state.consecutive, state.successes, state.last, state.row, status = saved
        if status is not None:
            state.status[move.tool] = status
        state.turns += 1

    def calls_needed(self, state: _State) -> int:
        """A floor on the calls still needed: per pending step, its draws that must fail, plus one.

        A draw at or above `ceiling` fails under any history, so a pending step needs at least its run
        of such draws plus a success; ``finish`` takes one more.
        """
        needed = 1
        for i, step in enumerate(self.steps):
            if not state.done >> i & 1:
                ordinal = state.ordinals[step.tool]
                while self.roll(step.tool, ordinal) >= self.ceiling:
                    ordinal += 1
                needed += ordinal - state.ordinals[step.tool] + 1
        return needed

    def search(self) -> SearchResult:
        """Depth-first search for a full episode, memoising states proved hopeless."""
        state = self.start()
        window = self.plan.history_window or 1
        dead: set[tuple[Any, ...]] = set()
        path: list[Move] = []
        nodes = 0

        def dfs() -> bool:
            nonlocal nodes
            if state.done == self.full:
                return state.turns >= 1
            if state.turns < self.calls_needed(state):
                return False
            key = (
                state.done,
                tuple(state.ordinals[t] for t in self.tools),
                tuple(h.ok for h in state.history[-window:]),
                tuple(state.status.values()),
                state.consecutive,
                state.turns,
                state.successes,
                state.last,
                state.row,
            )
            if key in dead:
                return False
            nodes += 1
            if nodes > self.node_budget:
                raise _GaveUp
            for move, done, ok in self.moves(state):
                saved = self.step(state, move, done, ok)
                if saved is None:
                    continue
                path.append(move)
                if dfs():
                    return True
                path.pop()
                self.undo(state, move, saved)
            dead.add(key)
            return False

        try:
            found = dfs()
        except _GaveUp:
            return SearchResult(None, False, nodes)
        return SearchResult(list(path) if found else None, True, nodes)

    def walk(self, rng: random.Random, calls: int) -> list[Move]:
        """A random sequence of up to ``calls`` moves the server admits (to check the model against it)."""
        state = self.start()
        state.turns = calls + 1
        path: list[Move] = []
        while len(path) < calls:
            options = self.moves(state)
            move, done, ok = options[rng.randrange(len(options))]
            if self.step(state, move, done, ok) is None:
                break
            path.append(move)
        return path


class _GaveUp(Exception):
    pass


async def replay(
    suite: Suite,
    plan: ResiliBenchFaults,
    task: Task,
    seed: int,
    fault_key: str,
    budget: int,
    moves: Sequence[Move],
    recipes: Recipes,
    *,
    server: ResiliServer | None = None,
    episode: str = "adversary",
    client: Client | None = None,
) -> Trace:
    """Play ``moves`` and ``finish`` through a real server over MCP; the server's own trace of it.

    Every call is checked against the model: an error exactly when predicted, and for drawn calls the
    decision's roll and success probability.
    """
    server = server or ResiliServer(suite, plan, seed=seed)
    meta = {"mcp-resili/episode": {"id": episode, "task": task.id, "seed": seed, "fault_key": fault_key}}
    received: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        if client is None:  # one client for many episodes saves compiling every output schema again
            client = await stack.enter_async_context(Client(server.mcp))
        for n, move in enumerate(moves):
            if move.kind == "right":
                step = task.workflow.steps[[s.id for s in task.workflow.steps].index(move.step)]
                arguments = resolve_arguments(step, task.inputs, received)
            elif move.kind == "wrong":
                arguments = recipes.wrong[move.step]
            elif move.kind == "broken":
                arguments = recipes.broken[move.step]
            elif move.kind == "filler":
                arguments = recipes.fillers[move.tool]
            else:
                arguments = {}
            result = await client.call_tool(move.tool, copy.deepcopy(arguments), meta=meta)
            event = server.take_events(episode)[-1]
            assert isinstance(event, ToolCallEvent)
            where = f"call {n} {move}: {event.error_code} {event.result}"
            assert result.is_error == (move.outcome in ("failure", "refused")), where
            if move.outcome == "refused":
                assert event.decision is None, where
                continue
            assert event.decision is not None, where
            assert (
                event.decision.roll == move.roll and event.decision.success_probability == move.probability
            ), where
            if move.outcome == "progress":
                received[move.step] = event.result
        await client.call_tool("finish", {"status": "completed", "summary": "done"}, meta=meta)
    closed = server.close_episode(episode)
    assert closed is not None
    header = TraceHeader(
        suite=suite.name,
        task=task.id,
        episode=episode,
        seed=seed,
        fault_plan=plan.to_dict(),
        fault_key=fault_key,
        max_turns=budget,
    )
    events = tuple(e for e in closed.events if isinstance(e, ToolCallEvent | FinishEvent))
    return Trace(header=header, events=events)


def broken_filler(recipes: Recipes) -> tuple[str, dict[str, Any]]:
    """A filler tool with arguments the world refuses (an empty payload): a failing call."""
    tool = next(iter(recipes.fillers))
    arguments = {"data": {}}
    assert _refused_by_world(tool, arguments, recipes.task), tool
    return tool, arguments


async def play_policy(
    server: ResiliServer,
    task: Task,
    seed: int,
    fault_key: str,
    budget: int,
    policy: Policy,
    recipes: Recipes,
    episode: str,
    client: Client | None = None,
) -> Trace:
    """Play a bound-(iii) MDP policy through the real server (it sees only what an agent sees).

    The policy's actions become real calls: a ready step with its ground-truth arguments; a step
    that is not ready with made-up (or refused) arguments, which the DAG gate refuses; a filler (and
    a call of a step already done) as a call of a tool outside the workflow, alternating between two
    so the loop rule never fires; a failing call as an empty payload to a filler; a refused call as
    an unknown tool. The MDP state is rebuilt from the answers alone.
    """
    index = {s.id: i for i, s in enumerate(task.workflow.steps)}
    preds = [0] * len(task.workflow.steps)
    for a, b in task.workflow.edges:
        preds[index[b]] |= 1 << index[a]
    window = server.pipeline.plan.history_window if isinstance(server.pipeline.plan, ResiliBenchFaults) else 3
    fillers = list(recipes.fillers)
    failing_tool, failing_arguments = broken_filler(recipes)
    meta = {"mcp-resili/episode": {"id": episode, "task": task.id, "seed": seed, "fault_key": fault_key}}
    received: dict[str, Any] = {}
    done, history, consecutive, turns, filler_turn = 0, (), 0, budget, 0
    async with contextlib.AsyncExitStack() as stack:
        if client is None:  # one client for many episodes saves compiling every output schema again
            client = await stack.enter_async_context(Client(server.mcp))
        while turns > 0:
            kind, i = policy(done, history, consecutive, turns)
            if kind == FINISH:
                await client.call_tool("finish", {"status": "completed", "summary": "done"}, meta=meta)
                break
            step = task.workflow.steps[i] if kind == CALL else None
            if step is not None and not done >> i & 1 and preds[i] & done == preds[i]:
                tool, arguments = step.tool, resolve_arguments(step, task.inputs, received)
            elif step is not None and not done >> i & 1:
                tool = step.tool
                arguments = recipes.wrong[step.id] or recipes.broken[step.id] or {}
            elif kind in (CALL, FILLER):
                tool, arguments = (
                    fillers[filler_turn % len(fillers)],
                    recipes.fillers[fillers[filler_turn % len(fillers)]],
                )
                filler_turn += 1
            elif kind == FAILING:
                tool, arguments = failing_tool, failing_arguments
            else:
                tool, arguments = UNKNOWN_TOOL_NAME, {}
            result = await client.call_tool(tool, copy.deepcopy(arguments), meta=meta)
            event = server.take_events(episode)[-1]
            assert isinstance(event, ToolCallEvent)
            turns -= 1
            if event.decision is None:  # refused before any draw: no history, one more failure in a row
                assert result.is_error
                consecutive += 1
                continue
            ok = not result.is_error
            history = (*history, ok)[-(window or 1) :]
            consecutive = 0 if ok else consecutive + 1
            if ok and step is not None and tool == step.tool and not done >> i & 1:
                done |= 1 << i
                received[step.id] = event.result
    closed = server.close_episode(episode)
    assert closed is not None
    header = TraceHeader(
        suite="resilibench",
        task=task.id,
        episode=episode,
        seed=seed,
        fault_plan=server.pipeline.plan_dict,
        fault_key=fault_key,
        max_turns=budget,
    )
    return Trace(
        header=header, events=tuple(e for e in closed.events if isinstance(e, ToolCallEvent | FinishEvent))
    )
