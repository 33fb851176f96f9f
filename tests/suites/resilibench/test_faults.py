"""ResiliBench's failure model: its SPEC and overrides, the written probability rule, and the failure
rate it gives over many draws."""

import json

import pytest

from mcp_resili import get_suite
from mcp_resili.faults import CallContext, CallOutcome, FaultInjector, FaultSpecError, parse_fault_spec
from mcp_resili.suites.resilibench.faults import ResiliBenchFaults
from mcp_resili.suites.resilibench.library import resilibench_library


def test_spec_resilibench_defaults():
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


def test_a_resilibench_fault_file_loads_its_plan(tmp_path):
    js = tmp_path / "f.json"
    js.write_text(json.dumps({"kind": "resilibench", "base_success": 0.5}))
    assert parse_fault_spec(str(js)) == ResiliBenchFaults(base_success=0.5)


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
