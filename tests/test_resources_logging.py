"""What a real MCP server offers besides tools: task resources, completion, and logging in both eras."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from mcp_resili.constants import META_EPISODE
from mcp_resili.faults import parse_fault_spec
from mcp_resili.registry.loader import get_suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.server.resources import RESOURCE_PAGE_TASKS

pytestmark = pytest.mark.anyio

SUITE = get_suite("resilibench")
TASK = SUITE.tasks[3]
FETCH = ("network_fetcher", {"source": "https://api.example.com/orders/676"})


def server(**options: Any) -> ResiliServer:
    return ResiliServer(
        SUITE, parse_fault_spec("resilibench", SUITE.spec_scope), seed=1, time_scale=0, **options
    )


async def test_an_episode_lists_its_tasks_resources_and_reading_them_changes_nothing(tmp_path: Path) -> None:
    served = server(trace_dir=tmp_path)
    async with Client(served.mcp, mode="legacy") as client:
        unbound = await client.list_resources()
        # A session bound to a task (it named one) lists that task's prompt and task file only.
        await client.call_tool(*FETCH, meta={META_EPISODE: {"id": "bound", "task": TASK.id}})
        bound = await client.list_resources(meta={META_EPISODE: {"id": "bound"}})
        prompt = await client.read_resource(bound.resources[0].uri)
        task_file = await client.read_resource(bound.resources[1].uri)
        templates = await client.list_resource_templates()
        with pytest.raises(MCPError) as unknown:
            await client.read_resource("mcp-resili://resilibench/tasks/nope/prompt")
    first_page = SUITE.tasks[:RESOURCE_PAGE_TASKS]
    assert [r.name for r in unbound.resources[:2]] == [
        f"{first_page[0].id} prompt",
        f"{first_page[0].id} task",
    ]
    assert len(unbound.resources) == 2 * RESOURCE_PAGE_TASKS and unbound.next_cursor == str(
        RESOURCE_PAGE_TASKS
    )
    assert [str(r.uri) for r in bound.resources] == [
        f"mcp-resili://resilibench/tasks/{TASK.id}/prompt",
        f"mcp-resili://resilibench/tasks/{TASK.id}/task.json",
    ]
    assert prompt.contents[0].text == SUITE.prompt(TASK)
    shown = json.loads(task_file.contents[0].text)
    assert shown["id"] == TASK.id and shown["inputs"] == TASK.inputs
    assert not {"workflow", "expected_outputs", "metadata", "required_tools"} & set(shown)  # no answer key
    assert {t.uri_template for t in templates.resource_templates} == {
        "mcp-resili://resilibench/tasks/{task}/prompt",
        "mcp-resili://resilibench/tasks/{task}/task.json",
    }
    assert unknown.value.code == types.INVALID_PARAMS and "nope" in unknown.value.error.message
    # Reading took no call, no draw: the bound episode recorded its one call only.
    (trace_file,) = tmp_path.iterdir()
    assert len(trace_file.read_text().splitlines()) == 2  # header + the one call


async def test_completion_offers_task_ids_and_variants_by_prefix_and_nothing_for_the_unknown() -> None:
    async with Client(server().mcp) as client:
        tasks = await client.complete(
            types.ResourceTemplateReference(
                type="ref/resource", uri="mcp-resili://resilibench/tasks/{task}/prompt"
            ),
            {"name": "task", "value": TASK.id[:7]},
        )
        variants = await client.complete(
            types.PromptReference(type="ref/prompt", name=TASK.id), {"name": "variant", "value": "f"}
        )
        unknown = await client.complete(
            types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"),
            {"name": "arg1", "value": "x"},
        )
    expected = [t.id for t in SUITE.tasks if t.id.startswith(TASK.id[:7])]
    assert tasks.completion.values == expected[:100] and tasks.completion.total == len(expected)
    assert TASK.id in tasks.completion.values
    assert variants.completion.values == ["flawed"]
    assert unknown.completion.values == []


async def test_a_server_bound_to_a_task_shows_and_completes_that_task_only() -> None:
    async with Client(server(task=TASK.id).mcp) as client:
        listed = await client.list_resources()
        other = SUITE.tasks[4].id
        with pytest.raises(MCPError):
            await client.read_resource(f"mcp-resili://resilibench/tasks/{other}/prompt")
        completed = await client.complete(
            types.ResourceTemplateReference(
                type="ref/resource", uri="mcp-resili://resilibench/tasks/{task}/prompt"
            ),
            {"name": "task", "value": ""},
        )
    assert len(listed.resources) == 2 and TASK.id in str(listed.resources[0].uri)
    assert completed.completion.values == [TASK.id]


async def test_handshake_logging_sends_nothing_until_set_level_then_only_at_that_level_and_above() -> None:
    received: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append(params)

    finish = ("finish", {"status": "completed", "summary": "done"})
    async with Client(server().mcp, mode="legacy", logging_callback=on_log) as client:
        await client.call_tool(*FETCH)
        silent = len(received)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)  # logging/setLevel is gone in 2026
            await client.set_logging_level("info")
        await client.call_tool(*FETCH)  # logged at debug: below info
        await client.call_tool(*finish)  # info
        at_info = list(received)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.set_logging_level("debug")
        await client.call_tool(*FETCH)
    assert silent == 0
    assert [(m.level, m.data) for m in at_info] == [("info", {"tool": "finish", "outcome": "ok"})]
    assert received[-1].level == "debug" and received[-1].data["tool"] == "network_fetcher"
    assert all(set(m.data) == {"tool", "outcome"} for m in received)  # nothing about faults


async def test_2026_logging_is_an_opt_in_per_request() -> None:
    received: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append(params)

    served = server()
    async with Client(served.mcp, logging_callback=on_log) as client:
        assert client.protocol_version == "2026-07-28"
        await client.call_tool(*FETCH)
        before = len(received)
        await client.call_tool(*FETCH, meta={"io.modelcontextprotocol/logLevel": "debug"})
        await client.call_tool(*FETCH, meta={"io.modelcontextprotocol/logLevel": "warning"})
    assert before == 0
    assert [(m.level, m.data["tool"]) for m in received] == [("debug", "network_fetcher")]
