"""The proxy never faults ``finish``, the benchmark's end signal: a wildcard rule passes it by, and a
rule naming it is refused in one line before the upstream starts (a review finding: ``tool="*"``
faulted it like any tool, and the episode could not end)."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.server import Server

from mcp_resili.errors import UserError
from mcp_resili.faults import ErrorFault, RuleFaults
from mcp_resili.proxy import ProxyServer, run_proxy
from mcp_resili.trace import Trace

pytestmark = pytest.mark.anyio


def finishing_upstream() -> Server:
    """Tools ``work`` and ``finish`` (the benchmark's end signal), both answering ``ok``."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        tools = [types.Tool(name=name, input_schema={"type": "object"}) for name in ("work", "finish")]
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="ok")], _meta={"upstream/tool": params.name}
        )

    return Server("finishing", version="0", on_list_tools=list_tools, on_call_tool=call_tool)


def every_call_times_out(tool: str = "*") -> RuleFaults:
    return RuleFaults(rules=({"tool": tool, "fault": ErrorFault(code="TIMEOUT")},))


async def test_a_wildcard_rule_never_faults_finish(tmp_path):
    """``tool="*"`` faulted the upstream's ``finish`` like any tool: the episode could not end."""
    meta = {"mcp-resili/episode": "e"}
    async with Client(finishing_upstream(), mode="legacy") as upstream:
        proxy = await ProxyServer.create(upstream, every_call_times_out(), upstream="mem", trace_dir=tmp_path)
        async with Client(proxy.mcp, mode="legacy") as client:
            work = await client.call_tool("work", {}, meta=meta)
            finish = await client.call_tool("finish", {"status": "completed"}, meta=meta)
            again = await client.call_tool("finish", {"status": "completed"}, meta=meta)
    assert work.is_error and work.content[0].text.startswith("Error TIMEOUT")
    for result in (finish, again):
        assert not result.is_error and result.meta == {"upstream/tool": "finish"}  # the upstream's own
    (trace_file,) = tmp_path.iterdir()
    calls = Trace.read(trace_file).tool_calls
    assert [(c.tool, c.is_error) for c in calls] == [("work", True), ("finish", False), ("finish", False)]
    assert all(c.fault is None and c.decision is None for c in calls[1:])  # no draw spent on it


@pytest.mark.parametrize("rules", [[{"tool": "finish"}], [{"tool": "work"}, {"tool": "finish"}]])
async def test_a_rule_naming_finish_is_refused_in_one_line_before_the_upstream_starts(rules):
    plan = RuleFaults(rules=tuple({**rule, "fault": ErrorFault(code="TIMEOUT")} for rule in rules))
    with pytest.raises(UserError, match=r"^a fault rule names the tool 'finish'") as caught:
        await run_proxy("no-such-command-mcp-resili", plan, lambda proxy: anyio.sleep(0))
    assert "\n" not in str(caught.value)
    async with Client(finishing_upstream(), mode="legacy") as upstream:
        with pytest.raises(UserError, match="'finish'"):
            await ProxyServer.create(upstream, plan, upstream="mem")
