"""Tool discovery (search_tools, tool_info): ranked, offline, unfaulted and left out of scoring."""

import pytest
from mcp import Client

from mcp_resili.constants import META_EPISODE
from mcp_resili.faults import NoFaults, parse_fault_spec
from mcp_resili.registry.loader import get_suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.scoring import score
from mcp_resili.suites.resilibench.tasks import default_tasks
from mcp_resili.tools.search import ToolIndex
from mcp_resili.trace import FinishEvent, ToolCallEvent, Trace, TraceHeader
from suites.resilibench.gold import gold_run

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("query", "best"),
    [
        ("file reader", "file_operations_reader"),
        ("parse csv into records", "data_processing_parser"),
        ("send payload to http endpoint", "network_poster"),
        ("authenticate service token", "integration_authenticator"),
        ("compress archive", "file_operations_compressor"),
    ],
)
def test_search_ranks_the_obvious_tool_first(query, best):
    hits = ToolIndex(resilibench_library().specs).search(query, 5)
    assert hits[0].name == best
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_search_returns_nothing_for_unrelated_words_and_rejects_bad_limits():
    index = ToolIndex(resilibench_library().specs)
    assert index.search("zebra quantum", 5) == []
    with pytest.raises(ValueError, match="limit"):
        index.search("reader", 0)


async def test_discovery_tools_answer_through_mcp_without_faults():
    # Real tools (almost) always fail under base=0.001: discovery must never be faulted.
    server = ResiliServer(
        get_suite("resilibench"),
        parse_fault_spec("resilibench:base=0.001,min=0", get_suite("resilibench").spec_scope),
    )
    meta = {META_EPISODE: {"id": "d1"}}
    async with Client(server.mcp) as client:
        found = await client.call_tool("search_tools", {"query": "validate records", "limit": 3}, meta=meta)
        info = await client.call_tool("tool_info", {"name": "network_poster"}, meta=meta)
        unknown = await client.call_tool("tool_info", {"name": "network_postr"}, meta=meta)
        bad = await client.call_tool("search_tools", {"query": ""}, meta=meta)
        # Review finding: arguments the published schemas forbid were accepted (a bool taken as limit 1).
        forbidden = [
            ("search_tools", {"query": "reader", "limit": True}, "limit: True is not of type 'integer'"),
            ("search_tools", {"query": "reader", "extra": 1}, "Additional properties are not allowed"),
            ("tool_info", {"name": "network_poster", "extra": 1}, "Additional properties are not allowed"),
        ]
        refused = [await client.call_tool(name, arguments, meta=meta) for name, arguments, _ in forbidden]
        blank = await client.call_tool("search_tools", {"query": "   "}, meta=meta)  # the schema lets it by
        real = await client.call_tool("data_processing_filter", {"data": {"records": []}}, meta=meta)
    assert not found.is_error and len(found.structured_content["results"]) == 3
    assert found.structured_content["results"][0]["name"] == "data_processing_validator"
    assert info.structured_content["dependencies"] == [
        "data_processing_transformer",
        "integration_authenticator",
    ]
    assert "must succeed before" in info.content[0].text
    assert unknown.is_error and "network_poster" in unknown.content[0].text
    assert bad.is_error
    assert (
        blank.is_error
        and blank.content[0].text == "Error INVALID_INPUT: search_tools needs a non-empty string 'query'"
    )
    declared = {t.name: (t.meta or {}).get("mcp-resili/errors") for t in server._tools}
    assert declared["search_tools"] == declared["tool_info"] == ["INVALID_INPUT"]  # what they answer
    for result, (name, _, problem) in zip(refused, forbidden, strict=True):
        text = result.content[0].text
        assert result.is_error and text.startswith(f"Error INVALID_INPUT: invalid arguments for {name}: ")
        assert problem in text
    assert real.is_error  # the fault plan is live for real tools
    # Review finding: the server's own trace left discovery calls out (a `serve` trace then scored
    # discovery_calls 0). Recorded now, with no fault decision and no ordinal: they cost no call.
    events = server.take_events("d1")
    discovery = [e for e in events if e.tool in ("search_tools", "tool_info")]
    assert [e.tool for e in discovery] == ["search_tools", "tool_info", "tool_info", "search_tools"] + [
        name for name, _, _ in forbidden
    ] + ["search_tools"]
    assert all(e.decision is None and e.fault is None for e in discovery)
    assert [e.is_error for e in discovery[:4]] == [False, False, True, True]
    assert discovery[0].result["results"][0]["name"] == "data_processing_validator"
    assert discovery[2].error_code == "INVALID_INPUT" and "network_poster" in discovery[2].result["message"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def test_discovery_calls_do_not_count_for_scoring_or_termination():
    task = default_tasks()[0]
    header = TraceHeader(
        suite="resilibench", task=task.id, episode="e", seed=0, fault_plan={"kind": "none"}, fault_key="k"
    )
    events = []
    seq = 0
    for gold in gold_run(task):
        for _ in range(3):  # many discovery calls, as a searching agent makes
            seq += 1
            events.append(
                ToolCallEvent(
                    episode="e", seq=seq, tool="search_tools", arguments={"query": "x"}, is_error=False
                )
            )
        seq += 1
        events.append(
            ToolCallEvent(
                episode="e",
                seq=seq,
                tool=gold.tool,
                arguments=gold.arguments,
                is_error=False,
                result=gold.result,
            )
        )
    events.append(FinishEvent(episode="e", seq=seq + 1, status="completed"))
    result = score(task, Trace(header=header, events=tuple(events)))
    assert result.label == "full"
    assert result.components["discovery_calls"] == 3 * len(task.workflow.steps)
    assert result.components["bound_ii_full_possible"] is True


async def test_suites_without_discovery_do_not_list_it():
    from dataclasses import replace

    suite = replace(get_suite("resilibench"), discovery=False)
    async with Client(ResiliServer(suite, NoFaults()).mcp) as client:
        names = {t.name for t in (await client.list_tools()).tools}
    assert "search_tools" not in names and "tool_info" not in names
