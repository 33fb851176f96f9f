import itertools
import json
import math
from pathlib import Path

import pytest

from mcp_resili.cli import main
from mcp_resili.registry.loader import get_suite
from mcp_resili.trace import ToolCallEvent, Trace, TraceHeader
from mcp_resili.workflow import (
    TOOL_RULES,
    AlertRule,
    Step,
    WorkflowGraph,
    compare,
    derive_thresholds,
    evaluate,
    load_workflow,
    match_steps,
    perturb,
    rules_from_fits,
    rules_with,
    sensitivity,
    workflow_from_task,
    workflow_from_trace,
)


def tool_chain(n, prefix="s"):
    steps = tuple(Step(id=f"{prefix}{i}", label=f"tool_{i}") for i in range(n))
    return WorkflowGraph(
        kind="tools", steps=steps, edges=tuple((a.id, b.id) for a, b in itertools.pairwise(steps))
    )


def test_compare_pairs_repeated_tools_by_order_and_raises_no_compression_alert(tmp_path, capsys):
    golden = tmp_path / "golden.json"
    golden.write_text(
        json.dumps(
            {
                "kind": "tools",
                "steps": [
                    {"id": "a", "label": "check_calendar"},
                    {"id": "b", "label": "book_meeting"},
                    {"id": "c", "label": "check_calendar"},
                ],
                "edges": [["a", "b"], ["b", "c"]],
            }
        )
    )
    candidate = tmp_path / "candidate.json"
    candidate.write_text(
        json.dumps(
            {
                "kind": "tools",
                "steps": [{"id": "x", "label": "book_meeting"}, {"id": "y", "label": "check_calendar"}],
            }
        )
    )
    # One of three steps is missing: that (and only that) is a regression.
    assert main(["compare", str(golden), str(candidate), "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["scores"]["chain_f1"] == 0.8
    assert verdict["scores"]["kendall_tau"] == 1.0
    assert verdict["threshold_set"] == "tools"
    assert verdict["alerts"] == ["missing_steps: chain_f1 = 0.8 < 0.85"]


def test_the_gate_tests_unrounded_scores_against_its_thresholds():
    """Chain F1 of one step found of two is 2/3 = 0.666667, which rounds to 0.6667 in reports."""
    golden, candidate = tool_chain(2), tool_chain(1)
    just_above = AlertRule("missing_steps", ("chain_f1",), 0.66667)  # above 2/3, below 0.6667
    assert evaluate(candidate, golden).to_dict()["chain_f1"] == 0.6667
    assert compare(golden, candidate, [just_above]).alerts == (
        "missing_steps: chain_f1 = 0.666667 < 0.66667",
    )
    assert compare(golden, candidate, [AlertRule("missing_steps", ("chain_f1",), 2 / 3)]).alerts == ()
    closer = AlertRule("missing_steps", ("chain_f1",), 0.6666667)  # equal to 6 digits: all digits shown
    assert compare(golden, candidate, [closer]).alerts == (
        "missing_steps: chain_f1 = 0.6666666666666666 < 0.6666667",
    )


def test_one_missing_step_in_ten_raises_no_alert_under_the_tool_thresholds():
    gold = tool_chain(10)
    verdicts = [compare(gold, perturb(gold, "missing", 0.1, seed)) for seed in range(50)]
    assert not any(v.regression for v in verdicts)
    # Under WorkflowPerturb's word-level thresholds, whole tool names trip the lexical alert.
    paper = [
        compare(gold, perturb(gold, "missing", 0.1, seed), rules_with({}, "paper")) for seed in range(50)
    ]
    assert any(a.startswith("description_changes") for v in paper for a in v.alerts)


@pytest.mark.parametrize("n", [5, 6, 7, 8, 10, 13])
@pytest.mark.parametrize("alpha", [0.1, 0.3, 0.5])
def test_compressing_k_steps_of_a_chain_gives_the_closed_form_tau(n, alpha):
    gold = tool_chain(n)
    k = max(1, math.ceil(n * alpha))
    variant = perturb(gold, "compressed", alpha, seed=n)
    # Every golden step stays aligned (n of them); the k merged-in steps lose their own position,
    # so only the (n − k) positioned ones form (concordant) pairs.
    assert evaluate(variant, gold).kendall_tau == pytest.approx((n - k) * (n - k - 1) / (n * (n - 1)))
    alerts = compare(gold, variant).alerts
    if alpha >= 0.3:
        assert any(a.startswith("compressed_steps: kendall_tau") for a in alerts)


# The next two need a corpus of many varied DAGs (ResiliBench's 40 default goldens, 3 to 10 steps, every
# task type); the tiny suite's six workflows are too few and too short for these statistics.
def test_every_severe_compression_of_the_default_resilibench_goldens_trips_the_tau_alert():
    goldens = [
        g
        for g in (workflow_from_task(t) for t in get_suite("resilibench").default_tasks)
        if len(g.steps) >= 5
    ]
    assert goldens
    for index, gold in enumerate(goldens):
        for alpha in (0.3, 0.5):
            verdict = compare(gold, perturb(gold, "compressed", alpha, index))
            assert any(a.startswith("compressed_steps") for a in verdict.alerts), (gold, verdict.scores)


def test_tau_falls_with_compression_level_and_its_sensitivity_is_positive():
    goldens = [workflow_from_task(t) for t in get_suite("resilibench").default_tasks]
    result = sensitivity(goldens, seed=0)
    tau = {alpha: result["compressed"]["means"][alpha]["kendall_tau"] for alpha in ("0.1", "0.3", "0.5")}
    assert tau["0.1"] > tau["0.3"] > tau["0.5"]
    assert result["compressed"]["delta"]["kendall_tau"] > 0.8
    # Deletions leave the survivors in order: τ does not move (the F1 scores do).
    assert result["missing"]["delta"]["kendall_tau"] == 0.0
    assert result["missing"]["delta"]["chain_f1"] > 0.3


def test_thresholds_derived_from_five_to_ten_step_chains_are_the_shipped_tool_rules():
    goldens = [tool_chain(n) for n in range(5, 11)]
    fits = derive_thresholds(goldens, seeds=range(3))
    by_metric = {(f.failure_mode, f.metric): f for f in fits}
    assert by_metric["missing_steps", "chain_f1"].balanced_accuracy == 1.0
    assert by_metric["compressed_steps", "kendall_tau"].balanced_accuracy == 1.0
    # Graph F1 (either definition) drops a lot for one missing step mid-chain, so no threshold that
    # passes 95% of single missing steps catches enough triple ones.
    assert by_metric["missing_steps", "graph_f1_lcc"].balanced_accuracy < 0.95
    assert by_metric["missing_steps", "graph_f1_mcs"].balanced_accuracy < 0.95
    assert ("description_changes", "bleu") not in by_metric  # tool workflows have no descriptions
    assert rules_from_fits(fits) == TOOL_RULES
    # Goldens below WorkflowPerturb's 5-step minimum give nothing to fit.
    assert derive_thresholds([tool_chain(4)], seeds=range(2)) == []


def test_threshold_sets_default_by_kind_and_overrides_are_validated():
    tools = tool_chain(4)
    text = WorkflowGraph(kind="text", steps=(Step(id="s0", label="open the ticket"),))
    assert compare(tools, tools).threshold_set == "tools"
    assert compare(text, text).threshold_set == "paper"
    assert compare(tools, tools, rules_with({}, "paper")).threshold_set == "paper"
    # Overriding a mode the tools set does not gate adds the paper's rule for it.
    verdict = compare(tools, tools, rules_with({"description_changes": 0.5}))
    assert AlertRule("description_changes", ("bleu", "gleu"), 0.5) in verdict.rules
    assert verdict.threshold_set == "tools (overridden)"
    for bad in ({"missing_steps": math.nan}, {"missing_steps": 1.5}, {"typo_mode": 0.5}):
        with pytest.raises(ValueError, match=r"missing_steps|typo_mode"):
            rules_with(bad)
    with pytest.raises(ValueError, match="threshold set"):
        rules_with({}, "strict")
    with pytest.raises(ValueError, match="Graph F1 definition"):
        compare(tools, tools, graph="biggest")


def test_compare_json_names_the_graph_definition_and_mcs_differs_on_an_edgeless_candidate():
    gold = tool_chain(4)
    edgeless = WorkflowGraph(kind="tools", steps=tool_chain(4, prefix="p").steps, edges=())
    lcc, mcs = compare(gold, edgeless), compare(gold, edgeless, graph="mcs")
    assert (lcc.scores.graph_f1, mcs.scores.graph_f1) == (0.25, 0.5)
    assert (lcc.to_dict()["graph_f1_definition"], mcs.to_dict()["graph_f1_definition"]) == ("lcc", "mcs")


def test_matching_arguments_pairs_only_calls_with_equal_arguments():
    header = TraceHeader(suite="tiny", task=None, episode="e", seed=0, fault_plan={}, fault_key="k")

    def trace(calls):
        return workflow_from_trace(
            Trace(
                header=header,
                events=tuple(
                    ToolCallEvent(episode="e", seq=i, tool=tool, arguments=args, is_error=False)
                    for i, (tool, args) in enumerate(calls)
                ),
            )
        )

    gold = trace([("search", {"q": "flights"}), ("book", {"id": 1}), ("search", {"q": "hotels"})])
    # The hotel search ran first: by name alone both searches pair in order; by arguments the
    # hotel search must pair with the third golden step, after book, so the order is wrong.
    cand = trace([("search", {"q": "hotels"}), ("book", {"id": 1}), ("search", {"q": "flights"})])
    assert evaluate(cand, gold).chain_f1 == 1.0
    strict = evaluate(cand, gold, match_arguments=True)
    # Pairs: hotels ↔ 3rd, book ↔ 2nd, flights ↔ 1st; longest consistent subsequence = 1 → 1/3.
    assert strict.matched == 3
    assert strict.chain_f1 == pytest.approx(1 / 3)
    assert strict.kendall_tau == -1.0
    # Golden steps without arguments (a task's DAG) pair by name whatever the candidate's arguments.
    bare = WorkflowGraph(
        kind="tools", steps=tuple(Step(id=f"g{i}", label=s.label) for i, s in enumerate(gold.steps))
    )
    assert evaluate(cand, bare, match_arguments=True).chain_f1 == 1.0


def test_the_calendar_example_pairs_the_repeated_tool_after_booking_and_passes():
    examples = Path(__file__).resolve().parents[1] / "examples" / "workflows"
    golden, run = load_workflow(examples / "calendar.json"), load_workflow(examples / "calendar_run.json")
    verdict = compare(golden, run)
    # check_calendar pairs with the confirming check after book_meeting, not the first one: the
    # three calls fit the DAG (send_invite and the check are parallel), one of four steps missing.
    assert match_steps(run, golden) == {"c1": "book", "c2": "notify", "c3": "confirm"}
    assert verdict.scores.chain_f1 == pytest.approx(6 / 7)
    assert verdict.scores.kendall_tau == 1.0
    assert not verdict.regression


def test_compressing_a_text_workflow_moves_tau_by_the_same_closed_form():
    golden = load_workflow(Path(__file__).resolve().parents[1] / "examples" / "workflows" / "golden.json")
    n = len(golden.steps)
    for alpha, seed in itertools.product((0.1, 0.3, 0.5), range(8)):
        k = max(1, math.ceil(n * alpha))
        variant = perturb(golden, "compressed", alpha, seed)
        # Merged descriptions ("a; b; c") cover their parts, however many, so every step stays aligned.
        assert evaluate(variant, golden).kendall_tau == pytest.approx((n - k) * (n - k - 1) / (n * (n - 1)))
        assert evaluate(perturb(golden, "missing", alpha, seed), golden).kendall_tau == 1.0


def test_compare_cli_takes_the_graph_definition_threshold_set_and_argument_matching(tmp_path, capsys):
    gold = tool_chain(4)
    edgeless = WorkflowGraph(kind="tools", steps=tool_chain(4, prefix="p").steps, edges=())
    golden, candidate = tmp_path / "g.json", tmp_path / "c.json"
    golden.write_text(gold.model_dump_json(), encoding="utf-8")
    candidate.write_text(edgeless.model_dump_json(), encoding="utf-8")
    for graph, expected in (("lcc", 0.25), ("mcs", 0.5)):
        main(["compare", str(golden), str(candidate), "--graph", graph, "--thresholds", "paper", "--json"])
        verdict = json.loads(capsys.readouterr().out)
        assert verdict["scores"]["graph_f1"] == expected
        assert (verdict["graph_f1_definition"], verdict["threshold_set"]) == (graph, "paper")
    assert main(["compare", str(golden), str(candidate), "--match-arguments", "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["threshold_set"] == "tools"
    with pytest.raises(SystemExit) as refused:
        main(["compare", str(golden), str(candidate), "--thresholds", "strict"])
    assert refused.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_an_undefined_tau_raises_no_alert_and_reads_undefined(tmp_path, capsys):
    """One step of a 6-step chain: τ has no pair to order (None), so only Chain F1 can alert."""
    gold = tool_chain(6)
    lone = WorkflowGraph(kind="tools", steps=(Step(id="p0", label="tool_2"),))
    verdict = compare(gold, lone)
    assert verdict.scores.kendall_tau is None
    assert [a.split(":")[0] for a in verdict.alerts] == ["missing_steps"]  # Chain F1 2/7 < 0.85
    assert verdict.to_dict()["scores"]["kendall_tau"] is None
    golden, candidate = tmp_path / "g.json", tmp_path / "c.json"
    golden.write_text(gold.model_dump_json(), encoding="utf-8")
    candidate.write_text(lone.model_dump_json(), encoding="utf-8")
    assert main(["compare", str(golden), str(candidate)]) == 1
    assert "kendall_tau  undefined (fewer than two aligned steps)" in capsys.readouterr().out


def test_the_paper_thresholds_on_a_tool_workflow_warn_in_one_line(tmp_path, capsys):
    gold = tool_chain(10)
    golden, candidate = tmp_path / "g.json", tmp_path / "c.json"
    golden.write_text(gold.model_dump_json(), encoding="utf-8")
    candidate.write_text(perturb(gold, "missing", 0.1, 3).model_dump_json(), encoding="utf-8")
    assert main(["compare", str(golden), str(candidate), "--thresholds", "paper"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "calibrated on text workflows" in err[0]
    assert main(["compare", str(golden), str(candidate)]) == 0  # the tools set: one missing call passes
    assert capsys.readouterr().err == ""


def test_thresholds_are_fitted_on_one_split_and_judged_on_the_other():
    from mcp_resili.workflow.calibration import check_rules, split_goldens

    goldens = [
        workflow_from_task(t) for t in get_suite("resilibench").tasks[:400] if len(t.workflow.steps) >= 5
    ]
    fitting, held_out = split_goldens(goldens)
    assert fitting and held_out
    # Equal workflows never fall on both sides.
    assert not {g.model_dump_json() for g in fitting} & {g.model_dump_json() for g in held_out}
    rules = rules_from_fits(derive_thresholds(fitting, seeds=range(2)))
    checks = {c.perturbation: c for c in check_rules(rules, held_out)}
    assert set(checks) == {"missing", "compressed"}  # no description changes for tool workflows
    for check in checks.values():
        assert check.mild == len(held_out) and check.severe == 2 * len(held_out)
        as_json = check.to_dict()
        low, high = as_json["false_alerts"]["ci95"]
        assert low <= check.false_alert_rate <= high and 0 < high < 0.1
    # The paper's set on the same held-out tool goldens: its BLEU/GLEU rule fires on one missing call.
    paper = {c.perturbation: c for c in check_rules(rules_with({}, "paper").resolve("tools")[1], held_out)}
    assert paper["missing"].false_alert_rate > 0.5
    assert paper["missing"].mild_alerts_by_mode["description_changes"] > paper["missing"].mild // 2


def test_calibrate_cli_reports_the_fitted_gate_out_of_sample(tmp_path, capsys):
    paths = []
    for n in range(5, 11):
        for shift in range(3):  # distinct structures, so both sides of the split get some
            gold = tool_chain(n, prefix=f"x{shift}")
            path = tmp_path / f"g{n}-{shift}.json"
            path.write_text(
                gold.model_copy(
                    update={
                        "steps": tuple(
                            s.model_copy(update={"label": f"{s.label}_{shift}"}) for s in gold.steps
                        )
                    }
                ).model_dump_json(),
                encoding="utf-8",
            )
            paths.append(str(path))
    assert main(["calibrate", *paths, "--derive-thresholds"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["checked_on"]["held_out"] is True
    assert out["fitted_on"]["workflows"] + out["checked_on"]["workflows"] == len(paths)
    assert out["checked_on"]["seeds"] == [1000]
    gate = {g["perturbation"]: g for g in out["gate"]}
    assert gate["missing"]["false_alerts"]["n"] == out["checked_on"]["workflows"]
    assert main(["calibrate", paths[0], "--derive-thresholds"]) == 2
    assert "no golden on one side of the split" in capsys.readouterr().err
    assert main(["calibrate", *paths, "--derive-thresholds", "--held-out", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["checked_on"]["held_out"] is False
