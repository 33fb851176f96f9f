"""Prompt variants, the seven flaw types at three severities, and scoring against ground truth."""

import itertools

import pytest

from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.registry.loader import get_suite
from mcp_resili.suites.resilibench.flaws import (
    FLAW_METHODS,
    SEVERITIES,
    FlawError,
    apply_flaw,
    optimal_plan,
    parse_flaw,
)
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.prompts import render_plan
from mcp_resili.suites.resilibench.tasks import default_tasks, full_tasks
from mcp_resili.tools.search import ToolIndex

LIB = resilibench_library()
INDEX = ToolIndex(LIB.specs)
#: Every default task plus every 60th task of the full suite (all types, 2 to 10 steps).
SAMPLE = list(default_tasks()) + list(full_tasks()[::60])


def test_baseline_cot_and_optimal_prompts_have_their_sections():
    suite = get_suite("resilibench")
    task = suite.default_tasks[-1]
    baseline, cot, optimal = (suite.prompt(task, v) for v in ("baseline", "cot", "optimal"))
    assert task.description in baseline and "finish" in baseline and "search_tools" in baseline
    assert cot.startswith(baseline) and "Reasoning:" in cot and "step by step" in cot
    assert optimal.startswith(baseline) and "## Workflow execution plan" in optimal
    plan_tools = task.metadata["optimal_workflow"]["tools"]
    positions = [optimal.index(f"Execute {tool}\n") for tool in plan_tools]
    assert positions == sorted(positions)
    assert "Predicted probability of full success" in optimal


@pytest.mark.parametrize(("flaw", "method"), [(f, m) for f, ms in FLAW_METHODS.items() for m in ms])
@pytest.mark.parametrize("severity", SEVERITIES)
def test_every_flaw_method_and_severity_visibly_changes_every_sampled_plan(flaw, method, severity):
    for task in SAMPLE:
        plan = optimal_plan(task, LIB)
        flawed = apply_flaw(task, plan, LIB, INDEX, flaw, severity, method)
        assert render_plan(task, flawed) != render_plan(task, plan), task.id
        again = apply_flaw(task, plan, LIB, INDEX, flaw, severity, method)
        assert again == flawed  # seeded by the task and the flaw: reproducible


def test_flaw_types_do_what_they_say():
    task = next(t for t in default_tasks() if t.task_type == "advanced_computation_pipeline")
    plan = optimal_plan(task, LIB)

    def flawed(spec):
        kind, severity, method = parse_flaw(spec)
        return apply_flaw(task, plan, LIB, INDEX, kind, severity, method)

    assert sorted(flawed("sequence_disorder:severe:swap").tools) == sorted(plan.tools)
    assert not task.workflow.tool_order_is_consistent(flawed("sequence_disorder").tools)
    assert len(flawed("missing_step:severe").tools) == 2
    assert len(flawed("missing_step:light").tools) == len(plan.tools) - 1
    assert len(flawed("redundant_operations:severe").tools) == 2 * len(plan.tools)
    assert set(flawed("tool_misuse:light").tools) - set(plan.tools)
    assert flawed("semantic_drift:severe").tools[:2] == plan.tools[:2]
    assert all(a != b for a, b in zip(flawed("semantic_drift:severe").tools[2:], plan.tools[2:], strict=True))
    missing = flawed("parameter_error:light:missing")
    assert sum(len(s.arguments) for s in missing.steps) == sum(len(s.arguments) for s in plan.steps) - 1
    assert len(flawed("logical_inconsistency:medium:unrelated").tools) == len(plan.tools) + 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "expected TYPE"),
        ("chaos", "unknown flaw type 'chaos'"),
        ("missing_step:extreme", "unknown severity 'extreme'"),
        ("missing_step:light:teleport", "unknown method 'teleport'"),
    ],
)
def test_bad_flaw_specs_name_the_offending_value(spec, message):
    with pytest.raises(FlawError, match=message):
        parse_flaw(spec)


def test_flaw_aliases_and_defaults():
    assert parse_flaw("logic_discontinuity") == ("logical_inconsistency", "severe", "format")
    assert parse_flaw("redundant_operation:light") == ("redundant_operations", "light", "duplicate")


def test_flawed_prompt_shows_the_flawed_plan_and_unknown_variants_fail():
    suite = get_suite("resilibench")
    task = suite.default_tasks[0]
    optimal = suite.prompt(task, "optimal")
    for flaw in FLAW_METHODS:
        text = suite.prompt(task, f"flawed:{flaw}")
        assert text != optimal and "## Workflow execution plan" in text
    for bad in ("nope", "flawed", "flawed:nope", "optimal:x"):
        with pytest.raises(ValueError, match=bad.split(":")[-1]):
            suite.prompt(task, bad)


def test_a_remembered_prompt_belongs_to_its_task_object_not_to_its_id():
    """Prompts remember each task object's base text and plan: a twin with other inputs gets its own."""
    suite = get_suite("resilibench")
    task = suite.default_tasks[0]
    first = {v: suite.prompt(task, v) for v in ("baseline", "optimal", "flawed:sequence_disorder")}
    assert {v: suite.prompt(task, v) for v in first} == first  # remembered: the very same text
    key = next(iter(task.inputs))
    twin = task.model_copy(update={"inputs": {**task.inputs, key: "a-value-only-the-twin-has"}})
    assert twin.id == task.id
    for variant, text in first.items():
        again = suite.prompt(twin, variant)
        assert "a-value-only-the-twin-has" in again and "a-value-only-the-twin-has" not in text
    other = task.model_copy(update={"description": "Another description altogether."})
    assert suite.prompt(other, "baseline").startswith("Task: Another description altogether.")


@pytest.mark.anyio
async def test_flawed_runs_are_scored_against_ground_truth_not_the_flawed_plan(tmp_path):
    variants = ("baseline", "optimal", "flawed:missing_step:severe", "flawed:sequence_disorder")
    result = await execute(
        RunConfig(db=tmp_path / "r.db", models=("scripted:oracle",), variants=variants, trials=1, limit=10)
    )
    labels = {}
    for row in result.rows:
        labels.setdefault(row.variant, []).append(
            (row.task_id, row.label, row.score["components"]["coverage"])
        )
    # The oracle follows the ground truth whatever the prompt says; every variant meets the same
    # faults, so the scores agree exactly. (Scored against a flawed plan they would differ.)
    assert len(labels) == 4
    assert all(sorted(v) == sorted(labels["baseline"]) for v in labels.values())
    assert sum(1 for _, label, _ in labels["baseline"] if label == "full") >= 8


def test_prompt_variants_are_distinct_for_many_tasks():
    suite = get_suite("resilibench")
    for task in itertools.islice(suite.tasks, 0, 5040, 400):
        texts = {suite.prompt(task, v) for v in ("baseline", "cot", "optimal", "flawed:semantic_drift")}
        assert len(texts) == 4


@pytest.mark.anyio
async def test_variants_are_served_as_mcp_prompts():
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    from mcp_resili.faults import NoFaults
    from mcp_resili.server.app import ResiliServer

    suite = get_suite("resilibench")
    task = suite.default_tasks[2]
    async with Client(ResiliServer(suite, NoFaults()).mcp) as client:
        listed = await client.list_prompts()
        flawed = await client.get_prompt(task.id, {"variant": "flawed:parameter_error:medium"})
        with pytest.raises(MCPError):
            await client.get_prompt(task.id, {"variant": "flawed:nope"})
    assert "flawed:TYPE" in listed.prompts[0].arguments[0].description
    text = flawed.messages[0].content.text
    assert text == suite.prompt(task, "flawed:parameter_error:medium") != suite.prompt(task, "optimal")
