import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_suite import suite as tiny_suite

from mcp_resili.cli import main
from mcp_resili.registry.loader import get_suite
from mcp_resili.trace import ToolCallEvent, Trace, TraceHeader
from mcp_resili.workflow import (
    PerturbationError,
    Step,
    WorkflowGraph,
    bleu,
    chain_f1,
    compare,
    episode_workflow_scores,
    evaluate,
    gleu,
    graph_f1,
    kendall_tau,
    load_workflow,
    match_steps,
    perturb,
    sensitivity,
    workflow_from_task,
    workflow_graph,
)
from mcp_resili.workflow.model import WorkflowFileError


def chain(labels, kind="tools", prefix="s"):
    steps = tuple(Step(id=f"{prefix}{i}", label=label) for i, label in enumerate(labels))
    return WorkflowGraph(
        kind=kind, steps=steps, edges=tuple((a.id, b.id) for a, b in itertools.pairwise(steps))
    )


def graph(labels, edges, kind="tools", prefix="s"):
    steps = tuple(Step(id=f"{prefix}{i}", label=label) for i, label in enumerate(labels))
    return WorkflowGraph(
        kind=kind, steps=steps, edges=tuple((f"{prefix}{a}", f"{prefix}{b}") for a, b in edges)
    )


def sequence(labels):
    return WorkflowGraph(kind="tools", steps=tuple(Step(id=f"c{i}", label=t) for i, t in enumerate(labels)))


@pytest.mark.parametrize("n", [5, 6, 8, 10, 13])
@pytest.mark.parametrize("alpha", [0.1, 0.3, 0.5])
def test_removing_n_of_n_chain_steps_gives_the_closed_form_chain_f1(n, alpha):
    gold = chain([f"tool{i}" for i in range(n)])
    removed = max(1, math.ceil(n * alpha))
    variant = perturb(gold, "missing", alpha, seed=n)
    assert len(variant.steps) == n - removed
    assert chain_f1(variant, gold) == pytest.approx(2 * (n - removed) / (2 * n - removed))
    # As an order-only sequence (no reconnecting edges) the common induced subgraph has the same
    # closed form; WorFBench's connected component is at most the longest surviving run.
    executed = sequence(variant.labels())
    assert graph_f1(executed, gold, definition="mcs") == pytest.approx(2 * (n - removed) / (2 * n - removed))
    assert graph_f1(executed, gold) <= graph_f1(executed, gold, definition="mcs")
    # Deleting steps leaves the survivors in order: τ stays 1.
    assert kendall_tau(variant, gold) == 1.0
    # The default tool thresholds fail 30% or more missing steps (Chain F1 < 0.85) and pass 10%.
    verdict = compare(gold, variant)
    if alpha >= 0.3:
        assert verdict.alerts and all(a.startswith("missing_steps: chain_f1") for a in verdict.alerts)
    elif n >= 5:
        assert not verdict.regression


def test_chain_f1_takes_the_best_topological_order_of_a_dag():
    # a → {b, c} → d: both a,b,c,d and a,c,b,d are correct executions.
    gold = graph(["a", "b", "c", "d"], [(0, 1), (0, 2), (1, 3), (2, 3)])
    assert chain_f1(sequence(["a", "c", "b", "d"]), gold) == 1.0
    assert graph_f1(sequence(["a", "c", "b", "d"]), gold) == 1.0
    # d before b breaks b → d: the longest fitting subsequence has 3 steps.
    assert chain_f1(sequence(["a", "d", "c", "b"]), gold) == pytest.approx(0.75)
    # pairs (a,d) (a,c) (a,b) (c,b) concordant, (d,c) (d,b) discordant: τ = (4 − 2) / 6.
    assert kendall_tau(sequence(["a", "d", "c", "b"]), gold) == pytest.approx(2 / 6)


def test_nothing_matched_scores_zero_with_no_chain_length_floor():
    gold = chain(["a", "b", "c"])
    other = sequence(["x", "y"])
    scores = evaluate(other, gold)
    assert (scores.chain_f1, scores.graph_f1, scores.kendall_tau, scores.matched) == (0.0, 0.0, None, 0)


def test_graph_f1_maps_predicted_edges_through_the_matching():
    gold = graph(["a", "b", "c"], [(0, 1), (1, 2)])
    # Same graph, listed with other ids: comparing raw ids (the reference-code bug) would fail.
    same = WorkflowGraph(
        steps=(Step(id="p9", label="a"), Step(id="p1", label="b"), Step(id="p5", label="c")),
        edges=(("p9", "p1"), ("p1", "p5")),
    )
    assert graph_f1(same, gold) == 1.0
    assert graph_f1(same, gold, definition="mcs") == 1.0
    # An extra edge a → c: the induced subgraphs agree on at most 2 of the 3 steps (mcs), while the
    # connected component over shared edges ignores edges the golden lacks (lcc).
    extra = graph(["a", "b", "c"], [(0, 1), (1, 2), (0, 2)], prefix="p")
    assert graph_f1(extra, gold, definition="mcs") == pytest.approx(2 / 3)
    assert graph_f1(extra, gold, definition="lcc") == 1.0
    assert chain_f1(extra, gold) == 1.0
    with pytest.raises(ValueError, match="Graph F1 definition"):
        graph_f1(extra, gold, definition="largest")


def test_reversed_chain_has_tau_minus_one_and_one_swap_of_four_has_tau_two_thirds():
    gold = chain(["a", "b", "c", "d"])
    assert kendall_tau(sequence(["d", "c", "b", "a"]), gold) == -1.0
    assert kendall_tau(sequence(["a", "c", "b", "d"]), gold) == pytest.approx(4 / 6)
    assert chain_f1(sequence(["d", "c", "b", "a"]), gold) == pytest.approx(0.25)


def test_bleu_and_gleu_by_hand():
    ref = ["a", "b", "c", "d"]
    assert bleu(ref, ref) == gleu(ref, ref) == 1.0
    # hyp a b c: p1 = 3/3, p2 = 2/2, p3 = 1/1, p4 = ε 0.1/1; BP = exp(1 − 4/3).
    assert bleu(["a", "b", "c"], ref) == pytest.approx(math.exp(1 - 4 / 3) * 0.1**0.25)
    # GLEU: matches 3+2+1 = 6, hyp n-grams 6, ref n-grams 10 → min(1, 0.6).
    assert gleu(["a", "b", "c"], ref) == pytest.approx(0.6)
    assert bleu([], ref) == gleu([], ref) == 0.0
    # Short references use orders up to their length, so an identical 2-step workflow scores 1.
    assert bleu(["a", "b"], ["a", "b"]) == 1.0


def test_text_steps_match_paraphrases_offline_and_not_unrelated_steps():
    gold = chain(["Open the customer ticket", "Check the account status", "Send a reply email"], kind="text")
    pred = chain(["open customer tickets", "send reply by email"], kind="text", prefix="p")
    assert match_steps(pred, gold) == {"p0": "s0", "p1": "s2"}
    scores = evaluate(pred, gold)
    assert scores.chain_f1 == pytest.approx(2 * 2 / 5)
    assert scores.kendall_tau == 1.0


def test_perturbations_change_exactly_n_steps_and_are_seeded():
    labels = [f"Step {i}: open the data file and check it" for i in range(10)]
    gold = chain(labels, kind="text")
    for alpha, n in ((0.1, 1), (0.3, 3), (0.5, 5)):
        assert len(perturb(gold, "missing", alpha, 1).steps) == 10 - n
        assert len(perturb(gold, "compressed", alpha, 1).steps) == 10 - n
        described = perturb(gold, "description", alpha, 1)
        assert described.edges == gold.edges
        assert sum(a.label != b.label for a, b in zip(described.steps, gold.steps, strict=True)) == n
    assert perturb(gold, "compressed", 0.3, 7) == perturb(gold, "compressed", 0.3, 7)
    assert perturb(gold, "missing", 0.3, 7) != perturb(gold, "missing", 0.3, 8)
    with pytest.raises(PerturbationError):
        perturb(chain(["a"]), "missing", 0.5, 0)
    with pytest.raises(PerturbationError):
        perturb(chain(["a", "b", "c"]), "description", 0.3, 0)


def test_sensitivity_on_resilibench_goldens_is_positive_for_structural_metrics():
    # The default set (40 tasks, all five types) keeps this fast; the full 5,040 behave alike. A corpus
    # of many varied DAGs is what this measures: the tiny suite's six short workflows are too few.
    goldens = [workflow_from_task(t) for t in get_suite("resilibench").default_tasks]
    result = sensitivity(goldens, seed=0)
    assert result["missing"]["delta"]["chain_f1"] > 0.3
    assert result["compressed"]["delta"]["graph_f1"] > 0.3
    means = result["missing"]["means"]
    assert means["0.1"]["chain_f1"] > means["0.3"]["chain_f1"] > means["0.5"]["chain_f1"]
    assert result["description"]["delta"] is None  # tool workflows have no descriptions to reword


def test_an_oracle_like_trace_scores_one_against_its_task():
    task = tiny_suite().task("tiny-6")  # four steps, two branches
    header = TraceHeader(suite="tiny", task=task.id, episode="e", seed=0, fault_plan={}, fault_key="k")
    gold = workflow_from_task(task)
    calls = [
        ToolCallEvent(episode="e", seq=i, tool=s.label, arguments={}, is_error=False)
        for i, s in enumerate(gold.steps)
    ]
    failed = ToolCallEvent(episode="e", seq=99, tool=gold.steps[0].label, arguments={}, is_error=True)
    trace = Trace(header=header, events=(failed, *calls))
    scores = episode_workflow_scores(task, trace)
    assert scores.chain_f1 == scores.graph_f1 == scores.bleu == 1.0
    assert compare(gold, load_workflow_from(trace)).regression is False


def _executed(task_id, tools):
    header = TraceHeader(suite="toolmaze", task=task_id, episode="e", seed=0, fault_plan={}, fault_key="k")
    calls = [
        ToolCallEvent(episode="e", seq=i, tool=t, arguments={}, is_error=False) for i, t in enumerate(tools)
    ]
    return Trace(header=header, events=tuple(calls))


# C2_task_002: s* = news, CPSR, dividends, notify, tax, export (6 steps); its other valid path splits
# CPSR into compute_position_size then rebalance_portfolio (7 steps).
MAZE_TASK = "C2_task_002"
S_STAR = (
    "get_market_news",
    "compute_position_size_and_rebalance_portfolio",
    "project_dividend_income",
    "notify_advisor",
    "file_tax_report",
    "export_statement",
)
SPLIT = (
    "get_market_news",
    "compute_position_size",
    "rebalance_portfolio",
    "project_dividend_income",
    "notify_advisor",
    "file_tax_report",
    "export_statement",
)


@pytest.mark.parametrize(
    ("ran", "golden_steps", "chain"),
    [
        # The other valid path, exactly: 1.0 against it. Against s* alone it scored l = 5 of 7 run and
        # 6 golden: F1 = 2(5/7)(5/6)/(5/7 + 5/6) = 50/65.
        (SPLIT, 7, 1.0),
        # s* itself: 1.0 against s*; the other path would give 50/65.
        (S_STAR, 6, 1.0),
        # Stopped after the split steps: against s*, l = 1 (news), P = 1/3, R = 1/6, F1 = 2/9;
        # against the split path, l = 3, P = 1, R = 3/7, F1 = (6/7)/(10/7) = 0.6: that path is the one taken.
        (SPLIT[:3], 7, 0.6),
        # Nothing ran: 0 against both, and the tie goes to the reference s*.
        ((), 6, 0.0),
    ],
)
def test_a_maze_agent_is_scored_against_the_valid_path_it_took(ran, golden_steps, chain):
    task = get_suite("toolmaze").task(MAZE_TASK)
    assert task.valid_paths == (S_STAR, SPLIT)
    scores = episode_workflow_scores(task, _executed(MAZE_TASK, ran))
    assert scores.golden_steps == golden_steps
    assert scores.chain_f1 == pytest.approx(chain)
    # Every metric comes from that one path, none borrowed from the other.
    chosen = next(w for w in task.golden_workflows() if len(w.steps) == golden_steps)
    assert scores == evaluate(load_workflow_from(_executed(MAZE_TASK, ran)), workflow_graph(chosen))


def test_against_s_star_alone_the_other_valid_path_loses_credit():
    """The defect this guards against: one golden path made a right switch look like a wrong workflow."""
    task = get_suite("toolmaze").task(MAZE_TASK)
    alone = evaluate(load_workflow_from(_executed(MAZE_TASK, SPLIT)), workflow_from_task(task))
    assert alone.chain_f1 == pytest.approx(50 / 65)
    plain = tiny_suite().task("tiny-6")  # a task that names no alternatives has its one workflow
    assert plain.golden_workflows() == (plain.workflow,)


def load_workflow_from(trace):
    from mcp_resili.workflow import workflow_from_trace

    return workflow_from_trace(trace)


def write(path, workflow):
    path.write_text(workflow.model_dump_json())
    return path


def test_compare_exits_zero_unchanged_and_one_on_thirty_percent_missing_steps(tmp_path, capsys):
    gold = chain([f"Step {i}: process record batch {i}" for i in range(10)], kind="text")
    golden = write(tmp_path / "golden.json", gold)
    assert main(["compare", str(golden), str(golden)]) == 0
    assert "ok: no alert fired" in capsys.readouterr().out
    variant = write(tmp_path / "missing.json", perturb(gold, "missing", 0.3, seed=3))
    assert main(["compare", str(golden), str(variant), "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["regression"] is True
    assert any(a.startswith("missing_steps") for a in verdict["alerts"])


def test_compare_reads_trace_files_and_perturb_writes_loadable_workflows(tmp_path, capsys):
    gold = chain(["a", "b", "c", "d", "e", "f"])
    golden = write(tmp_path / "g.json", gold)
    assert main(["perturb", str(golden), "--type", "compressed", "--level", "0.5", "--seed", "1"]) == 0
    compressed = tmp_path / "c.json"
    compressed.write_text(capsys.readouterr().out)
    assert len(load_workflow(compressed).steps) == 3
    assert main(["compare", str(golden), str(compressed)]) == 1
    header = TraceHeader(suite="tiny", task=None, episode="e", seed=0, fault_plan={}, fault_key="k")
    events = [
        ToolCallEvent(episode="e", seq=i, tool=t, arguments={}, is_error=False)
        for i, t in enumerate("abcdef")
    ]
    trace_file = tmp_path / "t.jsonl"
    trace_file.write_text(Trace(header=header, events=tuple(events)).to_jsonl())
    assert main(["compare", str(golden), str(trace_file)]) == 0


def test_compare_rejects_bad_files_and_thresholds_with_exit_two(tmp_path, capsys):
    golden = write(tmp_path / "g.json", chain(["a", "b"]))
    bad = tmp_path / "bad.json"
    bad.write_text('{"steps": [{"id": "x", "label": "a"}], "edges": [["x", "nope"]]}')
    assert main(["compare", str(golden), str(bad)]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["compare", str(golden), str(golden), "--threshold", "typo_mode=0.5"]) == 2
    assert "typo_mode" in capsys.readouterr().err
    with pytest.raises(WorkflowFileError):
        load_workflow(tmp_path / "missing.json")
    text = write(tmp_path / "t.json", chain(["a", "b"], kind="text"))
    assert main(["compare", str(golden), str(text)]) == 2
    # A cycle is named as one; a DAG merely listed out of order is told to list its steps in order.
    steps = [{"id": i, "label": i} for i in "abc"]
    cycle = tmp_path / "cycle.json"
    cycle.write_text(json.dumps({"steps": steps, "edges": [["a", "b"], ["b", "c"], ["c", "a"]]}))
    assert main(["compare", str(golden), str(cycle)]) == 2
    assert "the edges form a cycle (a → b → c → a)" in capsys.readouterr().err
    unordered = tmp_path / "unordered.json"
    unordered.write_text(json.dumps({"steps": steps, "edges": [["b", "a"]]}))
    assert main(["compare", str(golden), str(unordered)]) == 2
    assert "edge ('b', 'a') goes backwards: list steps in a topological order" in capsys.readouterr().err


EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "workflows"


def test_compare_as_a_ci_step_on_the_example_golden(tmp_path):
    golden = EXAMPLES / "golden.json"

    def cli(*argv):
        return subprocess.run(
            [sys.executable, "-m", "mcp_resili", *argv], capture_output=True, text=True, timeout=60
        )

    assert cli("compare", str(golden), str(golden)).returncode == 0
    variant = cli("perturb", str(golden), "--type", "missing", "--level", "0.3", "--seed", "5")
    assert variant.returncode == 0
    missing = tmp_path / "missing.json"
    missing.write_text(variant.stdout)
    assert len(load_workflow(missing).steps) == 7
    gated = cli("compare", str(golden), str(missing))
    assert gated.returncode == 1 and "ALERT" in gated.stdout


def test_calibrate_reports_means_and_delta_per_perturbation(capsys):
    assert main(["calibrate", str(EXAMPLES / "golden.json"), str(EXAMPLES / "tools.json")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["workflows"] == 2
    assert result["missing"]["delta"]["chain_f1"] > 0
    # Only the text workflow can have its descriptions reworded.
    assert (result["description"]["workflows"], result["description"]["skipped"]) == (1, 1)
    assert (
        result["description"]["means"]["0.1"]["chain_f1"] >= result["description"]["means"]["0.5"]["chain_f1"]
    )
    assert main(["calibrate"]) == 2


def chain_file(path, n, prefix="t"):
    steps = [{"id": f"s{i}", "label": f"{prefix}{i}"} for i in range(n)]
    edges = [[f"s{i}", f"s{i + 1}"] for i in range(n - 1)]
    path.write_text(json.dumps({"kind": "tools", "steps": steps, "edges": edges}))
    return str(path)


def test_sensitivity_delta_averages_the_same_goldens_at_every_level(tmp_path, capsys):
    """By hand: compressing N = ceil(α·10) steps of a 10-step chain leaves τ = (10−N)(9−N)/90.

    α = 0.1, 0.3, 0.5 → N = 1, 3, 5 → τ = 72/90, 42/90, 20/90, so Δτ = 2.5·(72 − 20)/90 = 1.4444.
    A 5-step golden of one edge can be compressed at 10% but not at 50%: it must not enter the 10%
    mean alone (that mixed two populations: Δτ 1.1945).
    """
    ten = chain_file(tmp_path / "ten.json", 10)
    sparse = tmp_path / "sparse.json"
    steps = [{"id": f"s{i}", "label": f"u{i}"} for i in range(5)]
    sparse.write_text(json.dumps({"kind": "tools", "steps": steps, "edges": [["s0", "s1"]]}))
    assert main(["calibrate", ten, str(sparse)]) == 0
    compressed = json.loads(capsys.readouterr().out)["compressed"]
    assert (compressed["workflows"], compressed["skipped"], compressed["variants"]) == (1, 1, 1)
    tau = {a: compressed["means"][a]["kendall_tau"] for a in ("0.1", "0.3", "0.5")}
    assert tau == {"0.1": round(72 / 90, 4), "0.3": round(42 / 90, 4), "0.5": round(20 / 90, 4)}
    assert compressed["delta"]["kendall_tau"] == round(2.5 * 52 / 90, 4) == 1.4444


def test_calibrate_applies_min_steps_and_seeds_without_derive_thresholds(tmp_path, capsys):
    """One deletion in ten (α = 0.1): Chain F1 = 2·(9/9)·(9/10)/(9/9 + 9/10) = 18/19 = 0.9474."""
    short, ten = chain_file(tmp_path / "two.json", 2), chain_file(tmp_path / "ten.json", 10)
    assert main(["calibrate", short, ten, "--min-steps", "5"]) == 0
    missing = json.loads(capsys.readouterr().out)["missing"]
    assert (missing["workflows"], missing["skipped"], missing["variants"]) == (1, 1, 1)
    assert missing["means"]["0.1"]["chain_f1"] == round(18 / 19, 4)
    assert main(["calibrate", short, ten, "--min-steps", "5", "--seeds", "3", "--seed", "4"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["seed"], result["seeds"], result["min_steps"]) == (4, 3, 5)
    assert (result["missing"]["workflows"], result["missing"]["variants"]) == (1, 3)
    assert result["missing"]["means"]["0.1"]["chain_f1"] == round(18 / 19, 4)  # whichever step goes
    assert main(["calibrate", ten, "--seeds", "0"]) == 2
