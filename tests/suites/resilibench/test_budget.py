"""One call budget for runner, scorer and bounds; no agent beats the bounds through the public interfaces."""

import json
import math

import pytest
from mcp import Client

from mcp_resili.agents.scripted import OracleAgent
from mcp_resili.cli import main
from mcp_resili.client.episode import EpisodeSpec
from mcp_resili.client.loop import play_episode
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.faults import CallContext, CallOutcome, parse_fault_spec
from mcp_resili.faults.rng import derive_rng
from mcp_resili.registry.loader import get_suite
from mcp_resili.scoring.termination import counts_against_budget
from mcp_resili.server.app import ResiliServer
from mcp_resili.suites.resilibench.agents import GreedyRetryAgent
from mcp_resili.suites.resilibench.faults import ResiliBenchFaults
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.optimal import (
    clairvoyant_full_success,
    episode_bound_ii,
    episode_bound_iii,
)
from mcp_resili.suites.resilibench.tasks import default_tasks
from mcp_resili.tasks import Workflow, WorkflowStep
from mcp_resili.trace import ModelTurnEvent, Trace
from suites.resilibench.gold import gold_run

SUITE = get_suite("resilibench")
HARSH = "resilibench:base=0.5"


@pytest.mark.anyio
async def test_the_runner_makes_no_call_past_the_budget_even_from_a_multi_call_turn(tmp_path):
    result = await execute(
        RunConfig(
            db=tmp_path / "r.db",
            models=("scripted:greedy-retry",),
            trials=1,
            tasks=tuple(t.id for t in default_tasks()[::8]),
            faults=(HARSH,),
        )
    )
    several = 0
    for row in result.rows:
        trace = Trace.from_lines(row.trace.splitlines())
        budget = SUITE.task(row.task_id).constraints.max_turns
        spent = sum(counts_against_budget(e) for e in trace.events)
        assert spent <= budget, row.task_id
        several += any(len(e.tool_calls) > 1 for e in trace.events if isinstance(e, ModelTurnEvent))
        if spent == budget and trace.end.termination not in ("completed", "too_many_errors", "loop"):
            assert trace.end.termination == "max_turns" and "call budget" in trace.end.detail
        assert row.score["components"]["calls_over_budget"] == 0
    assert several >= len(result.rows) // 2  # turns with several calls were common


def test_a_filler_call_that_cleans_the_history_can_rescue_an_episode_and_bound_ii_knows_it():
    """Fail, make an unrelated call that succeeds, then succeed: a draw in [0.72, 0.8) needs the filler."""
    plan = ResiliBenchFaults(history_window=1)
    reader = resilibench_library().spec("file_operations_reader")
    filler = resilibench_library().spec("utility_logger")
    workflow = Workflow(steps=(WorkflowStep(id="s1", tool=reader.name),))
    key = next(
        f"k{i}"
        for i in range(10_000)
        if derive_rng(0, f"k{i}", reader.name, 0).random() >= 0.8
        and 0.72 <= derive_rng(0, f"k{i}", reader.name, 1).random() < 0.8
        and derive_rng(0, f"k{i}", filler.name, 0).random() < 0.72
    )

    def decide(spec, ordinal, history):
        return plan.decide(
            CallContext(key, spec, ordinal, tuple(history)), derive_rng(0, key, spec.name, ordinal)
        )

    failed = CallOutcome(reader.name, False)
    assert decide(reader, 0, []).fired
    assert decide(reader, 1, [failed]).fired  # retrying straight away fails at p = 0.72
    assert not decide(filler, 0, [failed]).fired
    assert not decide(reader, 1, [failed, CallOutcome(filler.name, True)]).fired  # p back to 0.8
    assert clairvoyant_full_success(workflow, plan, 4, 0, key) is True  # fail, filler, read, finish
    assert clairvoyant_full_success(workflow, plan, 3, 0, key) is False


def test_remembered_bounds_are_told_apart_by_workflow_budget_and_fault_plan_however_they_are_named():
    """Bound (ii) keeps its last answers and bound (iii) its last plan: nothing may leak between cases.

    Worked by hand from the draws: the reader's first call fails (roll >= 0.8), the logger's succeeds
    (roll < 0.72); a one-step workflow needs its call and ``finish``, so two turns.
    """
    plan = ResiliBenchFaults(history_window=1)
    reader, logger = "file_operations_reader", "utility_logger"
    key = next(
        f"k{i}"
        for i in range(10_000)
        if derive_rng(0, f"k{i}", reader, 0).random() >= 0.8
        and derive_rng(0, f"k{i}", logger, 0).random() < 0.72
    )
    reading = Workflow(steps=(WorkflowStep(id="s1", tool=reader),))
    logging = Workflow(steps=(WorkflowStep(id="s1", tool=logger),))  # the same step id, another tool
    assert clairvoyant_full_success(reading, plan, 2, 0, key) is False  # its only draw in 2 turns fails
    assert clairvoyant_full_success(logging, plan, 2, 0, key) is True
    assert clairvoyant_full_success(reading, plan, 2, 0, key) is False  # asked again: still its own
    assert clairvoyant_full_success(reading, plan, 2, 1, key) is clairvoyant_full_success(
        reading, plan, 2, 1, key
    )
    task = SUITE.task(default_tasks()[0].id).model_copy(update={"workflow": reading})
    fault_plan = plan.to_dict()
    assert episode_bound_ii(task, fault_plan, 0, key, 2) is False
    fault_plan.clear()
    fault_plan["kind"] = "none"  # the same dict, now no faults: one call and finish fit in 2 turns
    assert episode_bound_ii(task, fault_plan, 0, key, 2) is True
    assert episode_bound_iii(task, fault_plan, 2) == 1.0
    assert episode_bound_iii(task, plan.to_dict(), 1) == 0.0  # no room for the call and finish


def _impossible_episodes(plan, count):
    """(task, fault key) pairs where bound (ii) says full success was impossible."""
    found = []
    for task in default_tasks():
        for trial in range(20):
            key = f"{task.id}/{trial}"
            if episode_bound_ii(task, plan.to_dict(), 0, key) is False:
                found.append((task, key))
                break
        if len(found) == count:
            return found
    raise AssertionError("no impossible episode found")


@pytest.mark.anyio
@pytest.mark.parametrize("agent", [OracleAgent(), GreedyRetryAgent()], ids=["retry", "greedy-multi-call"])
async def test_an_outside_agent_that_ignores_the_budget_never_scores_full_where_bound_ii_says_impossible(
    agent, tmp_path, capsys
):
    """serve (with a trace dir) + an outside MCP client + `mcp-resili score`: the public interfaces."""
    plan = parse_fault_spec(HARSH, SUITE.spec_scope)
    server = ResiliServer(SUITE, plan, trace_dir=tmp_path)
    episodes = _impossible_episodes(plan, 3)
    async with Client(server.mcp) as client:
        tools = (await client.list_tools()).tools
        for n, (task, key) in enumerate(episodes):
            # The agent's own loop allows 60 calls and never stops on failures: only the scorer holds it.
            spec = EpisodeSpec(f"x{n}", key, 0, task, SUITE.prompt(task, "baseline"), max_turns=60)
            await play_episode(client, agent, spec, tools)
    completed = 0
    for n in range(len(episodes)):
        path = tmp_path / f"x{n}.jsonl"
        trace = Trace.read(path)
        completed += trace.finish is not None and trace.finish.status == "completed"
        assert main(["score", str(path)]) == 0
        scored = json.loads(capsys.readouterr().out)
        assert scored["components"]["bound_ii_full_possible"] is False
        assert scored["label"] != "full", scored["reasons"]
    assert completed  # given more calls than the budget, the agent did get through


@pytest.mark.anyio
async def test_a_fabricated_argument_never_earns_full_through_serve_and_score(tmp_path, capsys):
    """The world refuses what it can check; the scorer catches a payload the world cannot check."""
    task = next(t for t in default_tasks() if "file_operations_compressor" in t.required_tools)
    server = ResiliServer(SUITE, parse_fault_spec("none", SUITE.spec_scope), trace_dir=tmp_path)
    meta = {"mcp-resili/episode": {"id": "fab", "task": task.id}}
    async with Client(server.mcp) as client:
        for gold in gold_run(task):
            arguments = gold.arguments
            if gold.tool == "file_operations_compressor":
                arguments = {"data": {"records": [{"id": 1, "name": "made", "category": "up", "value": 1}]}}
            result = await client.call_tool(gold.tool, arguments, meta=meta)
            assert not result.is_error  # the fabricated payload is schema-valid and not empty
        await client.call_tool("finish", {"status": "completed", "summary": "done"}, meta=meta)
    assert main(["score", str(tmp_path / "fab.jsonl")]) == 0
    scored = json.loads(capsys.readouterr().out)
    compressor = next(s.id for s in task.workflow.steps if s.tool == "file_operations_compressor")
    assert scored["label"] != "full" and compressor in scored["components"]["steps_on_wrong_data"].split(",")


@pytest.mark.anyio
async def test_scripted_agents_stay_within_bound_iii_and_never_beat_bound_ii(tmp_path):
    """A small version of bench/resilibench_bounds.py: oracle, naive, greedy and the plan-follower."""
    models = ("scripted:oracle", "scripted:naive", "scripted:greedy-retry", "scripted:plan-follower")
    result = await execute(
        RunConfig(
            db=tmp_path / "r.db",
            models=models,
            faults=("resilibench:base=0.6",),
            variants=("optimal",),
            tasks=tuple(t.id for t in default_tasks()[::4]),
            trials=1,
            seed=3,
            max_turns=10,
        )
    )
    for row in result.rows:
        if row.score["components"]["bound_ii_full_possible"] is False:
            assert row.label != "full", (row.model, row.task_id)
    for model in models:
        rows = [r for r in result.rows if r.model == model]
        bounds = [r.score["components"]["bound_iii_full_probability"] for r in rows]
        measured = sum(r.label == "full" for r in rows) / len(rows)
        se = math.sqrt(sum(p * (1 - p) for p in bounds)) / len(rows)
        assert measured <= sum(bounds) / len(bounds) + 3 * se, model


async def _serve_and_play(tmp_path, name, serve_args, episodes):
    """Play ``episodes`` (meta, calls) against `mcp-resili serve` over stdio; return its stderr."""
    from mcp.client.stdio import stdio_client
    from servers import stdio_parameters

    errlog = tmp_path / f"{name}.stderr"
    with errlog.open("w") as err:
        transport = stdio_client(stdio_parameters("--suite", "resilibench", *serve_args), errlog=err)
        async with Client(transport) as client:
            for meta, calls in episodes:
                for tool, arguments in calls:
                    await client.call_tool(tool, arguments, meta=meta)
    return errlog.read_text()


@pytest.mark.anyio
async def test_serve_max_turns_is_recorded_and_score_max_turns_applies_a_budget(tmp_path, capsys):
    """An outside agent's trace scored under the paper's 10 calls, set on the server or on `score`;
    and a faulted server without --trial says once that an episode plays trial 0 by default."""
    task = next(t for t in default_tasks() if len(t.workflow.steps) == 8)
    assert task.constraints.max_turns == 16
    # Three refused calls, the eight steps and finish: 12 calls, full under 16 but not under 10.
    calls = [("no_such_tool", {})] * 3 + [(g.tool, g.arguments) for g in gold_run(task)]
    calls.append(("finish", {"status": "completed", "summary": "done"}))
    named = {"mcp-resili/episode": {"id": "e1", "task": task.id, "trial": 0}}
    # Episodes of two other tasks that name no trial: each is its task's first, so plays trial 0.
    others = [t for t in default_tasks() if t.id != task.id][:2]
    unnamed = [
        (
            {"mcp-resili/episode": {"id": f"d{n}", "task": t.id}},
            [(gold_run(t)[0].tool, gold_run(t)[0].arguments)],
        )
        for n, t in enumerate(others)
    ]
    serve = ("--faults", "resilibench:base=1,max=1", "--trace-dir", str(tmp_path), "--max-turns", "10")
    stderr = await _serve_and_play(tmp_path, "serve", serve, [(named, calls), *unnamed])
    path = tmp_path / "e1.jsonl"
    assert Trace.read(path).header.max_turns == 10
    for extra, budget, label in (((), 10, "partial"), (("--max-turns", "16"), 16, "full")):
        assert main(["score", str(path), *extra]) == 0
        scored = json.loads(capsys.readouterr().out)
        assert scored["components"]["budget"] == budget and scored["label"] == label, scored["reasons"]
        assert scored["components"]["calls_over_budget"] == (2 if budget == 10 else 0)
    assert main(["score", str(path), "--max-turns", "0"]) == 2
    assert "--max-turns must be at least 1, got 0" in capsys.readouterr().err
    # The named trial said nothing; the first unnamed one did, in one line, and only once.
    lines = [line for line in stderr.splitlines() if "plays trial 0" in line]
    assert len(lines) == 1 and "'d0'" in lines[0] and "--trial" in lines[0], stderr


@pytest.mark.anyio
async def test_the_trial_0_warning_needs_faults_and_a_trial_nobody_named(capsys):
    task = default_tasks()[0]
    first = gold_run(task)[0]
    faulted = parse_fault_spec("resilibench", SUITE.spec_scope)
    for plan, trial, meta, warns in (
        (faulted, None, {"id": "a", "task": task.id}, True),
        (faulted, None, {"id": "b", "task": task.id, "trial": 0}, False),
        (faulted, 0, {"id": "c", "task": task.id}, False),
        (parse_fault_spec("none", SUITE.spec_scope), None, {"id": "d", "task": task.id}, False),
    ):
        server = ResiliServer(SUITE, plan, trial=trial, time_scale=0, warn_default_trial=True)
        async with Client(server.mcp) as client:
            await client.call_tool(first.tool, first.arguments, meta={"mcp-resili/episode": meta})
        assert ("plays trial 0" in capsys.readouterr().err) is warns, meta
    with pytest.raises(ValueError, match="max_turns must be at least 1"):
        ResiliServer(SUITE, faulted, max_turns=0)
