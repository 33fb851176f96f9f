"""Every comparison says how big a difference it can see, and degradation is a paired result."""

import json

import pytest

from mcp_resili.cli import main
from mcp_resili.registry.loader import find_suite
from mcp_resili.report.compare import load_comparison
from mcp_resili.report.degradation import BaselineError, choose_baseline, degradation
from mcp_resili.report.html import render_html
from mcp_resili.store import EpisodeRow, Store


def run(capsys, *argv):
    status = main(["run", *argv])
    out = capsys.readouterr()
    assert status == 0, out.err
    return out


def run_ids(db):
    store = Store(db, read_only=True)
    try:
        return sorted(store.run_ids(), key=lambda run_id: store.require_run(run_id).created_at)
    finally:
        store.close()


@pytest.fixture(scope="module")
def degraded_run(tmp_path_factory):
    """oracle and naive under none and resilibench, 20 tasks × 3 trials, as the CLI prints it."""
    db = tmp_path_factory.mktemp("degr") / "d.db"
    capture = pytest.CaptureFixture  # noqa: F841 (the module fixture runs main directly)
    argv = [
        "run",
        "--model",
        "scripted:oracle",
        "--model",
        "scripted:naive",
        "--faults",
        "none",
        "--faults",
        "resilibench",
        "--limit",
        "20",
        "--trials",
        "3",
        "--db",
        str(db),
    ]
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(argv) == 0
    return db, out.getvalue()


def test_a_run_with_two_fault_specs_prints_each_models_paired_drop_and_who_degrades_more(degraded_run):
    _, printed = degraded_run
    text = " ".join(printed.split())  # rich wraps long lines
    assert "Degradation (baseline none):" in text
    for model in ("scripted:oracle", "scripted:naive"):
        assert f"{model} under resilibench: full success drops +" in text
    # The naive agent's drop exceeds the oracle's far beyond the noise.
    assert "Under resilibench, scripted:naive degrades more than scripted:oracle in full success" in text
    assert "beyond the noise (floor" in text
    assert "Drop from the baseline, per model" in printed


def test_degradation_in_json_pairs_by_task_and_trial_and_counts_by_hand(degraded_run, capsys):
    db, _ = degraded_run
    assert main(["report", "--db", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    result = data["degradation"]
    assert result == data["sections"]["degradation"] and result["baseline"] == "none"
    store = Store(db, read_only=True)
    rows = store.episodes(data["run_id"])
    store.close()
    full = {(r.model, r.faults, r.task_id, r.trial): r.label == "full" for r in rows}
    for drop in result["drops"]:
        model = drop["model"]
        keys = [(t, k) for (m, f, t, k) in full if m == model and f == "none"]
        by_hand = sum(
            full[(model, "none", t, k)] - full[(model, "resilibench", t, k)] for t, k in keys
        ) / len(keys)
        metric = drop["metrics"]["full"]
        assert drop["pairs"] == 60 and drop["tasks"] == 20
        assert metric["drop"] == pytest.approx(by_hand, abs=1e-4)
        assert metric["ci95"][0] <= metric["drop"] <= metric["ci95"][1] and metric["mde"] > 0
    (difference,) = result["differences"]
    assert (difference["model_a"], difference["model_b"]) == ("scripted:oracle", "scripted:naive")
    did = difference["metrics"]["full"]
    assert did["delta"] > 3 * did["mde"] and did["beyond_noise"] is True
    drops = {d["model"]: d["metrics"]["full"]["drop"] for d in result["drops"]}
    assert did["delta"] == pytest.approx(drops["scripted:naive"] - drops["scripted:oracle"], abs=1e-4)


def test_oracle_against_naive_is_a_difference_far_above_the_floor(degraded_run, capsys):
    db, _ = degraded_run
    assert main(["report", "--db", str(db), "--json"]) == 0
    pairs = json.loads(capsys.readouterr().out)["sections"]["paired"]["pairs"]
    faulted = next(p for p in pairs if p["faults"] == "resilibench")
    full = faulted["metrics"]["full"]
    assert full["verdict"] == "beyond the noise" and abs(full["delta"]) > 4 * full["mde"]
    assert full["p_value"] > 0 and faulted["p_value"] == full["p_value"]  # never rounded to 0
    parts = full["components"]["shares"]
    assert sum(parts.values()) == pytest.approx(1.0, abs=1e-3)
    clean = next(p for p in pairs if p["faults"] == "none")
    assert clean["metrics"]["full"]["verdict"] == "no difference: identical on every pair"
    # The terminal prints p below 0.001 as such.
    assert main(["report", "--db", str(db)]) == 0
    assert "< 0.001" in capsys.readouterr().out


def test_two_runs_of_one_agent_with_other_seeds_show_no_detectable_difference(tmp_path, capsys):
    db = tmp_path / "seeds.db"
    common = ["--model", "scripted:naive", "--limit", "30", "--first", "--trials", "2", "--db", str(db)]
    run(capsys, *common, "--seed", "1")
    run(capsys, *common, "--seed", "2")
    first, second = run_ids(db)
    assert main(["report", first, second, "--db", str(db), "--json"]) == 0
    (pair,) = json.loads(capsys.readouterr().out)["sections"]["paired-runs"]["pairs"]
    full = pair["metrics"]["full"]
    assert pair["same_seed"] is False and pair["pairs"] == 60 and pair["tasks"] == 30
    assert full["verdict"] == "no detectable difference (inside the noise floor)"
    assert abs(full["delta"]) < full["mde"] and full["ci95"][0] < 0 < full["ci95"][1]
    # Different seeds: the two sides met other fault draws, so nothing of the within-task variance
    # is shared (the fault-draw part is at most noise).
    assert full["components"]["shares"]["fault_draw"] < 0.2
    assert main(["report", first, second, "--db", str(db)]) == 0
    assert "no detectable difference" in " ".join(capsys.readouterr().out.split())


def test_two_runs_with_one_spec_each_are_paired_for_degradation_not_said_to_share_no_task(tmp_path, capsys):
    db = tmp_path / "two.db"
    common = ["--model", "scripted:oracle", "--model", "scripted:naive", "--limit", "12", "--trials", "2"]
    run(capsys, *common, "--faults", "none", "--db", str(db))
    run(capsys, *common, "--faults", "resilibench", "--db", str(db))
    clean, faulted = run_ids(db)
    report = load_comparison(db, [clean, faulted], find_suite)
    data = report.to_dict()
    assert "no task in common" not in json.dumps(data)
    notes = [p for p in data["sections"]["paired-runs"]["pairs"] if p["pairs"] == 0]
    assert notes and all("under other fault specs" in p["note"] for p in notes)
    result = data["degradation"]
    assert result["baseline"] == "none" and not result["left_out"]
    assert {d["model"] for d in result["drops"]} == {"scripted:oracle", "scripted:naive"}
    assert all(d["pairs"] == 24 for d in result["drops"])
    (difference,) = result["differences"]
    assert difference["model_b"] == "scripted:naive" and "degrades more" in difference["summary"]
    page = render_html(report)
    assert "Degradation under faults" in page and "Who degrades more" in page
    assert main(["report", clean, faulted, "--db", str(db)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "Degradation (baseline none):" in printed and "scripted:naive degrades more" in printed


def test_a_baseline_the_run_does_not_have_is_refused_before_anything_runs(tmp_path, capsys):
    db = tmp_path / "never.db"
    argv = ["run", "--faults", "none", "--faults", "resilibench", "--baseline", "lambda=0.2", "--db", str(db)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--baseline 'lambda=0.2'" in err
    assert not db.exists()


def row(model, faults, task, trial, label):
    return EpisodeRow(
        run_id="r",
        episode_id=f"{model}-{faults}-{task}-{trial}",
        model=model,
        faults=faults,
        variant="baseline",
        task_id=task,
        trial=trial,
        termination="completed",
        label=label,
        value=1.0 if label == "full" else 0.0,
        score={},
        trace="",
    )


def test_the_baseline_is_none_else_the_mildest_rung_else_the_best_measured_else_named():
    def rows(specs, rates):
        return [
            row("m", spec, f"t{t}", 0, "full" if t < 10 * rate else "failure")
            for spec, rate in zip(specs, rates, strict=True)
            for t in range(10)
        ]

    assert choose_baseline(rows(["resilibench", "none"], [0.5, 1.0]))[0] == "none"
    assert choose_baseline(rows(["lambda=0.3", "lambda=0.1"], [0.9, 0.2]))[0] == "lambda=0.1"  # by the ladder
    spec, why = choose_baseline(rows(["rules.toml", "other.toml"], [0.3, 0.8]))
    assert spec == "other.toml" and "as measured" in why
    assert choose_baseline(rows(["lambda=0.3", "lambda=0.1"], [0.9, 0.2]), "lambda=0.3")[0] == "lambda=0.3"
    with pytest.raises(BaselineError, match="not a fault spec"):
        choose_baseline(rows(["lambda=0.3", "lambda=0.1"], [0.9, 0.2]), "none")
    # One spec only: no degradation at all.
    assert degradation(rows(["none"], [1.0])) is None


def test_plan_size_from_an_assumption_or_from_a_pilot_run(degraded_run, capsys):
    db, _ = degraded_run
    assert main(["plan-size", "--effect", "0.05", "--json"]) == 0
    (assumed,) = json.loads(capsys.readouterr().out)["plans"]
    needed = {int(r): g for r, g in assumed["tasks_needed"].items()}
    assert list(needed) == [1, 2, 3, 5, 10] and needed[1] > needed[3] > needed[10]
    # By hand: variance of the difference 0.5, correlation 0.16, 3 trials: 2.8016² · (0.08 + 0.14) / 0.05².
    assert needed[3] in range(691, 695)
    (run_id,) = run_ids(db)
    assert main(["plan-size", "--effect", "0.1", run_id, "--db", str(db), "--trials", "3", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)["plans"]
    by_name = {p["comparison"]: p for p in plans}
    naive_drop = by_name["scripted:naive: drop under resilibench from none"]
    assert naive_drop["pilot_tasks"] == 20 and naive_drop["pilot_trials"] == 3
    # The pilot's own floor is what its size detects: planning for that size gives about that size.
    assert all(p["tasks_needed"]["3"] > 0 for p in plans)
    assert not any("(none, baseline)" in name for name in by_name)  # identical pairs: nothing to plan from
    assert main(["plan-size", "--effect", "0"]) == 2
    assert main(["plan-size", "--effect", "1.5"]) == 2
    assert capsys.readouterr().err.count("\n") == 2
