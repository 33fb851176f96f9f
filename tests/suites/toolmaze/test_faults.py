import random

import jsonschema
import pytest

from mcp_resili.faults import CallContext, FaultSpecError, ToolOutcome, parse_fault_spec
from mcp_resili.faults.error import ErrorFault
from mcp_resili.faults.spec import GENERIC_SCOPE
from mcp_resili.registry.loader import get_suite, spec_scope
from mcp_resili.suites.toolmaze.corrupt import (
    CHANGED_FACETS,
    CORRUPTIONS,
    CorruptFault,
    changed_paths,
    corrupt_record,
    get_path,
)
from mcp_resili.suites.toolmaze.faults import ToolMazeFaults
from mcp_resili.suites.toolmaze.library import corpus_index, toolmaze_library
from mcp_resili.suites.toolmaze.sanity import anomalies
from mcp_resili.suites.toolmaze.tasks import toolmaze_tasks


def first(level):
    return next(t for t in toolmaze_tasks() if t.level == level)


def decide(plan, task, tool, ordinal, state):
    spec = toolmaze_library().spec(tool)
    return plan.decide(CallContext("k", spec, ordinal, (), task=task, state=state), random.Random(0))


def clean_record(tool):
    op = corpus_index().first_op(tool)
    args = {corpus_index().domains[op.domain].subject_field: corpus_index().domains[op.domain].subjects[0]}
    if op.role != "source":
        args[op.id_arg] = "QU-00c0ffee"
        args[op.measure_arg] = 42.5
    if "priority" in toolmaze_library().spec(tool).input_schema["properties"]:
        args["priority"] = "normal"
    return args, toolmaze_library().simulate(tool, args, {})


def differences(clean, bad, path=""):
    """Leaf paths where ``bad`` differs from ``clean``; fails if the key structure differs."""
    if isinstance(clean, dict):
        assert isinstance(bad, dict) and bad.keys() == clean.keys(), path
        return [d for k in clean for d in differences(clean[k], bad[k], f"{path}.{k}" if path else k)]
    if isinstance(clean, list) and clean and isinstance(clean[0], dict):
        assert isinstance(bad, list) and len(bad) == len(clean), path
        return [path] if any(differences(c, b, path) for c, b in zip(clean, bad, strict=True)) else []
    return [] if clean == bad else [path]


VALIDATORS = {s.name: jsonschema.Draft202012Validator(s.output_schema) for s in toolmaze_library()}


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_every_tools_corrupted_record_has_its_clean_twins_keys_and_differs_only_where_named(corruption):
    for tool in corpus_index().tools:
        args, clean = clean_record(tool)
        assert anomalies(tool, args, clean) == [], tool
        bad = corrupt_record(tool, clean, corruption)
        named = changed_paths(tool, corruption)
        changed = differences(clean, bad)
        assert set(changed) <= set(named), (tool, corruption, changed, named)
        assert named[0] in changed, (tool, corruption)  # the record id always changes
        assert len(changed) >= min(2, len(named)), (tool, corruption, changed)
        VALIDATORS[tool].validate(bad)
        assert not any("error" in key for key in bad), tool
        assert anomalies(tool, args, bad), (tool, corruption)
        assert corrupt_record(tool, clean, corruption) == bad  # deterministic from the clean record


def test_corruptions_change_the_fields_later_steps_read():
    for corruption in CORRUPTIONS:
        facets = CHANGED_FACETS[corruption]
        assert "id" in facets
    assert {"measure", "subject"} <= {f for fs in CHANGED_FACETS.values() for f in fs}


def test_physics_violations_break_each_units_own_bounds():
    percent = next(t for t in corpus_index().tools if corpus_index().last_op(t).unit == "%")
    celsius = next(t for t in corpus_index().tools if corpus_index().last_op(t).unit == "°C")
    dollars = next(t for t in corpus_index().tools if corpus_index().last_op(t).unit == "USD")
    for tool, check in (
        (percent, lambda v: v > 100),
        (celsius, lambda v: v < -273.15),
        (dollars, lambda v: v < 0),
    ):
        bad = corrupt_record(tool, clean_record(tool)[1], "physics_violation")
        assert check(get_path(bad, corpus_index().last_op(tool).facets.measure)), tool


def test_an_irrelevant_response_is_another_subjects_record():
    tool = "get_destination_weather"
    args, clean = clean_record(tool)
    bad = corrupt_record(tool, clean, "irrelevant_response")
    assert bad["city"] in corpus_index().domains["travel"].decoys and bad["city"] in str(bad.values())
    assert any("not 'Paris'" in a for a in anomalies(tool, args, bad))


def test_unknown_corruption_is_rejected_by_name():
    with pytest.raises(ValueError, match="bogus"):
        corrupt_record("search_flights", clean_record("search_flights")[1], "bogus")


def test_corrupt_fault_passes_a_tools_own_error_through_and_refuses_foreign_tools():
    fault = CorruptFault(corruption="logic_violation", transient=True)
    error = ToolOutcome(structured=None, error_code="SOLD_OUT", message="x")
    spec = toolmaze_library().spec("search_flights")
    assert fault.apply(error, CallContext("k", spec, 0, ()), random.Random(0)) is error
    assert fault.explicit is False and fault.side == "response"
    foreign = spec.model_copy(update={"name": "not_toolmaze"})
    with pytest.raises(ValueError, match="ToolMaze tools only"):
        fault.apply(ToolOutcome(structured={"x": 1}), CallContext("k", foreign, 0, ()), random.Random(0))


def test_spec_strings_parse_every_mode_and_reject_others():
    suite = get_suite("toolmaze")
    for mode in ("NP", "P1", "P2", "P3", "P4"):
        plan = parse_fault_spec(f"toolmaze:{mode}", suite.spec_scope)
        assert isinstance(plan, ToolMazeFaults) and plan.mode == mode
    assert parse_fault_spec("toolmaze:p3", suite.spec_scope).mode == "P3"
    with pytest.raises(FaultSpecError, match="P5"):
        parse_fault_spec("toolmaze:P5", suite.spec_scope)


@pytest.mark.parametrize("other", ["resilibench", "reliabilitybench", None])
def test_a_toolmaze_mode_is_refused_outside_toolmaze_before_anything_runs(other):
    # The top's scope: the suite's own names, then any installed suite's (the proxy: no suite).
    scope = spec_scope(get_suite(other) if other else None)
    with pytest.raises(FaultSpecError, match="works only with suite 'toolmaze'"):
        parse_fault_spec("toolmaze:P1", scope)
    # Handed no other suite's names, the same SPEC is unknown: nothing below the top looks suites up.
    with pytest.raises(FaultSpecError, match="unknown fault spec 'toolmaze:P1'"):
        parse_fault_spec("toolmaze:P1", get_suite(other).spec_scope if other else GENERIC_SCOPE)


def test_c1_transient_fault_hits_only_the_first_call_of_the_victim():
    task = first("C1")
    victim = task.perturbations.slots[0].tools[0]
    other = next(t for t in task.shortest_path if t != victim)
    plan, state = ToolMazeFaults(mode="P1"), {}
    assert not decide(plan, task, other, 0, state).fired
    hit = decide(plan, task, victim, 0, state)
    assert isinstance(hit.fault, ErrorFault) and hit.fault.transient
    assert hit.fault.details["status"] == task.perturbations.p1.status
    assert hit.fault.details["error_type"] == task.perturbations.p1.error_type
    assert not decide(plan, task, victim, 1, state).fired


def test_permanent_fault_hits_every_call_of_the_victim_and_disarms_the_group():
    task = first("C2")
    group = task.alternative_groups[0]
    tried, alternative = group.members[0][0].tool, group.members[1][0].tool
    plan, state = ToolMazeFaults(mode="P4"), {}
    for ordinal in range(3):
        decision = decide(plan, task, tried, ordinal, state)
        assert isinstance(decision.fault, CorruptFault) and decision.fault.corruption == task.perturbations.p4
    assert not decide(plan, task, alternative, 0, state).fired


def test_the_first_tool_called_in_a_group_becomes_the_victim_whichever_it_is():
    task = first("C2")
    group = task.alternative_groups[0]
    alternative = group.members[1][0].tool
    plan, state = ToolMazeFaults(mode="P2"), {}
    assert decide(plan, task, alternative, 0, state).fired
    assert not decide(plan, task, group.members[0][0].tool, 0, state).fired


def test_c4_arms_each_parallel_slot_independently():
    task = next(t for t in toolmaze_tasks() if t.level == "C4" and len(t.alternative_groups) == 3)
    plan, state = ToolMazeFaults(mode="P1"), {}
    for group in task.alternative_groups:
        assert decide(plan, task, group.members[-1][0].tool, 0, state).fired
        assert not decide(plan, task, group.members[0][0].tool, 0, state).fired
    assert len(state["toolmaze/victims"]) == 3


def test_np_and_foreign_tasks_never_fire():
    task = first("C1")
    victim = task.perturbations.slots[0].tools[0]
    assert not decide(ToolMazeFaults(mode="NP"), task, victim, 0, {}).fired
    assert not decide(ToolMazeFaults(mode="P2"), None, victim, 0, {}).fired


def test_all_nine_corruption_types_and_many_error_responses_are_used_by_the_tasks():
    tasks = toolmaze_tasks()
    assert {t.perturbations.p3 for t in tasks} == set(CORRUPTIONS)
    assert {t.perturbations.p4 for t in tasks} == set(CORRUPTIONS)
    assert len({t.perturbations.p1.message for t in tasks}) == 9
    assert len({t.perturbations.p2.message for t in tasks}) == 12
