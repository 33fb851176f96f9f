"""Exact optimal workflows (bound iii), the clairvoyant bound (ii), and the oracle against both."""

import math

import pytest

from mcp_resili import get_suite
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.faults import CallOutcome, parse_fault_spec
from mcp_resili.suites.resilibench.faults import ResiliBenchFaults
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.optimal import (
    clairvoyant_full_success,
    first_pending_policy,
    policy_success_probability,
    random_policy,
    ready_probability,
    solve_optimal_workflow,
)
from mcp_resili.suites.resilibench.tasks import default_tasks, full_tasks
from mcp_resili.tasks import Workflow, WorkflowStep
from mcp_resili.trace import Trace

DEFAULT = ResiliBenchFaults.model_validate({})


def chain(*tools):
    steps = tuple(WorkflowStep(id=f"s{i}", tool=t) for i, t in enumerate(tools))
    edges = tuple((f"s{i}", f"s{i + 1}") for i in range(len(tools) - 1))
    return Workflow(steps=steps, edges=edges)


def test_dp_matches_hand_computed_probabilities_on_a_one_step_task():
    wf = chain("data_processing_filter")
    lib = resilibench_library()
    # Two turns: the call must succeed first time (0.8), then finish.
    assert solve_optimal_workflow(wf, lib, DEFAULT, 2).success_probability == pytest.approx(0.8)
    # Three turns: or fail once (0.2), then succeed at 0.8 * 0.9 (one failure in the window).
    assert solve_optimal_workflow(wf, lib, DEFAULT, 3).success_probability == pytest.approx(0.8 + 0.2 * 0.72)
    # One turn cannot hold a call and the finish.
    assert solve_optimal_workflow(wf, lib, DEFAULT, 1).success_probability == 0.0


def test_dp_knows_the_consecutive_failure_rule():
    wf = chain("data_processing_filter")
    lib = resilibench_library()
    long = solve_optimal_workflow(wf, lib, DEFAULT, 50).success_probability
    # Without the rule the success chance would tend to 1; five straight failures end the episode.
    p = [0.8, 0.72, 0.648, 0.5832, 0.5832]
    lost = math.prod(1 - x for x in p)
    assert long == pytest.approx(1 - lost)


def test_ready_probability_is_the_fault_plans_own_rule_once_dependencies_succeeded():
    spec = resilibench_library().spec("data_processing_transformer")
    for plan in (
        DEFAULT,
        ResiliBenchFaults(history_window=None, min_success=0.0),
        ResiliBenchFaults(base_success=0.6),
    ):
        for outcomes in ((), (False,), (True, False, False), (False, False, False, True)):
            history = [CallOutcome("data_processing_parser", True)] + [
                CallOutcome("x", ok) for ok in outcomes
            ]
            failures = sum(1 for h in (history if plan.history_window is None else history[-3:]) if not h.ok)
            assert ready_probability(plan, failures) == pytest.approx(plan.success_probability(spec, history))


def test_oracle_policy_is_dp_optimal_and_no_other_policy_beats_the_dp():
    tasks = default_tasks()[::3]
    plan = ResiliBenchFaults(base_success=0.6)
    lib = resilibench_library()
    for task in tasks:
        turns = task.constraints.max_turns
        best = solve_optimal_workflow(task.workflow, lib, plan, turns).success_probability
        oracle = policy_success_probability(task.workflow, plan, turns, first_pending_policy(task.workflow))
        assert oracle == pytest.approx(best, abs=1e-12), task.id
        for seed in range(5):
            other = policy_success_probability(task.workflow, plan, turns, random_policy(task.workflow, seed))
            assert other <= best + 1e-12, (task.id, seed)


def test_stored_optimum_is_the_dp_answer_for_the_default_plan():
    lib = resilibench_library()
    for task in full_tasks()[::1000]:
        fresh = solve_optimal_workflow(task.workflow, lib, DEFAULT, task.constraints.max_turns)
        assert fresh.to_metadata() == task.metadata["optimal_workflow"]


def test_clairvoyant_bound_is_at_least_the_dp_bound_on_average():
    plan = ResiliBenchFaults(base_success=0.6)
    tasks = default_tasks()[::2]
    ii = [
        clairvoyant_full_success(t.workflow, plan, t.constraints.max_turns, 3, f"{t.id}/{trial}")
        for t in tasks
        for trial in range(4)
    ]
    assert None not in ii
    lib = resilibench_library()
    iii = [
        solve_optimal_workflow(t.workflow, lib, plan, t.constraints.max_turns).success_probability
        for t in tasks
        for _ in range(4)
    ]
    assert sum(ii) / len(ii) >= sum(iii) / len(iii)
    assert not all(ii)  # base 0.6 makes some episodes hopeless even with foresight


@pytest.mark.anyio
async def test_oracle_full_rate_agrees_with_the_dp_prediction_within_monte_carlo_error(tmp_path):
    spec = "resilibench:base=0.6"
    plan = parse_fault_spec(spec, get_suite("resilibench").spec_scope)
    trials = 5
    result = await execute(
        RunConfig(db=tmp_path / "r.db", models=("scripted:oracle",), faults=(spec,), trials=trials, seed=11)
    )
    lib = resilibench_library()
    predicted = [
        solve_optimal_workflow(t.workflow, lib, plan, t.constraints.max_turns).success_probability
        for t in default_tasks()
    ]
    n = len(result.rows)
    assert n == 40 * trials
    measured = sum(r.label == "full" for r in result.rows) / n
    expected = sum(predicted) / len(predicted)
    # Episodes are independent Bernoulli(p_task); the variance of their mean is sum p(1-p) / n^2.
    se = math.sqrt(sum(p * (1 - p) for p in predicted) * trials) / n
    assert 0.3 < expected < 0.9  # a regime where the test can tell a wrong model apart
    assert abs(measured - expected) < 3 * se, (measured, expected, se)
    # The test can fail: the DP under the wrong fault model (the default base 0.8) is far off.
    wrong = [
        solve_optimal_workflow(t.workflow, lib, DEFAULT, t.constraints.max_turns).success_probability
        for t in default_tasks()
    ]
    assert abs(measured - sum(wrong) / len(wrong)) > 3 * se
    # Both bounds are recorded per episode, for the episode's own fault plan; (ii) never falls
    # below what the oracle achieved.
    by_task = dict(zip([t.id for t in default_tasks()], predicted, strict=True))
    for row in result.rows:
        assert row.score["components"]["bound_iii_full_probability"] == pytest.approx(
            by_task[row.task_id], abs=1e-6
        )
        possible = row.score["components"]["bound_ii_full_possible"]
        assert possible is not None
        if row.label == "full":
            assert possible is True


@pytest.mark.anyio
async def test_no_scripted_agent_beats_the_dp_prediction(tmp_path):
    spec = "resilibench:base=0.6"
    plan = parse_fault_spec(spec, get_suite("resilibench").spec_scope)
    models = ("scripted:naive", "scripted:plan-follower", "text:scripted:text-oracle")
    result = await execute(
        RunConfig(
            db=tmp_path / "r.db", models=models, faults=(spec,), trials=1, seed=5, variants=("optimal",)
        )
    )
    lib = resilibench_library()
    predicted = [
        solve_optimal_workflow(t.workflow, lib, plan, t.constraints.max_turns).success_probability
        for t in default_tasks()
    ]
    expected = sum(predicted) / len(predicted)
    for model in models:
        rows = [r for r in result.rows if r.model == model]
        se = math.sqrt(sum(p * (1 - p) for p in predicted)) / len(rows)
        measured = sum(r.label == "full" for r in rows) / len(rows)
        assert measured <= expected + 3 * se, (model, measured, expected)


@pytest.mark.anyio
async def test_the_papers_10_turn_budget_lowers_bound_iii_and_is_recorded(tmp_path):
    long = [t.id for t in default_tasks() if len(t.workflow.steps) >= 8][:4]
    assert long
    result = await execute(
        RunConfig(
            db=tmp_path / "r.db", models=("scripted:oracle",), tasks=tuple(long), trials=2, max_turns=10
        )
    )
    lib = resilibench_library()
    for row in result.rows:
        task = next(t for t in default_tasks() if t.id == row.task_id)
        trace = Trace.from_lines(row.trace.splitlines())
        assert trace.header.max_turns == 10 and trace.end.turns <= 10
        bound = row.score["components"]["bound_iii_full_probability"]
        assert bound == pytest.approx(
            solve_optimal_workflow(task.workflow, lib, DEFAULT, 10).success_probability, abs=1e-6
        )
        assert bound < task.metadata["optimal_workflow"]["success_probability"]


@pytest.mark.anyio
async def test_bad_turn_budgets_are_refused(tmp_path):
    from mcp_resili.client.runner import RunConfigError

    with pytest.raises(RunConfigError, match=r"max-turns must be at least 1, got 0"):
        await execute(RunConfig(db=tmp_path / "r.db", max_turns=0))
    assert not (tmp_path / "r.db").exists()


def plain_clairvoyant(workflow, faults, max_turns, seed, fault_key):
    """Bound (ii) by its definition: every move the model allows, tried in full (no pruning but a memo).

    A move takes a turn: a ready step's call that succeeds when its draw is under the odds, a filler
    success, or burning a failing draw (at most four in a row); finishing takes the last turn.
    """
    from mcp_resili.faults.rng import derive_rng
    from mcp_resili.suites.resilibench.stop_rules import CONSECUTIVE_FAILURES

    ids = [s.id for s in workflow.steps]
    preds = {b: {a for a, c in workflow.edges if c == b} for b in ids}
    tool = {s.id: s.tool for s in workflow.steps}
    window = faults.history_window

    def odds(history):
        failures = sum(1 for ok in history if not ok) if window is not None else history
        return ready_probability(faults, failures)

    def push(history, ok):
        return (*history, ok)[-window:] if window is not None else history + (0 if ok else 1)

    memo = {}

    def feasible(done, ordinals, history, streak, turns):
        if len(done) == len(ids):
            return turns >= 1
        if turns <= len(ids) - len(done):
            return False
        key = (done, ordinals, history, streak, turns)
        if key not in memo:
            memo[key] = False  # no cycle: every move takes a turn
            p, ready = odds(history), [s for s in ids if s not in done and preds[s] <= done]
            draw = {s: derive_rng(seed, fault_key, tool[s], dict(ordinals)[s]).random() for s in ready}
            moves = [(done | {s}, ordinals, push(history, True), 0) for s in ready if draw[s] < p]
            moves.append((done, ordinals, push(history, True), 0))
            if streak + 1 < CONSECUTIVE_FAILURES:
                moves += [
                    (done, tuple((t, k + (t == s)) for t, k in ordinals), push(history, False), streak + 1)
                    for s in ready
                    if draw[s] >= p
                ]
            memo[key] = any(feasible(*move, turns - 1) for move in moves)
        return memo[key]

    start = () if window is not None else 0
    return feasible(frozenset(), tuple((s, 0) for s in ids), start, 0, max_turns)


@pytest.mark.parametrize(
    "plan",
    [DEFAULT, ResiliBenchFaults(base_success=0.5), ResiliBenchFaults(base_success=0.6, history_window=None)],
    ids=["default", "harsh", "whole-history"],
)
def test_the_clairvoyant_search_answers_as_its_definition(plan):
    """The pruned search (draws on demand, turns a state fell short with) answers as the definition."""
    tasks = full_tasks()[::280]  # 18 tasks spread over the suite
    answers = []
    for t in tasks:
        for trial in range(3):
            for turns in (t.constraints.max_turns, len(t.workflow.steps) + 3):
                key = f"{t.id}/{trial}"
                expected = plain_clairvoyant(t.workflow, plan, turns, 5, key)
                assert clairvoyant_full_success(t.workflow, plan, turns, 5, key) is expected, (
                    t.id,
                    trial,
                    turns,
                )
                answers.append(expected)
    assert any(answers) and not all(answers)  # both answers occur: the comparison means something
