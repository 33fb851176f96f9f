"""Faults as data: the seeded RNG, SPEC strings in the scope a suite hands down, fault files, rule
schedules and response-side faults. The suite-specific SPEC is the tiny suite's own ``tiny``."""

import json

import pytest
from tiny_suite import TinyFaults, library
from tiny_suite import suite as tiny_suite

from mcp_resili.faults import (
    CallContext,
    ErrorFault,
    FaultInjector,
    FaultSpecError,
    NoFaults,
    RuleFaults,
    derive_rng,
    parse_fault_spec,
)

TINY = tiny_suite()


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


def test_spec_none_everywhere_and_a_suites_own_name_only_in_its_scope():
    assert parse_fault_spec("none") == NoFaults() == parse_fault_spec("none", TINY.spec_scope)
    assert parse_fault_spec("tiny", TINY.spec_scope) == TinyFaults(failure=0.3)
    with pytest.raises(FaultSpecError, match="unknown fault spec 'tiny'"):
        parse_fault_spec("tiny")  # no scope handed down: the generic names only


def test_spec_overrides_use_short_names():
    plan = parse_fault_spec("tiny:p=0.7", TINY.spec_scope)
    assert isinstance(plan, TinyFaults) and plan.failure == 0.7


@pytest.mark.parametrize("spec", ["tiny:p=2", "tiny:nope=1", "tiny:p", "chaos", "none:x"])
def test_bad_specs_raise_a_clear_error(spec):
    with pytest.raises(FaultSpecError, match="fault spec"):
        parse_fault_spec(spec, TINY.spec_scope)


def test_fault_file_toml_and_json_load(tmp_path):
    toml = tmp_path / "f.toml"
    toml.write_text(
        'kind = "rules"\n[[rules]]\ntool = "l*"\ncalls = [1]\n'
        'fault = { type = "error", code = "TIMEOUT", transient = true }\n'
    )
    plan = parse_fault_spec(str(toml))
    assert isinstance(plan, RuleFaults) and plan.rules[0].fault.code == "TIMEOUT"
    js = tmp_path / "f.json"
    # A suite's own plan kind, known once its package is imported (resolving the suite does that).
    js.write_text(json.dumps({"kind": "tiny", "failure": 0.5}))
    assert parse_fault_spec(str(js)) == TinyFaults(failure=0.5)


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


def test_rule_faults_fire_on_the_scheduled_calls_only():
    lib = library()
    plan = RuleFaults(rules=({"tool": "l*", "calls": (2,), "fault": ErrorFault(code="TIMEOUT")},))
    injector = FaultInjector(plan, seed=0)
    for name in ("lookup", "list_records"):  # both match the glob
        fired = [injector.decide(CallContext("ep", lib.spec(name), n, ())).fired for n in range(4)]
        assert fired == [False, True, False, False]
    assert not injector.decide(CallContext("ep", lib.spec("echo"), 1, ())).fired


def test_response_side_faults_let_the_tool_run():
    assert FaultInjector.runs_tool(ErrorFault(code="TIMEOUT", side="response"))
    assert not FaultInjector.runs_tool(ErrorFault(code="TIMEOUT"))
    assert FaultInjector.runs_tool(None)


def test_a_fault_that_declares_it_never_draws_gets_no_stream_and_one_that_lies_is_stopped(monkeypatch):
    import mcp_resili.faults.injector as injector_module
    from mcp_resili.faults.base import ToolOutcome

    derived = []
    real_derive = injector_module.derive_rng

    def counting(*args):
        derived.append(args)
        return real_derive(*args)

    monkeypatch.setattr(injector_module, "derive_rng", counting)
    injector = FaultInjector(NoFaults(), seed=0)
    call = CallContext("ep", library().spec("lookup"), 0, ())
    error = ErrorFault(code="TIMEOUT", message="slow")
    applied = injector.apply(error, None, call)
    assert (applied.error_code, applied.message, derived) == ("TIMEOUT", "slow", [])  # no stream seeded

    def drawing_apply(self, outcome, call, rng):  # as if ErrorFault drew after all
        rng.randrange(3)
        return ToolOutcome(structured=None, error_code=self.code, message="")

    monkeypatch.setattr(ErrorFault, "apply", drawing_apply)
    with pytest.raises(RuntimeError, match="uses_rng = False"):
        injector.apply(error, None, call)
    assert NoFaults().decide(call, injector_module._UNUSED_RNG).fault is None  # never draws either
