"""ToolMaze faults as any MCP client sees them: a real `mcp-resili serve` subprocess over stdio."""

import sys

import anyio
import pytest
from mcp import Client, StdioServerParameters

from mcp_resili.suites.toolmaze.model import PathStep, resolve_path_arguments
from mcp_resili.suites.toolmaze.sanity import anomalies
from mcp_resili.suites.toolmaze.tasks import toolmaze_tasks

pytestmark = pytest.mark.anyio


def first(level):
    return next(t for t in toolmaze_tasks() if t.level == level)


def server(task, mode):
    args = [
        "-m",
        "mcp_resili",
        "serve",
        "--suite",
        "toolmaze",
        "--task",
        task.id,
        "--faults",
        f"toolmaze:{mode}",
    ]
    return Client(StdioServerParameters(command=sys.executable, args=args), read_timeout_seconds=30)


async def walk_to(client, task, stop_step):
    """Call s* up to (not including) chain step ``stop_step``; return the records so far."""
    by_step, prev = {}, None
    for number, step in task.path_steps()[task.shortest_path_index()]:
        if number >= stop_step:
            break
        result = await client.call_tool(step.tool, resolve_path_arguments(step, task.inputs, prev, by_step))
        assert not result.is_error, result.content
        prev = by_step[number] = result.structured_content
    return prev, by_step


async def test_p1_victim_fails_exactly_once_then_succeeds():
    task = first("C1")
    victim_tool = task.perturbations.slots[0].tools[0]
    element = next(e for e in task.chain if e.tool_name == victim_tool)
    with anyio.fail_after(60):
        async with server(task, "P1") as client:
            prev, by_step = await walk_to(client, task, element.step)
            step = PathStep(tool=victim_tool, arg_bindings=element.arg_bindings)
            args = resolve_path_arguments(step, task.inputs, prev, by_step)
            results = [await client.call_tool(victim_tool, args) for _ in range(3)]
    assert [r.is_error for r in results] == [True, False, False]
    text = results[0].content[0].text
    assert task.perturbations.p1.message in text and str(task.perturbations.p1.status) in text
    assert task.perturbations.p1.error_type in text
    assert anomalies(victim_tool, args, results[1].structured_content) == []


async def test_p2_victim_fails_every_time_while_its_alternative_works():
    task = first("C2")
    group = task.alternative_groups[0]
    victim, alternative = group.members[0][0], group.members[1][0]
    with anyio.fail_after(60):
        async with server(task, "P2") as client:
            prev, by_step = await walk_to(client, task, group.step)
            args = resolve_path_arguments(victim, task.inputs, prev, by_step)
            failures = [await client.call_tool(victim.tool, args) for _ in range(3)]
            alt_args = resolve_path_arguments(alternative, task.inputs, prev, by_step)
            switched = [await client.call_tool(alternative.tool, alt_args) for _ in range(2)]
    assert all(r.is_error for r in failures)
    assert all(task.perturbations.p2.message in r.content[0].text for r in failures)
    assert not any(r.is_error for r in switched)
    assert anomalies(alternative.tool, alt_args, switched[0].structured_content) == []


@pytest.mark.parametrize("mode", ["P3", "P4"])
async def test_implicit_modes_return_schema_valid_corrupted_records_without_error_flag(mode):
    task = first("C3")
    group = task.alternative_groups[0]
    victim = group.members[0][0]
    with anyio.fail_after(60):
        async with server(task, mode) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            prev, by_step = await walk_to(client, task, group.step)
            args = resolve_path_arguments(victim, task.inputs, prev, by_step)
            # mcp.Client validates structured content against the tool's output schema (raises if not).
            results = [await client.call_tool(victim.tool, args) for _ in range(2)]
    assert tools[victim.tool].output_schema is not None
    assert not results[0].is_error and anomalies(victim.tool, args, results[0].structured_content)
    assert results[0].structured_content.keys() == results[1].structured_content.keys()
    if mode == "P3":
        assert anomalies(victim.tool, args, results[1].structured_content) == []
    else:
        assert anomalies(victim.tool, args, results[1].structured_content)
        assert results[1].structured_content == results[0].structured_content
