"""Bounds (ii) and (iii) hold against every move the real server admits, checked through the real server.

Bound (ii): a clairvoyant adversary (`adversary.py` beside this file) searches the server's real moves for
a full episode where bound (ii) says impossible, and replays what it finds through a real `ResiliServer`
over an MCP client, scored by the suite. Bound (iii): policies of its MDP that use every kind of move
(refused, filler, failing, early finish) never beat the DP, and played through the real server they
reach the full rate the MDP predicts. bench/resilibench_clairvoyant.py runs the same at scale.
"""

import dataclasses
import math
import random

import pytest
from mcp import Client

from mcp_resili.registry.loader import get_suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.suites.resilibench.faults import ResiliBenchFaults
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.optimal import (
    clairvoyant_full_success,
    policy_success_probability,
    random_policy,
    solve_optimal_workflow,
)
from mcp_resili.suites.resilibench.tasks import full_tasks
from mcp_resili.tasks.model import resolve_arguments
from mcp_resili.trace.codes import DEPENDENCY_NOT_MET
from suites.resilibench.adversary import Adversary, Recipes, play_policy, replay

SUITE = get_suite("resilibench")
UNGATED = dataclasses.replace(SUITE, dependency_gate=None)  # the server before the DAG gate
HARSH = ResiliBenchFaults(base_success=0.6)
DEFAULT = ResiliBenchFaults()
SETTINGS = {"harsh": (HARSH, 10), "default": (DEFAULT, None)}


def pairs(setting, count, *, offset=0):
    """Deterministic (task, seed, fault key, budget) samples spread over the full suite."""
    _, budget = SETTINGS[setting]
    tasks = full_tasks()
    for k in range(offset, offset + count):
        task = tasks[(k * 131) % len(tasks)]
        yield task, k % 7, f"{task.id}/{k % 3}", budget or task.constraints.max_turns


@pytest.mark.anyio
async def test_the_adversarys_model_is_the_servers_rule_set():
    """Random walks over the adversary's moves, replayed: every answer is the one the model predicts."""
    seen = set()
    rng = random.Random(5)
    for gated, suite in ((True, SUITE), (False, UNGATED)):
        server = ResiliServer(suite, HARSH)
        async with Client(server.mcp) as client:
            for n, (task, seed, key, _) in enumerate(pairs("harsh", 12, offset=40)):
                adversary = Adversary(task, HARSH, seed, key, 30, dag_gate=gated)
                moves = adversary.walk(rng, 24)
                # `replay` asserts each call's error, roll and success probability against the model.
                recipes = adversary.recipes
                await replay(
                    suite,
                    HARSH,
                    task,
                    seed,
                    key,
                    30,
                    moves,
                    recipes,
                    server=server,
                    episode=f"w{n}",
                    client=client,
                )
                seen |= {(m.kind, m.outcome) for m in moves}
    # Every kind of move met every outcome it can have (the dependency factors included: failures
    # of a dependency lower the odds of the tool that needs it, and the model matched the server).
    assert {
        ("right", "progress"),
        ("right", "success"),
        ("right", "failure"),
        ("wrong", "success"),
        ("wrong", "failure"),
        ("broken", "failure"),
        ("filler", "success"),
        ("filler", "failure"),
        ("refused", "refused"),
    } <= seen


@pytest.mark.anyio
async def test_without_the_dag_gate_a_clairvoyant_agent_beats_bound_ii_and_with_it_cannot(tmp_path):
    """The issue's exploit: spend a not-ready step's failing draw early. Gated, it is refused."""
    task, seed, key = SUITE.task("task_0226c1d8"), 4, "task_0226c1d8/1"
    assert clairvoyant_full_success(task.workflow, HARSH, 10, seed, key) is False
    ungated = Adversary(task, HARSH, seed, key, 10, dag_gate=False).search()
    assert ungated.moves is not None
    probe = next(m for m in ungated.moves if m.kind == "wrong")  # the queue, before its data exists
    trace = await replay(UNGATED, HARSH, task, seed, key, 10, ungated.moves, Recipes.of(task))
    score = UNGATED.score(task, trace)
    assert score.label == "full" and score.components["bound_ii_full_possible"] is False
    # The real server now refuses the probe before any draw, and no sequence of moves is full.
    gated = Adversary(task, HARSH, seed, key, 10).search()
    assert gated.exhausted and gated.moves is None
    server = ResiliServer(SUITE, HARSH, seed=seed)
    meta = {"mcp-resili/episode": {"id": "p", "task": task.id, "seed": seed, "fault_key": key}}
    async with Client(server.mcp) as client:
        result = await client.call_tool(probe.tool, Recipes.of(task).wrong[probe.step], meta=meta)
    event = server.take_events("p")[-1]
    assert result.is_error and event.error_code == DEPENDENCY_NOT_MET and event.decision is None


@pytest.mark.anyio
@pytest.mark.parametrize("setting", ["harsh", "default"])
async def test_no_clairvoyant_adversary_reaches_full_where_bound_ii_says_impossible(setting):
    plan, _ = SETTINGS[setting]
    impossible = possible = found = 0
    replays = []
    want_impossible = 100 if setting == "harsh" else 25
    for task, seed, key, budget in pairs(setting, 3000):
        bound = clairvoyant_full_success(task.workflow, plan, budget, seed, key)
        assert bound is not None
        if bound:
            if possible >= 30:
                continue
            possible += 1
        else:
            impossible += 1
        result = Adversary(task, plan, seed, key, budget).search()
        assert result.exhausted, (task.id, seed, key)  # the search never gave up
        if not bound:
            assert result.moves is None, (task.id, seed, key, result.moves)
        elif result.moves is not None:
            found += 1
            if len(replays) < 4:
                replays.append((task, seed, key, budget, result.moves))
        if impossible >= want_impossible and possible >= 30:
            break
    assert impossible >= want_impossible and possible == 30
    # The adversary is strong: where bound (ii) says possible it nearly always finds the episode
    # (it lacks only the bound's always-successful filler), and what it finds is full on the server.
    assert found >= 27
    for n, (task, seed, key, budget, moves) in enumerate(replays):
        trace = await replay(SUITE, plan, task, seed, key, budget, moves, Recipes.of(task), episode=f"r{n}")
        assert SUITE.score(task, trace).label == "full"


def test_no_policy_over_every_kind_of_move_beats_the_dp():
    """Bound (iii) is the maximum over all of its MDP's moves: the failing call included (never better)."""
    lib = resilibench_library()
    for task in full_tasks()[::420]:
        for plan, budget in ((HARSH, 10), (DEFAULT, task.constraints.max_turns)):
            best = solve_optimal_workflow(task.workflow, lib, plan, budget).success_probability
            for seed in range(4):
                other = policy_success_probability(
                    task.workflow, plan, budget, random_policy(task.workflow, seed)
                )
                assert other <= best + 1e-12, (task.id, seed)


def _mostly_sensible(workflow, seed):
    """The first pending step, or (one time in three, seeded per state) any move of `random_policy`."""
    wild = random_policy(workflow, seed)
    ids = [s.id for s in workflow.steps]

    def policy(done, history, consecutive, turns):
        if random.Random(f"{seed}/{done}/{history}/{consecutive}/{turns}").random() < 1 / 3:
            return wild(done, history, consecutive, turns)
        pending = [i for i in range(len(ids)) if not done >> i & 1]
        return ("call", pending[0]) if pending else ("finish", -1)

    return policy


@pytest.mark.anyio
async def test_bound_iii_policies_reach_on_the_real_server_what_the_mdp_predicts():
    """The MDP is the server's model: its exact value of a policy is the policy's rate on the server."""
    plan = DEFAULT
    tasks = [t for t in full_tasks()[7::97] if t.constraints.max_turns <= 14][:8]
    server = ResiliServer(SUITE, plan, seed=0)
    lib = resilibench_library()
    predicted, measured = [], []
    async with Client(server.mcp) as client:
        for task in tasks:
            budget = task.constraints.max_turns
            best = solve_optimal_workflow(task.workflow, lib, plan, budget).success_probability
            recipes = Recipes.of(task)
            for policy_seed in range(3):
                policy = _mostly_sensible(task.workflow, policy_seed)
                exact = policy_success_probability(task.workflow, plan, budget, policy)
                assert exact <= best + 1e-12
                for trial in range(8):
                    key, episode = f"{task.id}/{trial}", f"{task.id}-{policy_seed}-{trial}"
                    trace = await play_policy(server, task, 0, key, budget, policy, recipes, episode, client)
                    predicted.append(exact)
                    measured.append(SUITE.score(task, trace).label == "full")
    n = len(measured)
    se = math.sqrt(sum(p * (1 - p) for p in predicted)) / n
    rate, expected = sum(measured) / n, sum(predicted) / n
    assert 0.3 < expected < 0.9  # a regime where a wrong model would show
    assert abs(rate - expected) < 3 * se, (rate, expected, se)


@pytest.mark.anyio
async def test_the_dag_gate_refuses_a_step_until_its_predecessors_ran_on_the_tasks_data():
    """Hand case: reader → parser → transformer; the gate reads the scorer's own data-flow rule."""
    task = next(
        t
        for t in full_tasks()
        if [s.tool for s in t.workflow.steps][:3]
        == ["file_operations_reader", "data_processing_parser", "data_processing_transformer"]
    )
    reader, parser, transformer = task.workflow.steps[:3]
    server = ResiliServer(SUITE, ResiliBenchFaults(base_success=1.0, max_success=1.0), seed=0)
    meta = {"mcp-resili/episode": {"id": "g", "task": task.id}}
    recipes = Recipes.of(task)

    async def call(tool, arguments):
        result = await client.call_tool(tool, arguments, meta=meta)
        return result, server.take_events("g")[-1]

    async with Client(server.mcp) as client:
        # 1. The parser before the reader: refused, no draw, no ordinal spent.
        _, event = await call(parser.tool, recipes.wrong[parser.id])
        assert event.error_code == DEPENDENCY_NOT_MET and event.decision is None
        assert event.unmet_dependencies == ("file_operations_reader",)
        assert (
            "file_operations_reader" in event.result["message"] and "task's data" in event.result["message"]
        )
        _, read = await call(reader.tool, resolve_arguments(reader, task.inputs, {}))
        assert read.decision.ordinal == 0
        # 2. The parser on made-up content: it runs (a success), but it is not this task's data...
        _, made_up = await call(parser.tool, recipes.wrong[parser.id])
        assert not made_up.is_error and made_up.decision.ordinal == 0  # the refused call spent nothing
        # ...so the transformer is still refused, and says which step it waits for.
        _, event = await call(transformer.tool, recipes.wrong[transformer.id])
        assert event.error_code == DEPENDENCY_NOT_MET and event.unmet_dependencies == (
            "data_processing_parser",
        )
        # 3. The parser on the reader's output: now the transformer runs.
        _, parsed = await call(parser.tool, resolve_arguments(parser, task.inputs, {reader.id: read.result}))
        assert not parsed.is_error
        _, event = await call(transformer.tool, recipes.wrong[transformer.id])
        assert not event.is_error and event.decision.ordinal == 0
        # A tool outside the workflow is not gated by the task.
        filler = next(iter(recipes.fillers))
        _, event = await call(filler, recipes.fillers[filler])
        assert not event.is_error
    # Without a task there is no workflow: only declared dependencies gate (the parser has none).
    bare = ResiliServer(SUITE, ResiliBenchFaults(base_success=1.0, max_success=1.0), seed=0)
    async with Client(bare.mcp) as client:
        result = await client.call_tool(
            parser.tool, recipes.wrong[parser.id], meta={"mcp-resili/episode": "b"}
        )
        assert not result.is_error
        tools = (await client.list_tools()).tools
    # Every tool may now answer DEPENDENCY_NOT_MET (a task's workflow decides which), and says so.
    assert all(DEPENDENCY_NOT_MET in t.meta["mcp-resili/errors"] for t in tools if t.name in lib_names())


def lib_names():
    return {s.name for s in resilibench_library().specs}
