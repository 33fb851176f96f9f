import dataclasses
import json
import math
import random

import pytest
from mcp import Client

from mcp_resili.cli import main
from mcp_resili.constants import META_EPISODE
from mcp_resili.faults import ErrorFault, FaultRule, NoFaults, RuleFaults
from mcp_resili.faults.chaos import HardRateLimit, HighLatency, SchemaDrift, TransientTimeout
from mcp_resili.registry.loader import get_suite
from mcp_resili.scoring.passk import TaskTrials, gradients, pass_hat_k, pass_k, pass_k_curve, wilson
from mcp_resili.server.app import EpisodeRequest, ResiliServer
from mcp_resili.store import EpisodeRow
from mcp_resili.suites.reliabilitybench.model import details
from mcp_resili.suites.reliabilitybench.report import (
    fault_level,
    nominal_rate,
    passk_table,
    perturbation_level,
    summarize,
)
from mcp_resili.trace import Trace, TraceHeader

pytestmark = pytest.mark.anyio
SUITE = get_suite("reliabilitybench")


def task_of(pattern):
    return next(t for t in SUITE.tasks if t.task_type == pattern)


async def play(task, calls, plan=None):
    """Run ``calls`` through the server's pipeline as one episode; return its score."""
    server = ResiliServer(SUITE, plan or NoFaults(), seed=0, time_scale=0)
    episode = server.episode(EpisodeRequest(id="e", task=task.id))
    events = []
    for tool, arguments in calls:
        events.append(await server.pipeline.call(episode, tool, arguments))
    header = TraceHeader(suite=SUITE.name, task=task.id, episode="e", seed=0, fault_plan={}, fault_key="e")
    return SUITE.score(task, Trace(header=header, events=tuple(events)))


def gold_calls(task):
    """The gold workflow's calls with constant arguments (step bindings filled in by hand below)."""
    return [
        (s.tool, {k: b.value for k, b in s.arguments.items() if b.source == "constant"})
        for s in task.workflow.steps
    ]


# --- pass^k ----------------------------------------------------------------------------------------


def test_pass_hat_k_is_the_unbiased_estimator_on_hand_computed_cases():
    assert pass_hat_k(3, 5, 2) == pytest.approx(3 / 10)  # C(3,2)/C(5,2)
    assert pass_hat_k(4, 4, 3) == 1.0
    assert pass_hat_k(2, 4, 3) == 0.0
    assert pass_hat_k(1, 4, 1) == 0.25
    with pytest.raises(ValueError, match=r"k must be within 1\.\.2"):
        pass_hat_k(1, 2, 3)
    with pytest.raises(ValueError, match="3 of 2"):
        pass_hat_k(3, 2, 1)


def test_pass_k_counts_only_valid_trials_and_excludes_tasks_with_fewer_than_k():
    tasks = [
        TaskTrials("a", successes=3, valid=4, infrastructure_errors=1),
        TaskTrials("b", successes=1, valid=1, infrastructure_errors=4),
        TaskTrials("c", successes=0, valid=5),
    ]
    k1 = pass_k(tasks, 1)
    assert k1.value == pytest.approx((3 / 4 + 1 + 0) / 3) and k1.excluded == () and k1.n == 3
    k2 = pass_k(tasks, 2)
    assert k2.value == pytest.approx((math.comb(3, 2) / math.comb(4, 2) + 0) / 2)
    assert k2.excluded == ("b",) and k2.n == 2
    k5 = pass_k(tasks, 5)
    assert k5.value == 0.0 and k5.excluded == ("a", "b")


def test_a_pass_k_curve_averages_one_task_set_at_every_k():
    # b survived 1 of 5 trials: counted at k = 1 it would score 100% there (tau2-bench #493).
    tasks = [
        TaskTrials("a", successes=3, valid=5),
        TaskTrials("b", successes=1, valid=1, infrastructure_errors=4),
        TaskTrials("c", successes=5, valid=5),
    ]
    curve = pass_k_curve(tasks)
    assert [p.k for p in curve] == [1, 2, 3, 4, 5]
    assert all(p.n == 2 and p.excluded == ("b",) for p in curve)
    assert curve[0].value == pytest.approx((3 / 5 + 1) / 2)
    assert curve[1].value == pytest.approx((math.comb(3, 2) / math.comb(5, 2) + 1) / 2)
    assert all(p.low <= p.value <= p.high for p in curve)


def test_wilson_interval_of_a_mean_is_hand_computed_and_sane_at_the_edges():
    low, high = wilson(0.5, 100)
    assert (low, high) == pytest.approx((0.4038, 0.5962), abs=1e-4)
    assert wilson(1.0, 20)[1] == 1.0 and 0.8 < wilson(1.0, 20)[0] < 0.9  # never a zero-width interval
    assert wilson(0.3, 0) == (0.0, 1.0)


def row(task, trial, label, *, faults="lambda=0.0", variant="eps=0", model="m", architecture="react"):
    return EpisodeRow(
        run_id="r",
        episode_id=f"{model}/{faults}/{variant}/{task}/{trial}",
        model=model,
        faults=faults,
        variant=variant,
        task_id=task,
        trial=trial,
        termination="infrastructure_error" if label is None else "completed",
        label=label,
        value=None if label is None else float(label == "full"),
        score=None,
        trace="",
        architecture=architecture,
    )


def test_a_task_whose_every_trial_was_an_infrastructure_error_keeps_its_domain():
    """Review finding: such a task has no score to read its domain from, and landed in ``unknown``."""
    scheduling = [t.id for t in SUITE.tasks if details(t).domain == "scheduling"][:2]
    scored = dataclasses.replace(
        row(scheduling[0], 0, "full"), score={"components": {"domain": "scheduling", "tool_calls": 2}}
    )
    (cell,) = summarize([scored, row(scheduling[1], 0, None), row("not-a-task", 0, None)])["cells"]
    assert {d: v["tasks"] for d, v in cell["by_domain"].items()} == {"scheduling": 2, "unknown": 1}


def test_two_names_of_one_surface_point_are_listed_not_silently_overwritten():
    """Review finding: ``baseline`` and ``eps=0`` (both ε = 0) at λ = 0.3: the last one replaced the first.

    By hand: tasks a, b, 2 trials each; under ``baseline`` all pass (R = 1 at every k), under
    ``eps=0`` all fail. The point (0, 0.3) is the ``baseline`` cell (first in sort order), so R = 1.0,
    and the ``eps=0`` cell is listed off the surface with its reason.
    """
    rows = [
        row(task, trial, label, faults="lambda=0.3", variant=variant)
        for variant, label in (("baseline", "full"), ("eps=0", "failure"))
        for task in ("a", "b")
        for trial in (0, 1)
    ]
    summary = summarize(rows)
    (surface,) = summary["surfaces"]
    assert {(p["k"], p["eps"], p["lambda"], p["R"]) for p in surface["points"]} == {
        (1, 0.0, 0.3, 1.0),
        (2, 0.0, 0.3, 1.0),
    }
    assert surface["duplicate_cells"] == 1
    (left,) = summary["off_surface"]
    assert (left["variant"], left["faults"]) == ("eps=0", "lambda=0.3")
    assert left["reason"] == "same point (ε=0, λ=0.3) as faults 'lambda=0.3', variant 'baseline'"
    assert "1 cell(s) at an (ε, λ) point another cell already holds left off" in str(
        passk_table(summary).caption
    )


def test_summary_shows_infrastructure_errors_and_excludes_short_tasks_at_every_k():
    rows = [
        row("a", 0, "full"),
        row("a", 1, "failure"),
        row("a", 2, None),
        row("b", 0, "full"),
        row("b", 1, "full"),
        row("b", 2, "full"),
    ]
    (cell,) = summarize(rows)["cells"]
    assert cell["infrastructure_errors"] == 1 and cell["tasks_with_infrastructure_errors"] == ["a"]
    by_k = {p["k"]: p for p in cell["pass_k"]}
    assert [p["value"] for p in by_k.values()] == [1.0, 1.0, 1.0]  # only b has 3 valid trials
    assert all(p["n"] == 1 and p["excluded"] == 1 and p["excluded_tasks"] == ["a"] for p in by_k.values())
    assert by_k[1]["ci95"][0] < 1.0 == by_k[1]["ci95"][1]


def test_surface_volume_and_gradients_on_a_hand_computed_grid():
    rows = []
    # λ=0: both tasks pass both trials. λ=0.2: task a passes 1 of 2, b passes 2 of 2.
    for eps in ("eps=0", "eps=0.1"):
        for t in range(2):
            rows += [row("a", t, "full", variant=eps), row("b", t, "full", variant=eps)]
            rows += [row("a", t, "full" if t == 0 else "failure", faults="lambda=0.2", variant=eps)]
            rows += [row("b", t, "full", faults="lambda=0.2", variant=eps)]
    (surface,) = summarize(rows)["surfaces"]
    assert (surface["model"], surface["architecture"], surface["tasks"]) == ("m", "react", 2)
    points = {(p["k"], p["eps"], p["lambda"]): p for p in surface["points"]}
    assert points[(1, 0.0, 0.2)]["R"] == 0.75 and points[(2, 0.1, 0.2)]["R"] == 0.5
    assert points[(2, 0.0, 0.0)]["R"] == 1.0 and all(p["n"] == 2 for p in points.values())
    assert surface["volume"] == pytest.approx((4 * 1.0 + 2 * 0.75 + 2 * 0.5) / 8)
    assert surface["volume_n"] == 2 and surface["volume_ci95"][0] < surface["volume"] < 1.0
    assert surface["gradients"]["lambda_per_0.1"] == pytest.approx(((0.75 - 1) + (0.5 - 1)) / 2 / 2)
    assert surface["gradients"]["eps_per_0.1"] == 0.0
    assert surface["gradients"]["k_per_trial"] == pytest.approx((0 + (0.5 - 0.75)) / 2)
    assert "k = 1..2" in surface["volume_normalisation"]


def test_a_surface_uses_one_task_set_and_counts_what_each_cell_left_out():
    rows = [row("a", t, "full") for t in range(2)] + [row("b", t, "failure") for t in range(2)]
    rows += [row("a", 0, "full", faults="lambda=0.2"), row("a", 1, None, faults="lambda=0.2")]
    rows += [row("b", t, "full", faults="lambda=0.2") for t in range(2)]
    (surface,) = summarize(rows)["surfaces"]
    assert surface["tasks"] == 1  # a lacks a valid second trial at λ = 0.2: out everywhere
    assert {(e["lambda"], tuple(e["excluded_tasks"])) for e in surface["excluded"]} == {
        (0.0, ("a",)),
        (0.2, ("a",)),
    }
    points = {(p["k"], p["lambda"]): p["R"] for p in surface["points"]}
    assert points == {(1, 0.0): 0.0, (2, 0.0): 0.0, (1, 0.2): 1.0, (2, 0.2): 1.0}


def test_volume_needs_two_trials_and_says_so():
    (surface,) = summarize([row("a", 0, "full"), row("b", 0, "failure")])["surfaces"]
    assert surface["volume"] is None and "at least 2 trials" in surface["volume_note"]
    assert [p["R"] for p in surface["points"]] == [0.5]


def _simulated_volume(probabilities, trials, rng):
    """The summary's volume of one λ, ε cell whose tasks pass each trial with their probability."""
    rows = [
        row(f"t{i}", t, "full" if rng.random() < p else "failure")
        for i, p in enumerate(probabilities)
        for t in range(trials)
    ]
    (surface,) = summarize(rows)["surfaces"]
    return surface


def test_runs_with_different_trials_estimate_the_same_volume():
    rng = random.Random(14)
    probabilities = [rng.random() for _ in range(1000)]
    # V = mean over tasks of (p + p²) / 2, the mean of pass^1 and pass^2.
    truth = sum((p + p * p) / 2 for p in probabilities) / len(probabilities)
    two, four = (_simulated_volume(probabilities, n, rng) for n in (2, 4))
    for surface in (two, four):
        low, high = surface["volume_ci95"]
        assert low <= truth <= high and surface["volume_n"] == 1000
    assert abs(two["volume"] - four["volume"]) < 0.02
    # The mean over k = 1..trials (the old volume) would have fallen by ~0.1 with 4 trials.
    old_four = sum(p["R"] for p in four["points"]) / len(four["points"])
    assert four["volume"] - old_four > 0.08


def test_terminal_table_shows_pass_k_intervals_exclusions_and_volume():
    from rich.console import Console

    rows = [row("a", 0, "full"), row("a", 1, None), row("b", 0, "full"), row("b", 1, "failure")]
    rows += [row("c", 0, "full"), row("c", 1, "full")]
    console = Console(record=True, width=220)
    console.print(passk_table(summarize(rows)))
    text = console.export_text()
    assert "pass^2" in text and "n=2 −1⚑" in text and "0.750" in text  # b and c: (0.5 + 1) / 2
    assert "normalised surface volume: m · react: 0.625" in text  # ((0.5 + 1) / 2 + (0 + 1) / 2) / 2


def test_gradients_of_an_empty_surface_are_none():
    assert gradients({})["lambda_per_0.1"] is None


def test_grid_coordinates_are_read_from_specs_and_variants():
    assert (
        fault_level("lambda=0.3") == 0.3 and fault_level("none") == 0.0 and fault_level("resilibench") is None
    )
    assert perturbation_level("eps=0.2") == 0.2 and perturbation_level("baseline") == 0.0
    assert perturbation_level("mr=synonym") is None
    assert nominal_rate("lambda=0.3") == 0.275 and nominal_rate("lambda=0.2,only=SchemaDrift") == 0.175
    assert nominal_rate("none") == 0.0 and nominal_rate("rules.json") is None


# --- the end-state verifier ------------------------------------------------------------------------


async def test_gold_path_passes_and_doing_nothing_fails():
    task = task_of("travel_cheapest")
    assert (await play(task, gold_calls(task))).label == "full"
    nothing = await play(task, [])
    assert nothing.label == "failure" and any("reservations" in r for r in nothing.reasons)


async def test_any_path_to_the_right_end_state_passes():
    task = task_of("schedule_conflict")
    request = task.metadata["request"]["slots"]
    book = task.workflow.steps[-1].arguments
    calls = [
        ("list_meetings", {"start_date": request["date"], "end_date": request["date"]}),
        # The requested slot is taken: the tool's own failure changes nothing.
        ("book_meeting", {"date": request["date"], "time": request["time"], "topic": request["topic"]}),
        ("book_meeting", {k: b.value for k, b in book.items()}),
        ("check_calendar", {"date": request["date"]}),
    ]
    result = await play(task, calls)
    assert result.label == "full", result.reasons
    assert result.components["tool_calls"] == 4 and result.components["duplicate_writes"] == 0


async def test_a_stray_write_fails_the_predicate():
    task = task_of("travel_direct")
    other = next(
        f["id"]
        for f in task.metadata["initial_state"]["flights_db"]
        if f["id"] != task.metadata["request"]["slots"]["flight_id"]
    )
    result = await play(task, [*gold_calls(task), ("hold_flight", {"flight_id": other})])
    assert result.label == "failure" and any(other in r for r in result.reasons)


async def test_duplicate_write_after_a_hidden_success_is_caught():
    task = task_of("support_close")
    create, close = task.workflow.steps
    args = {k: b.value for k, b in create.arguments.items()}
    plan = RuleFaults(rules=(FaultRule(tool="create_ticket", calls=(1,), fault=HardRateLimit()),))
    calls = [
        ("create_ticket", args),  # ran, but the agent read a 429
        ("create_ticket", args),  # blind retry: a second ticket
        ("close_ticket", {"ticket_id": "T-1002", "resolution": close.arguments["resolution"].value}),
    ]
    result = await play(task, calls, plan)
    assert result.label == "failure"
    assert result.components["duplicate_writes"] == 1
    assert any(r.startswith("duplicate write: create_ticket(") for r in result.reasons)


async def test_a_write_hidden_by_a_response_side_fault_counts_and_a_request_side_one_does_not():
    task = task_of("schedule_book")
    (call,) = gold_calls(task)
    hidden = RuleFaults(rules=(FaultRule(tool="book_meeting", fault=HardRateLimit()),))
    assert (await play(task, [call], hidden)).label == "full"
    blocked = RuleFaults(rules=(FaultRule(tool="book_meeting", calls=(1,), fault=TransientTimeout()),))
    assert (await play(task, [call], blocked)).label == "failure"
    retried = await play(task, [call, call], blocked)
    assert retried.label == "full"
    assert retried.components["faults"] == 1 and retried.components["recovered_faults"] == 1


async def test_a_late_correct_result_is_a_harmless_fault_and_stays_out_of_the_recovery_rate():
    """Review finding: HighLatency faults (nothing to mend) were counted as never recovered.

    By hand: episode 1 meets a TransientTimeout, and its retry a HighLatency (harmless; the retry
    succeeded, so the timeout was recovered); episode 2 meets a TransientTimeout it never retries.
    Faults met 3, harmless 1, needing recovery 2, recovered 1: rate 1/2 (the old definition: 0/3).
    """
    task = task_of("schedule_book")
    (call,) = gold_calls(task)
    timeout_then_late = RuleFaults(
        rules=(
            FaultRule(tool="book_meeting", calls=(1,), fault=TransientTimeout()),
            FaultRule(tool="book_meeting", calls=(2,), fault=HighLatency()),
        )
    )
    first = await play(task, [call, call], timeout_then_late)
    assert first.label == "full"
    assert (first.components["faults"], first.components["harmless_faults"]) == (2, 1)
    assert first.components["recovered_faults"] == 1
    timeout = RuleFaults(rules=(FaultRule(tool="book_meeting", calls=(1,), fault=TransientTimeout()),))
    second = await play(task, [call], timeout)
    assert (second.components["faults"], second.components["harmless_faults"]) == (1, 0)
    assert second.components["recovered_faults"] == 0
    rows = [
        dataclasses.replace(row(task.id, n, s.label), score={"components": s.components})
        for n, s in enumerate((first, second))
    ]
    (cell,) = summarize(rows)["cells"]
    recovery = cell["recovery"]
    assert (recovery["faults_met"], recovery["harmless_faults"], recovery["faults_needing_recovery"]) == (
        3,
        1,
        2,
    )
    assert (recovery["recovered"], recovery["recovery_rate"]) == (1, 0.5)
    # Extra calls: 2 - 1 gold step in episode 1, none in episode 2, over 2 faults needing recovery.
    assert recovery["extra_calls_per_fault"] == 0.5


async def test_drifted_replies_still_replay_to_the_true_state():
    task = task_of("schedule_cancel")
    drift = RuleFaults(rules=(FaultRule(tool="*", fault=SchemaDrift()),))
    result = await play(task, gold_calls(task), drift)
    assert result.label == "full" and result.components["replay_consistent"] is True


async def test_declared_tool_errors_change_nothing():
    task = task_of("shop_return")
    plan = RuleFaults(
        rules=(FaultRule(tool="process_return", calls=(1,), fault=ErrorFault(code="NOT_FOUND")),)
    )
    result = await play(task, gold_calls(task), plan)
    assert result.label == "failure" and result.components["executed_calls"] == 1


async def test_a_trace_file_written_by_the_server_scores_from_the_cli(tmp_path, capsys):
    task = task_of("travel_direct")
    server = ResiliServer(SUITE, NoFaults(), seed=0, trace_dir=tmp_path, time_scale=0)
    async with Client(server.mcp) as client:
        for tool, arguments in gold_calls(task):
            await client.call_tool(tool, arguments, meta={META_EPISODE: {"id": "person-1", "task": task.id}})
    (path,) = tmp_path.glob("*.jsonl")
    assert main(["score", str(path)]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["label"] == "full" and scored["components"]["executed_calls"] == 2
