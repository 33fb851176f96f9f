import json

import pytest

from mcp_resili import get_suite
from mcp_resili.faults import (
    CallContext,
    CallOutcome,
    ErrorFault,
    FaultInjector,
    FaultSpecError,
    NoFaults,
    RuleFaults,
    derive_rng,
    parse_fault_spec,
)
from mcp_resili.suites.resilibench.faults import ResiliBenchFaults
from mcp_resili.suites.resilibench.library import resilibench_library


def test_derived_rng_depends_only_on_its_coordinates():
    a = [derive_rng(7, "ep", "tool", 2).random() for _ in range(3)]
    assert a[0] == a[1] == a[2]
    others = {
        derive_rng(8, "ep", "tool", 2).random(),
        derive_rng(7, "ep2", "tool", 2).random(),
        derive_rng(7, "ep", "tool2", 2).random(),
        derive_rng(7, "ep", "tool", 3).random(),
    }
    assert a[0] not in others and len(others) == 4


def test_negative_ordinal_is_rejected():
    with pytest.raises(ValueError, match=r"ordinal"):
        derive_rng(0, "ep", "t", -1)


def test_spec_none_and_resilibench_defaults():
    assert parse_fault_spec("none") == NoFaults()
    plan = parse_fault_spec("resilibench", get_suite("resilibench").spec_scope)
    assert isinstance(plan, ResiliBenchFaults)
    assert (plan.base_success, plan.history_window, plan.min_success, plan.max_success) == (0.8, 3, 0.1, 0.95)


def test_spec_overrides_use_short_names():
    plan = parse_fault_spec("resilibench:base=0.7,window=all,max=1", get_suite("resilibench").spec_scope)
    assert isinstance(plan, ResiliBenchFaults)
    assert plan.base_success == 0.7 and plan.history_window is None and plan.max_success == 1


@pytest.mark.parametrize(
    "spec", ["resilibench:base=2", "resilibench:nope=1", "resilibench:base", "chaos", "none:x"]
)
def test_bad_specs_raise_a_clear_error(spec):
    with pytest.raises(FaultSpecError, match="fault spec"):
        parse_fault_spec(spec, get_suite("resilibench").spec_scope)


def test_fault_file_toml_and_json_load(tmp_path):
    toml = tmp_path / "f.toml"
    toml.write_text(
        'kind = "rules"\n[[rules]]\ntool = "network_*"\ncalls = [1]\n'
        'fault = { type = "error", code = "TIMEOUT", transient = true }\n'
    )
    plan = parse_fault_spec(str(toml))
    assert isinstance(plan, RuleFaults) and plan.rules[0].fault.code == "TIMEOUT"
    js = tmp_path / "f.json"
    js.write_text(json.dumps({"kind": "resilibench", "base_success": 0.5}))
    assert parse_fault_spec(str(js)) == ResiliBenchFaults(base_success=0.5)


@pytest.mark.parametrize(
    "text",
    [
        'kind = "rules"\nrules = [',
        'kind = "warp"',
        'kind = "rules"\n[[rules]]\nfault = { type = "error", code = "x" }',
    ],
)
def test_malformed_fault_files_name_the_file(tmp_path, text):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(FaultSpecError, match=r"bad\.toml"):
        parse_fault_spec(str(path))


def test_resilibench_probability_matches_the_written_rule():
    lib = resilibench_library()
    poster = lib.spec("network_poster")  # depends on transformer and authenticator
    plan = ResiliBenchFaults()
    history = [
        CallOutcome("utility_logger", False),  # outside the 3-call window
        CallOutcome("data_processing_transformer", True),
        CallOutcome("data_processing_transformer", False),  # latest run failed → ×0.7
        CallOutcome("network_fetcher", False),
        CallOutcome("network_fetcher", True),
    ]
    # authenticator never ran → ×0.5; last 3 calls hold 2 failures → ×0.9²
    expected = 0.8 * 0.5 * 0.7 * 0.9**2
    assert plan.success_probability(poster, history) == pytest.approx(expected)
    whole = ResiliBenchFaults(history_window=None, min_success=0, max_success=1)
    assert whole.success_probability(poster, history) == pytest.approx(0.8 * 0.5 * 0.7 * 0.9**3)
    assert plan.success_probability(lib.spec("file_operations_reader"), []) == pytest.approx(0.8)
    floor = [CallOutcome("x", False)] * 3
    assert ResiliBenchFaults(base_success=0.1).success_probability(poster, floor) == 0.1


def test_resilibench_failure_rate_matches_probability_over_many_draws():
    lib = resilibench_library()
    reader = lib.spec("file_operations_reader")
    injector = FaultInjector(ResiliBenchFaults(), seed=11)
    decisions = [injector.decide(CallContext(f"ep{i}", reader, 0, ())) for i in range(4000)]
    rate = sum(d.fired for d in decisions) / len(decisions)
    assert abs(rate - 0.2) < 0.03
    codes = {d.fault.code for d in decisions if d.fault is not None}
    assert codes == set(reader.error_codes)


def test_rule_faults_fire_on_the_scheduled_calls_only():
    lib = resilibench_library()
    plan = RuleFaults(rules=({"tool": "network_*", "calls": (2,), "fault": ErrorFault(code="TIMEOUT")},))
    injector = FaultInjector(plan, seed=0)
    fetch = lib.spec("network_fetcher")
    fired = [injector.decide(CallContext("ep", fetch, n, ())).fired for n in range(4)]
    assert fired == [False, True, False, False]
    assert not injector.decide(CallContext("ep", lib.spec("file_operations_reader"), 1, ())).fired


def test_response_side_faults_let_the_tool_run():
    assert FaultInjector.runs_tool(ErrorFault(code="TIMEOUT", side="response"))
    assert not FaultInjector.runs_tool(ErrorFault(code="TIMEOUT"))
    assert FaultInjector.runs_tool(None)
