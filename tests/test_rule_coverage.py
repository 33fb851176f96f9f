"""A rules fault file says what it will do: a pattern that matches no tool is refused, hits are estimated."""

import json
import sys
from pathlib import Path

import anyio
import pytest

from mcp_resili.cli import main
from mcp_resili.faults import ErrorFault, FaultSpecError, RuleFaults
from mcp_resili.faults.rules import FaultRule, check_rule_tools, closest_tools, expected_hits
from mcp_resili.proxy import run_proxy
from mcp_resili.registry.loader import get_suite

DYING = Path(__file__).parent / "fakes" / "dying_server.py"  # one tool: "crash"
TIMEOUT = {"type": "error", "code": "TIMEOUT", "message": "injected"}


def rules_file(tmp_path, *rules, name="faults.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"kind": "rules", "rules": list(rules)}))
    return str(path)


def test_a_run_whose_rule_matches_no_tool_is_refused_in_one_line_naming_the_closest_tools(tmp_path, capsys):
    bad = rules_file(
        tmp_path, {"tool": "network_*", "fault": TIMEOUT}, {"tool": "netwrk_*", "fault": TIMEOUT}
    )
    db = tmp_path / "never.db"
    assert main(["run", "--faults", bad, "--limit", "2", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "rule 2's tool pattern 'netwrk_*' matches no tool of suite 'resilibench'" in err
    assert "closest: network_" in err
    assert not db.exists()  # refused before anything ran
    assert main(["serve", "--faults", bad]) == 2
    assert "'netwrk_*' matches no tool" in capsys.readouterr().err


def test_patterns_that_match_a_tool_or_the_finish_tool_pass():
    tools = [t.name for t in get_suite("resilibench").library.specs]
    fine = RuleFaults(
        rules=(
            FaultRule(tool="network_*", fault=ErrorFault(code="TIMEOUT", message="x")),
            FaultRule(tool="finish", fault=ErrorFault(code="TIMEOUT", message="x")),
            FaultRule(tool="*", calls=(2,), fault=ErrorFault(code="TIMEOUT", message="x")),
        )
    )
    check_rule_tools(fine, tools, "fine.json", "suite 'resilibench'")  # no error
    assert closest_tools("file_operations_raeder", tools)[0] == "file_operations_reader"


def test_inspect_refuses_the_same_rule_before_any_sample(tmp_path):
    pytest.importorskip("inspect_ai")
    from mcp_resili.integrations.inspect.tasks import ArgumentError, suite_task

    bad = rules_file(tmp_path, {"tool": "netwrk_*", "fault": TIMEOUT})
    with pytest.raises(ArgumentError, match="'netwrk_\\*' matches no tool"):
        suite_task("resilibench", faults=bad)


@pytest.mark.anyio
async def test_the_proxy_refuses_a_rule_that_matches_none_of_the_upstreams_tools():
    reached = []

    async def serve(proxy):
        reached.append(proxy.tools)

    bad = RuleFaults(rules=(FaultRule(tool="crsh*", fault=ErrorFault(code="TIMEOUT", message="x")),))
    with (
        anyio.fail_after(30),
        pytest.raises(FaultSpecError, match=r"matches no tool of the upstream.*closest: crash"),
    ):
        await run_proxy(f"{sys.executable} {DYING}", bad, serve)
    assert reached == []  # refused before serving anyone
    good = RuleFaults(rules=(FaultRule(tool="cra*", fault=ErrorFault(code="TIMEOUT", message="x")),))
    with anyio.fail_after(30):
        await run_proxy(f"{sys.executable} {DYING}", good, serve)
    assert reached == [["crash"]]


def test_expected_hits_by_hand():
    plan = RuleFaults(
        rules=(
            FaultRule(tool="a*", probability=0.5, fault=ErrorFault(code="T", message="x")),
            FaultRule(tool="*", calls=(1,), fault=ErrorFault(code="T", message="x")),
        )
    )
    first, second = expected_hits(plan, [["ab", "ab", "c"], ["c", "c"]])
    # Rule 1: both "ab" calls, each fires half the time.
    assert (first.matched, first.expected) == (2, 1.0)
    # Rule 2: the first "ab" (reached only when rule 1 did not fire: 0.5), the first "c" of each episode.
    assert (second.matched, second.expected) == (3, 2.5)


def test_run_estimate_says_how_many_calls_each_rule_is_expected_to_hit(tmp_path, capsys):
    spec = rules_file(tmp_path, {"tool": "network_*", "probability": 0.5, "fault": TIMEOUT})
    argv = ["run", "--faults", spec, "--limit", "10", "--trials", "3", "--estimate", "--json"]
    assert main([*argv, "--db", str(tmp_path / "e.db")]) == 0
    payload = json.loads(capsys.readouterr().out)
    (hit,) = payload["rule_hits"]
    suite = get_suite("resilibench")
    # The stratified sample of 10 tasks (seed 0), as the run plans it: count its network calls by hand.
    from mcp_resili.client.runner import RunConfig, resolve_run

    plan = resolve_run(RunConfig(faults=(spec,), limit=10, stratified=True, trials=3), suite)
    network = sum(
        1 for t in plan.task_ids for s in suite.task(t).workflow.steps if s.tool.startswith("network_")
    )
    assert network > 0
    assert hit["matched_calls"] == network * 3 * 2  # trials × the two default models
    assert hit["expected_injections"] == pytest.approx(network * 3 * 2 * 0.5)
    assert payload["noise_floor"]["tasks"] == 10 and payload["noise_floor"]["detectable_full"] > 0.2
    assert main([*argv[:-1], "--db", str(tmp_path / "e.db")]) == 0
    printed = capsys.readouterr().out
    assert "noise floor: at 10 tasks × 3 trials" in printed and "fault rule 1 of" in printed
