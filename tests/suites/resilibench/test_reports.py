"""Reports by model x variant x task type x complexity x flaw, and the CLI around the full suite."""

import collections
import json
import os
import subprocess
import sys

import pytest

from mcp_resili.cli import main
from mcp_resili.report import summarize, variant_flaw
from mcp_resili.report.summary import Rate
from mcp_resili.store import EpisodeRow
from mcp_resili.suites.resilibench import BOUND_COLUMNS


def row(task_id, variant, label, ii=True, iii=0.9, model="m"):
    components = {"bound_ii_full_possible": ii, "bound_iii_full_probability": iii}
    return EpisodeRow(
        run_id="r",
        episode_id=f"{model}/{variant}/{task_id}/{label}",
        model=model,
        faults="resilibench",
        variant=variant,
        task_id=task_id,
        trial=0,
        termination="completed",
        label=label,
        value={"full": 1.0, "partial": 0.6, "failure": 0.0}[label],
        score={"components": components},
        trace="",
    )


INFO = {
    "a": {"task_type": "basic_file_processing", "complexity": "easy"},
    "b": {"task_type": "advanced_computation_pipeline", "complexity": "hard"},
}


def test_summaries_break_down_by_task_type_complexity_flaw_and_severity():
    rows = [
        row("a", "baseline", "full"),
        row("b", "baseline", "failure", ii=False, iii=0.5),
        row("a", "flawed:missing_step:light", "partial"),
        row("b", "flawed:missing_step", "full"),
    ]
    groups = summarize(rows, ("task_type", "flaw", "severity"), INFO.__getitem__)
    keyed = {(g.variant, *g.breakdown.values()): g for g in groups}
    assert keyed[("baseline", "advanced_computation_pipeline", "none", "none")].levels["failure"].count == 1
    assert (
        keyed[("flawed:missing_step:light", "basic_file_processing", "missing_step", "light")]
        .levels["partial"]
        .count
        == 1
    )
    assert (
        keyed[("flawed:missing_step", "advanced_computation_pipeline", "missing_step", "severe")]
        .levels["full"]
        .count
        == 1
    )
    (base,) = [g for g in summarize(rows, columns=BOUND_COLUMNS) if g.variant == "baseline"]
    bound_ii = base.columns["bound_ii"]
    assert isinstance(bound_ii, Rate) and bound_ii.count == 1 and bound_ii.n == 2
    assert base.columns["bound_iii_mean"] == pytest.approx(0.7)
    assert json.loads(json.dumps(base.to_dict()))["bound_ii"]["rate"] == 0.5
    # The bounds are ResiliBench's columns: a summary that is not given them has none.
    (plain,) = [g for g in summarize(rows) if g.variant == "baseline"]
    assert plain.columns == {} and "bound_ii" not in plain.to_dict()


def test_unknown_breakdown_keys_are_rejected_by_name():
    with pytest.raises(ValueError, match="'colour'"):
        summarize([], ("colour",))


def test_variant_flaw_parsing():
    assert variant_flaw("optimal") == ("none", "none")
    assert variant_flaw("flawed:semantic_drift") == ("semantic_drift", "severe")
    assert variant_flaw("flawed:tool_misuse:medium:wrong_category") == ("tool_misuse", "medium")


def test_tasks_list_json_has_5040_tasks_with_table7_counts():
    proc = subprocess.run(
        [sys.executable, "-m", "mcp_resili", "tasks", "list", "--suite", "resilibench", "--json"],
        capture_output=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "160"},
    )
    assert proc.returncode == 0, proc.stderr
    tasks = json.loads(proc.stdout)
    assert len(tasks) == 5040
    assert {
        "instance_id",
        "task_type",
        "complexity",
        "required_tools",
        "description",
        "inputs",
        "expected_outputs",
        "constraints",
        "metadata",
    } <= set(tasks[0])
    assert collections.Counter(t["complexity"] for t in tasks) == {"easy": 1520, "medium": 2880, "hard": 640}


def test_run_and_report_break_down_a_stored_run(tmp_path, capsys):
    db = str(tmp_path / "r.db")
    argv = ["run", "--limit", "5", "--trials", "1", "--model", "scripted:oracle", "--db", db, "--json"]
    assert main([*argv, "--variant", "optimal", "--variant", "flawed:redundant_operations:light"]) == 0
    capsys.readouterr()
    assert main(["report", "--db", db, "--by", "flaw", "--by", "complexity", "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]
    assert {g["breakdown"]["flaw"] for g in groups} == {"none", "redundant_operations"}
    assert sum(g["episodes"] for g in groups) == 10
    assert all(g["bound_iii_mean"] is not None for g in groups)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--variant", "flawed:nope"],
        ["run", "--variant", "flawed:missing_step:extreme"],
        ["report", "--run", "nope"],
    ],
)
def test_bad_variants_and_runs_exit_2_naming_the_value(argv, capsys, tmp_path):
    db = tmp_path / "x.db"
    if argv[0] == "report":
        assert (
            main(
                [
                    "run",
                    "--limit",
                    "1",
                    "--trials",
                    "1",
                    "--model",
                    "scripted:oracle",
                    "--db",
                    str(db),
                    "--json",
                ]
            )
            == 0
        )
        capsys.readouterr()
    assert main([*argv, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mcp-resili: error:") and argv[-1].split(":")[-1] in err


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_toolmaze_fault_spec_on_resilibench_exits_2_before_anything_runs(command, capsys, tmp_path):
    db = tmp_path / "x.db"
    argv = [command, "--faults", "toolmaze:P1"] + (["--db", str(db)] if command == "run" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mcp-resili: error:") and "toolmaze:P1" in err and "'resilibench'" in err
    assert not db.exists()  # nothing ran, nothing was stored
