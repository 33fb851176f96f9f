"""ResiliBench's tools as the server serves them: the 30 tools with discovery, the schema maxima of
arguments that drive work, and the parser's refusals of content it cannot use."""

import pytest
from mcp import Client

from mcp_resili.check import check_server
from mcp_resili.constants import META_EPISODE
from mcp_resili.faults import NoFaults
from mcp_resili.registry.loader import get_suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.suites.resilibench.library import resilibench_library

pytestmark = pytest.mark.anyio


def make_server():
    return ResiliServer(get_suite("resilibench"), NoFaults())


def meta(episode):
    return {META_EPISODE: {"id": episode}}


async def test_the_server_passes_every_contract_check_with_resilibenchs_tools():
    async with Client(make_server().mcp) as client:
        report = await check_server(client, "in-memory", call_tools=True)
    assert report.ok(strict=True), report.render()
    assert report.tools == 33 and report.calls > 33  # 30 tools, finish, search_tools, tool_info


async def test_lists_the_30_tools_finish_and_discovery_with_schemas():
    async with Client(make_server().mcp) as client:
        tools = (await client.list_tools()).tools
    names = {t.name for t in tools}
    assert names == {s.name for s in resilibench_library()} | {"finish", "search_tools", "tool_info"}
    reader = next(t for t in tools if t.name == "file_operations_reader")
    assert reader.input_schema["required"] == ["source"] and reader.output_schema is not None


@pytest.mark.parametrize(
    "options",
    [
        {"iterations": 10**400},
        {"iterations": float("nan")},
        {"iterations": float("inf")},
        {"iterations": 1e308},
    ],
    ids=["10**400", "nan", "inf", "1e308"],
)
async def test_numbers_no_tool_can_use_are_refused_up_front_as_invalid_input(options):
    async with Client(make_server().mcp) as client:
        result = await client.call_tool(
            "computation_simulator", {"data": {}, "options": options}, meta=meta("e")
        )
        still = await client.call_tool("computation_simulator", {"data": {"values": [1, 2]}}, meta=meta("e"))
    assert result.is_error and result.content[0].text.startswith("Error INVALID_INPUT")
    assert "options/iterations" in result.content[0].text
    assert not still.is_error


async def test_work_driving_arguments_have_schema_maxima():
    async with Client(make_server().mcp) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        too_many = await client.call_tool(
            "computation_simulator", {"data": {}, "options": {"iterations": 10**6}}, meta=meta("e")
        )
    assert (
        tools["computation_simulator"].input_schema["properties"]["options"]["properties"]["iterations"][
            "maximum"
        ]
        == 10_000
    )
    assert too_many.is_error and "INVALID_INPUT" in too_many.content[0].text


@pytest.mark.parametrize(
    ("content", "fmt"),
    [
        ("id,name\n1,a\n", "xml"),  # the format-mismatch flaw prescribes exactly this: CSV given as XML
        ("id,name,category,value\n1,a,b,nan\n", "csv"),
        ('[{"id": Infinity, "name": "a", "category": "b", "value": 1}]', "json"),
        ("[" * 5000 + "]" * 5000, "json"),
    ],
    ids=["csv-as-xml", "nan-value", "infinite-id", "deep-nesting"],
)
async def test_content_the_parser_cannot_use_is_its_own_invalid_input(content, fmt):
    async with Client(make_server().mcp) as client:
        arguments = {"data": {"content": content, "format": fmt}}
        result = await client.call_tool("data_processing_parser", arguments, meta=meta("e"))
    # Refused by the world check (the declared format contradicts the content) or by the parser itself:
    # either way the tool's own INVALID_INPUT naming the problem, never a crash or a protocol error.
    text = result.content[0].text
    assert result.is_error and text.startswith("Error INVALID_INPUT: ")
    assert f"cannot parse {fmt}" in text or f"data.format says {fmt!r}" in text
