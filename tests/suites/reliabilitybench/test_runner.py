import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, replace

import pytest

from mcp_resili.agents.model import (
    AssistantMessage,
    InfrastructureError,
    ModelRequest,
    ModelResponse,
    ToolCall,
)
from mcp_resili.agents.scripted import OracleAgent
from mcp_resili.client.plan import stop_rules_for
from mcp_resili.client.runner import RunConfig, RunConfigError, execute
from mcp_resili.registry.loader import get_suite
from mcp_resili.suites.reliabilitybench.report import summarize
from mcp_resili.trace import Trace

pytestmark = pytest.mark.anyio
SUITE = get_suite("reliabilitybench")


def config(tmp_path, **kw):
    base = dict(suite="reliabilitybench", db=tmp_path / "r.db", time_scale=0, concurrency=16)
    return RunConfig(**{**base, **kw})


async def test_oracle_reaches_every_tasks_end_state_at_every_eps_without_faults(tmp_path):
    result = await execute(
        config(
            tmp_path,
            models=("scripted:oracle",),
            trials=1,
            faults=("lambda=0.0",),
            perturb=("eps=0", "eps=0.3"),
        )
    )
    assert len(result.rows) == 2 * len(SUITE.tasks)
    assert {r.label for r in result.rows} == {"full"}
    assert {r.variant for r in result.rows} == {"eps=0", "eps=0.3"}


async def test_oracle_is_more_reliable_than_naive_under_heavy_chaos(tmp_path):
    result = await execute(config(tmp_path, trials=3, limit=40, faults=("lambda=0.3",)))
    summary = summarize(result.rows)
    pass_k = {c["model"]: {p["k"]: p["value"] for p in c["pass_k"]} for c in summary["cells"]}
    oracle, naive = pass_k["scripted:oracle"], pass_k["scripted:naive"]
    assert oracle[1] > naive[1] and oracle[3] > naive[3]
    assert oracle[3] <= oracle[2] <= oracle[1] < 1.0  # some faults are not recoverable
    recovery = next(c["recovery"] for c in summary["cells"] if c["model"] == "scripted:oracle")
    assert recovery["faults_met"] > 0 and 0 < recovery["recovered"] <= recovery["faults_met"]
    naive_recovery = next(c["recovery"] for c in summary["cells"] if c["model"] == "scripted:naive")
    assert naive_recovery["recovered"] == 0  # it never retries
    for cell in summary["cells"]:
        measured = cell["faults_measured"]
        # Fresh injections per rolled call estimate the profile's rate; cascades add exposure on top.
        assert measured["nominal_rate"] == 0.275
        low, high = measured["injection"]["ci95"]
        assert low <= 0.275 <= high
        assert measured["exposure"]["rate"] > measured["injection"]["rate"]
    domains = next(c["by_domain"] for c in summary["cells"] if c["model"] == "scripted:oracle")
    assert set(domains) == {t.metadata["domain"] for t in SUITE.tasks[:40]} == {"scheduling", "travel"}
    assert sum(d["tasks"] for d in domains.values()) == 40
    assert all(d["mean_tool_calls"] >= 1 for d in domains.values())


@dataclass
class FlakyProvider:
    """An oracle whose provider is down for one task: its episodes are infrastructure errors."""

    broken_task: str
    name: str = "scripted:oracle"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if request.task.id == self.broken_task:
            raise InfrastructureError("HTTP 503 from provider after 3 attempts")
        return await OracleAgent().generate(request)


async def test_infrastructure_errors_are_counted_and_their_task_flagged_not_dropped(tmp_path, monkeypatch):
    broken = SUITE.tasks[1].id
    monkeypatch.setattr(
        "mcp_resili.client.runner.create_model", lambda spec, **_options: FlakyProvider(broken)
    )
    result = await execute(
        config(tmp_path, models=("scripted:oracle",), trials=2, limit=3, faults=("lambda=0.0",))
    )
    (cell,) = summarize(result.rows)["cells"]
    assert cell["infrastructure_errors"] == 2 and cell["tasks_with_infrastructure_errors"] == [broken]
    assert all(p["excluded_tasks"] == [broken] and p["n"] == 2 for p in cell["pass_k"])
    assert [p["value"] for p in cell["pass_k"]] == [1.0, 1.0]
    assert cell["terminations"] == {"completed": 4, "infrastructure_error": 2}


async def test_bad_sweep_options_are_rejected_before_anything_runs(tmp_path):
    with pytest.raises(RunConfigError, match=r"eps=0\.7"):
        await execute(config(tmp_path, perturb=("eps=0.7",)))
    with pytest.raises(RunConfigError, match="tree-of-thought"):
        await execute(config(tmp_path, architecture="tree-of-thought"))
    with pytest.raises(
        RunConfigError, match=r"'five-strikes'; choose from reliabilitybench, none, resilibench"
    ):
        await execute(config(tmp_path, stop_rules="five-strikes"))
    assert not (tmp_path / "r.db").exists()


def test_cli_sweeps_the_grid_and_prints_pass_k_and_the_surface(tmp_path):
    argv = [sys.executable, "-m", "mcp_resili", "run", "--suite", "reliabilitybench", "--trials", "2"]
    argv += ["--limit", "4", "--faults", "lambda=0.0", "--faults", "lambda=0.2", "--perturb", "eps=0"]
    argv += ["--perturb", "eps=0.2", "--time-scale", "0", "--json", "--db", str(tmp_path / "r.db")]
    argv += ["--architecture", "reflexion"]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "160"}
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["architecture"] == "reflexion"
    summary = out["suite_summary"]
    assert len(summary["cells"]) == 2 * 2 * 2  # models × λ × ε
    assert all([p["k"] for p in c["pass_k"]] == [1, 2] for c in summary["cells"])
    assert {c["architecture"] for c in summary["cells"]} == {"reflexion"}
    surface = next(s for s in summary["surfaces"] if s["model"] == "scripted:oracle")
    assert surface["architecture"] == "reflexion" and surface["tasks"] == 4
    assert {(p["k"], p["eps"], p["lambda"]) for p in surface["points"]} == {
        (k, e, lam) for k in (1, 2) for e in (0.0, 0.2) for lam in (0.0, 0.2)
    }
    assert all(p["n"] == 4 and p["ci95"][0] <= p["R"] <= p["ci95"][1] for p in surface["points"])
    assert 0 < surface["volume"] <= 1 and "lambda_per_0.1" in surface["gradients"]
    assert surface["volume_ci95"][0] <= surface["volume"] <= surface["volume_ci95"][1]
    assert all(g["architecture"] == "reflexion" for g in out["groups"])


@dataclass
class Stubborn:
    """Calls a tool without its arguments forever: every call fails the same way."""

    name: str = "scripted:oracle"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        turn = sum(1 for m in request.messages if isinstance(m, AssistantMessage)) + 1
        return ModelResponse(tool_calls=(ToolCall(f"c{turn}", "book_meeting", {}),), stop_reason="tool_use")


@pytest.mark.parametrize(
    ("stop_rules", "calls", "termination", "rule", "rule_set"),
    [
        (None, 10, "too_many_errors", "too_many_tool_errors", "reliabilitybench"),
        ("resilibench", 5, "too_many_errors", "too_many_errors", "resilibench"),
        ("none", 12, "max_turns", None, "none"),
    ],
)
async def test_episodes_end_by_the_suites_own_stop_rules_unless_the_run_names_others(
    tmp_path, monkeypatch, stop_rules, calls, termination, rule, rule_set
):
    monkeypatch.setattr("mcp_resili.client.runner.create_model", lambda spec, **_options: Stubborn())
    result = await execute(
        config(tmp_path, models=("scripted:oracle",), trials=1, limit=1, max_turns=12, stop_rules=stop_rules)
    )
    (row,) = result.rows
    trace = Trace.from_lines(row.trace.splitlines())
    assert len(trace.tool_calls) == calls and all(c.is_error for c in trace.tool_calls)
    assert (row.termination, row.stop_rule) == (termination, rule)
    assert (trace.end.termination, trace.end.stop_rule, trace.end.stop_rules) == (termination, rule, rule_set)
    (cell,) = summarize(result.rows)["cells"]
    assert cell["terminations"] == {f"stop_rule:{rule}" if rule else termination: 1}


def test_other_suites_keep_their_stop_rules_and_a_suite_that_names_none_inherits_none():
    resilibench = get_suite("resilibench")
    assert stop_rules_for(RunConfig(), resilibench).name == "resilibench"
    assert stop_rules_for(RunConfig(stop_rules="none"), resilibench).name == "none"
    # A suite that names no stop rules (ToolMaze, third-party suites) gets none: nobody else's.
    assert stop_rules_for(RunConfig(), replace(resilibench, stop_rules=None)).name == "none"
    assert stop_rules_for(RunConfig(), get_suite("toolmaze")).name == "none"
    # Another installed suite's rules by name, found through what the top hands down.
    others = {"resilibench": resilibench}
    assert stop_rules_for(
        RunConfig(stop_rules="resilibench"), get_suite("toolmaze"), lambda: others
    ).name == ("resilibench")
    with pytest.raises(RunConfigError, match="resilibench"):
        stop_rules_for(RunConfig(stop_rules="five-strikes"), get_suite("toolmaze"), lambda: others)


async def test_runs_with_2_and_4_trials_report_the_same_volume_up_to_sampling_error(tmp_path):
    surfaces = {}
    for trials in (2, 4):
        result = await execute(
            config(
                tmp_path,
                models=("scripted:naive",),
                db=tmp_path / f"{trials}.db",
                trials=trials,
                limit=40,
                faults=("lambda=0.3",),
            )
        )
        (surfaces[trials],) = summarize(result.rows)["surfaces"]
    two, four = surfaces[2], surfaces[4]
    assert [p["k"] for p in four["points"]] == [1, 2, 3, 4] and four["volume_k"] == two["volume_k"] == 2
    assert two["volume_n"] == four["volume_n"] == 40
    half = [(s["volume_ci95"][1] - s["volume_ci95"][0]) / 2 for s in (two, four)]
    assert abs(two["volume"] - four["volume"]) <= math.hypot(*half)
    # The naive agent's pass^k falls with k: a mean over k = 1..trials would not be comparable.
    assert four["points"][3]["R"] < four["points"][1]["R"] < four["points"][0]["R"]
