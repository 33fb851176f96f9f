"""A server bound to a task (``serve --task``) offers that task's prompt only; an unbound one pages."""

from dataclasses import replace

import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from tiny_suite import suite as tiny_suite

from mcp_resili.faults import NoFaults
from mcp_resili.server.app import PROMPT_PAGE_SIZE, ResiliServer

pytestmark = pytest.mark.anyio

TINY = tiny_suite()
#: The tiny suite with its six tasks repeated under new ids: two and a half pages of prompts.
MANY = tuple(task.model_copy(update={"id": f"{task.id}-{n}"}) for n in range(42) for task in TINY.tasks)


async def test_a_server_bound_to_a_task_lists_that_tasks_prompt_only():
    suite = replace(TINY, load_tasks=lambda: MANY)
    task = suite.tasks[107]  # on the second page of an unbound server
    async with Client(ResiliServer(suite, NoFaults(), task=task.id).mcp) as client:
        listed = await client.list_prompts()
        prompt = await client.get_prompt(listed.prompts[0].name)
    assert [p.name for p in listed.prompts] == [task.id]
    assert listed.next_cursor is None
    assert listed.prompts[0].description == task.description
    assert prompt.messages[0].content.text == suite.prompt(task)


async def test_an_unbound_server_still_pages_through_every_task_and_refuses_a_bad_cursor():
    suite = replace(TINY, load_tasks=lambda: MANY)
    assert len(suite.tasks) > 2 * PROMPT_PAGE_SIZE  # else this test pages nothing
    names: list[str] = []
    async with Client(ResiliServer(suite, NoFaults()).mcp) as client:
        cursor = None
        while True:
            page = await client.list_prompts(cursor=cursor)
            names += [p.name for p in page.prompts]
            cursor = page.next_cursor
            if cursor is None:
                break
        with pytest.raises(MCPError) as err:
            await client.list_prompts(cursor="not-a-number")
    assert names == [t.id for t in suite.tasks] and len(names) == 252
    assert err.value.code == types.INVALID_PARAMS
