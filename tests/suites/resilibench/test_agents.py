"""The plan-follower does what its prompt's plan says, arguments included; every flaw type costs it."""

import pytest

from mcp_resili.agents.model import (
    AssistantMessage,
    ModelRequest,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.registry.loader import get_suite
from mcp_resili.suites.resilibench.agents import PlanFollowerAgent, argument_value, read_plan
from mcp_resili.suites.resilibench.flaws import FLAW_TYPES, optimal_plan
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.prompts import flawed_plan
from mcp_resili.suites.resilibench.tasks import default_tasks
from mcp_resili.trace import Trace
from suites.resilibench.gold import gold_run

SUITE = get_suite("resilibench")


def test_the_plan_read_back_from_the_prompt_is_the_plan_that_was_printed():
    task = default_tasks()[17]
    for variant in ("optimal", "flawed:parameter_error:severe", "flawed:logical_inconsistency:severe"):
        read = read_plan(SUITE.prompt(task, variant))
        _, _, flaw = variant.partition(":")
        printed = flawed_plan(task, flaw) if flaw else optimal_plan(task, resilibench_library())
        assert [p.tool for p in read] == printed.tools
        assert [dict(p.arguments) for p in read] == [s.arguments for s in printed.steps]
    assert read_plan(SUITE.prompt(task, "baseline")) is None


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('"data/archive_old.bin" (task input `source`)', "data/archive_old.bin"),
        ('{"operation": "scale"}', {"operation": "scale"}),
        ("42", 42),
        ("the `data` returned by network_fetcher", {"content": "a,b\n", "format": "csv"}),
        ("the `metadata` returned by network_fetcher", {"url": "u"}),
        ("the `data` returned by utility_logger", {}),  # nothing received from it: nothing to pass
        ("the raw XML text returned by network_fetcher", {"content": "a,b\n", "format": "xml"}),
    ],
)
def test_an_argument_is_what_the_plan_words_it_as(source, expected):
    received = {"network_fetcher": {"data": {"content": "a,b\n", "format": "csv"}, "metadata": {"url": "u"}}}
    assert argument_value(source, received) == expected


@pytest.mark.anyio
async def test_the_plan_follower_passes_a_flawed_argument_exactly_as_printed():
    task = next(
        t
        for t in default_tasks()
        if any(
            "archive_old" in str(a)
            for s in flawed_plan(t, "parameter_error:severe").steps
            for a in s.arguments.values()
        )
    )
    prompt = SUITE.prompt(task, "flawed:parameter_error:severe")
    plan = read_plan(prompt)
    target = next(i for i, p in enumerate(plan) if any("archive_old" in s for _, s in p.arguments))
    messages = [UserMessage(prompt)]
    for i in range(target):  # every earlier step succeeded (with an empty result)
        call = (
            await PlanFollowerAgent().generate(ModelRequest(messages=tuple(messages), tools=(), task=task))
        ).tool_calls[0]
        assert call.name == plan[i].tool
        messages += [
            AssistantMessage("", (call,)),
            ToolResultsMessage((ToolResult(call.id, call.name, "{}", False, {"data": {}}),)),
        ]
    response = await PlanFollowerAgent().generate(ModelRequest(messages=tuple(messages), tools=(), task=task))
    call = response.tool_calls[0]
    assert call.name == plan[target].tool and "data/archive_old.bin" in call.arguments.values()


@pytest.mark.anyio
async def test_every_flaw_type_lowers_the_plan_followers_full_rate(tmp_path):
    """bench/resilibench_flaws.py measures this with intervals; here a small sample, severe flaws."""
    variants = ("optimal", *(f"flawed:{f}:severe" for f in FLAW_TYPES))
    result = await execute(
        RunConfig(
            db=tmp_path / "r.db",
            models=("scripted:plan-follower",),
            variants=variants,
            tasks=tuple(t.id for t in default_tasks()[::5]),
            trials=1,
        )
    )
    full = {v: sum(r.label == "full" for r in result.rows if r.variant == v) for v in variants}
    assert full["optimal"] >= 6
    for flaw in FLAW_TYPES:
        assert full[f"flawed:{flaw}:severe"] <= full["optimal"] - 4, (flaw, full)


def test_the_plan_followers_arguments_for_the_optimal_plan_are_the_ground_truths():
    for task in default_tasks()[::5]:
        plan = read_plan(SUITE.prompt(task, "optimal"))
        received = {}
        for gold, step in zip(gold_run(task), plan, strict=True):
            assert step.tool == gold.tool
            assert {n: argument_value(s, received) for n, s in step.arguments} == gold.arguments
            received[gold.tool] = gold.result


@pytest.mark.anyio
async def test_inserted_steps_read_an_earlier_output_and_the_follower_can_make_them(tmp_path):
    """Unnecessary and unrelated steps are calls a reader can follow: without faults every one succeeds."""
    variants = tuple(
        f"flawed:{flaw}:{severity}:{method}"
        for flaw, method in (("redundant_operations", "unnecessary"), ("logical_inconsistency", "unrelated"))
        for severity in ("light", "medium", "severe")
    )
    tasks = tuple(t.id for t in SUITE.tasks[::210])
    for variant in variants:
        for task_id in tasks:
            plan = flawed_plan(SUITE.task(task_id), variant.split(":", 1)[1])
            inserted = [s for s in plan.steps if s.tool not in SUITE.task(task_id).required_tools]
            assert inserted, (variant, task_id)
            for step in inserted:  # every argument it needs comes from an earlier step (or is a constant)
                assert step.arguments["data"].startswith("the `data` returned by "), step
                source = step.arguments["data"].rsplit(" ", 1)[1]
                assert source in plan.tools[: plan.steps.index(step)]
    result = await execute(
        RunConfig(
            db=tmp_path / "r.db",
            models=("scripted:plan-follower",),
            variants=variants,
            tasks=tasks,
            trials=1,
            faults=("none",),
            max_turns=60,
        )
    )
    inserted_calls = full = 0
    for row in result.rows:
        task = SUITE.task(row.task_id)
        trace = Trace.from_lines(row.trace.splitlines())
        for call in trace.tool_calls:
            if call.tool not in task.required_tools:
                inserted_calls += 1
                assert not call.is_error, (row.variant, row.task_id, call.tool, call.result)
        # With room for every call and no faults, a plan with only extra steps is still done in full,
        # unless it has more than the 15 successful calls the stop rules allow.
        rule = row.score["components"]["termination_rule"]
        assert row.label == "full" or rule == "too_many_calls", (
            row.variant,
            row.task_id,
            row.score["reasons"],
        )
        full += row.label == "full"
    assert inserted_calls >= len(tasks) * len(variants) and full >= len(result.rows) * 0.8
