"""Robustness curves for any suite: full success against a fault family's intensity, and its area."""

import contextlib
import io
import json

import pytest

from mcp_resili.cli import main
from mcp_resili.registry.loader import find_suite
from mcp_resili.report.build import load_report
from mcp_resili.report.html import render_html
from mcp_resili.report.ladder import LADDERS, mildest_by_ladder, spec_intensity
from mcp_resili.report.robustness import trapezoid


def test_the_normalised_area_by_hand():
    # x rescaled by 0.4: 0.25·(1 + 0.5)/2 + 0.25·(0.5 + 0.5)/2 + 0.5·(0.5 + 0)/2 = 0.1875 + 0.125 + 0.125.
    assert trapezoid([(0.0, 1.0), (0.1, 0.5), (0.2, 0.5), (0.4, 0.0)]) == pytest.approx(0.4375)
    assert trapezoid([(0.0, 1.0), (3.0, 1.0)]) == 1.0  # never fails: 1
    assert trapezoid([(2.0, 0.3)]) == 0.3


def test_specs_sit_on_their_familys_ladder():
    assert spec_intensity("none") == (None, 0.0)
    assert spec_intensity("resilibench") == ("resilibench", pytest.approx(0.2))
    assert spec_intensity("resilibench:base=0.6") == ("resilibench", pytest.approx(0.4))
    assert spec_intensity("lambda=0.3") == ("lambda", 0.3)
    assert spec_intensity("toolmaze:P3") == ("toolmaze", 3.0)
    assert spec_intensity("protocol:heavy") == ("protocol", 3.0)
    assert spec_intensity("protocol:light+resilibench") is None and spec_intensity("rules.toml") is None
    assert mildest_by_ladder(["lambda=0.3", "lambda=0.1"]) == "lambda=0.1"
    assert mildest_by_ladder(["lambda=0.3", "resilibench"]) is None  # two families: no common axis
    for ladder in LADDERS.values():  # every rung parses back onto its own ladder, in order
        assert [ladder.intensity(s) for s in ladder.specs] == list(ladder.intensities)


@pytest.fixture(scope="module")
def ladder_run(tmp_path_factory):
    """oracle (retries) and naive (never retries) up two ladders: ResiliBench's and λ."""
    db = tmp_path_factory.mktemp("ladder") / "l.db"
    argv = [
        "run",
        "--model",
        "scripted:oracle",
        "--model",
        "scripted:naive",
        "--ladder",
        "resilibench",
        "--ladder",
        "lambda",
        "--limit",
        "12",
        "--trials",
        "2",
        "--time-scale",
        "0",  # the λ rungs' delays would be waited for in real time; the curves do not depend on them
        "--db",
        str(db),
        "--json",
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(argv) == 0
    return db, json.loads(out.getvalue())


def curves_of(payload):
    return {(c["model"], c["family"]): c for c in payload["robustness"]["curves"]}


def test_a_retrying_oracle_stays_flat_longer_than_naive_on_both_ladders(ladder_run):
    _, payload = ladder_run
    curves = curves_of(payload)
    assert set(curves) == {
        (m, f) for m in ("scripted:oracle", "scripted:naive") for f in ("lambda", "resilibench")
    }
    for family in ("lambda", "resilibench"):
        oracle, naive = curves[("scripted:oracle", family)], curves[("scripted:naive", family)]
        assert [p["faults"] for p in oracle["points"]] == list(LADDERS[family].specs)
        assert [p["intensity"] for p in oracle["points"]] == list(LADDERS[family].intensities)
        rates = {m: [p["rate"] for p in c["points"]] for m, c in (("oracle", oracle), ("naive", naive))}
        # Without faults both succeed; at every rung the oracle (which retries) is at least as good.
        assert rates["oracle"][0] == rates["naive"][0] == 1.0
        assert all(o >= n for o, n in zip(rates["oracle"], rates["naive"], strict=True))

        def first_fall(values):  # the first rung 20 points or more below the fault-free rate
            return next((i for i, v in enumerate(values) if v <= values[0] - 0.2), len(values))

        assert first_fall(rates["oracle"]) > first_fall(rates["naive"]) == 1
        # The naive agent only falls as faults get harsher.
        assert all(a >= b for a, b in zip(rates["naive"], rates["naive"][1:], strict=False))
        for c in (oracle, naive):
            low, high = c["auc_ci95"]
            assert 0 <= low <= c["auc"] <= high <= 1 and c["auc_tasks"] == 12
            # The area is the trapezoid of the curve itself (every task played every rung).
            xs = [p["intensity"] for p in c["points"]]
            assert c["auc"] == pytest.approx(
                trapezoid(list(zip(xs, (p["rate"] for p in c["points"]), strict=True))), abs=1e-3
            )
        assert oracle["auc"] > naive["auc"] + 0.2
    differences = {d["family"]: d for d in payload["robustness"]["differences"]}
    for family in ("lambda", "resilibench"):
        d = differences[family]
        area = curves[("scripted:naive", family)]["auc"] - curves[("scripted:oracle", family)]["auc"]
        signed = d["delta"] if d["model_b"] == "scripted:naive" else -d["delta"]
        assert signed == pytest.approx(area, abs=1e-3) and d["beyond_noise"] is True


def test_curves_are_in_the_report_terminal_html_and_json(ladder_run, capsys):
    db, payload = ladder_run
    report = load_report(db, find_suite=find_suite)
    data = report.to_dict()
    assert data["robustness"]["curves"] == payload["robustness"]["curves"]
    page = render_html(report)
    assert "Robustness curve: resilibench ladder" in page and "Robustness curve: lambda ladder" in page
    assert main(["report", "--db", str(db)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "scripted:oracle on the resilibench ladder: normalised area" in printed
    assert "resilibench ladder: scripted:oracle keeps a larger area than scripted:naive" in printed


def test_ladder_options_are_checked(tmp_path, capsys):
    db = str(tmp_path / "n.db")
    assert main(["run", "--ladder", "lambda", "--faults", "none", "--db", db]) == 2
    with pytest.raises(SystemExit) as usage:
        main(["run", "--ladder", "bogus", "--db", db])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "drop --faults" in err and "invalid choice: 'bogus'" in err


def test_toolmazes_ladder_climbs_its_modes(tmp_path, capsys):
    db = tmp_path / "tm.db"
    argv = ["run", "--suite", "toolmaze", "--model", "scripted:oracle", "--model", "scripted:naive"]
    assert (
        main([*argv, "--ladder", "toolmaze", "--limit", "4", "--trials", "1", "--db", str(db), "--json"]) == 0
    )
    payload = json.loads(capsys.readouterr().out)
    curves = curves_of(payload)
    oracle, naive = curves[("scripted:oracle", "toolmaze")], curves[("scripted:naive", "toolmaze")]
    assert [p["faults"] for p in oracle["points"]] == list(LADDERS["toolmaze"].specs)
    assert payload["degradation"]["baseline"] == "toolmaze:NP"  # no `none`: the ladder's mildest rung
    assert oracle["auc"] >= naive["auc"]
