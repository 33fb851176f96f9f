"""A server's memory is bounded: per-episode and per-server budgets, events out of memory, eviction."""

from __future__ import annotations

import gc
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_resili.cli import serve as serve_cli
from mcp_resili.client.recorded import fetch_episode_trace
from mcp_resili.constants import META_EPISODE
from mcp_resili.faults import parse_fault_spec
from mcp_resili.registry.loader import get_suite
from mcp_resili.server import budget
from mcp_resili.server.app import ResiliServer
from mcp_resili.server.budget import MemoryBudget, retained
from mcp_resili.server.transports import http_app
from mcp_resili.trace import ToolCallEvent
from mcp_resili.trace.codes import EPISODE_MEMORY_LIMIT, SERVER_MEMORY_LIMIT

pytestmark = pytest.mark.anyio

SUITE = get_suite("resilibench")
LOGGER = "utility_logger"  # its result is a hundred bytes, whatever it is given
TASK = SUITE.default_tasks[0].id


def server(memory: MemoryBudget | None = None, **kw: Any) -> ResiliServer:
    return ResiliServer(SUITE, parse_fault_spec("none"), memory=memory, time_scale=0, **kw)


def meta(episode: str) -> dict[str, Any]:
    return {META_EPISODE: {"id": episode}}


def content(nbytes: int) -> dict[str, Any]:
    """Arguments of the logger carrying ``nbytes`` of message."""
    return {"data": {"message": "m" * nbytes}}


async def test_a_call_past_the_episode_budget_is_refused_naming_the_limit_and_never_runs() -> None:
    limit = 1_000_000
    served = server(MemoryBudget(episode_bytes=limit))
    async with Client(served.mcp) as client:
        first = await client.call_tool(LOGGER, content(20_000), meta=meta("e"))
        second = await client.call_tool(LOGGER, content(20_000), meta=meta("e"))
        assert not first.is_error and not second.is_error
        live = served.episodes.peek("e")
        assert live is not None
        used = live.usage.trace_bytes  # arguments and results of both calls, as JSON
        assert 40_000 < used < 41_000
        refused = await client.call_tool(LOGGER, content(limit - used + 1_000), meta=meta("e"))
        small = await client.call_tool(LOGGER, content(100), meta=meta("e"))  # still fits
    assert refused.is_error
    text = refused.content[0].text
    assert EPISODE_MEMORY_LIMIT in text and "memory budget" in text and "--max-episode-memory" in text
    assert not small.is_error
    events = served.take_events("e")
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert [c.error_code for c in calls] == [None, None, EPISODE_MEMORY_LIMIT, None]
    # It never ran: no fault decision, no ordinal (the next call is the tool's third), arguments left out.
    assert calls[2].decision is None and calls[2].arguments == {}
    assert calls[2].result is not None and calls[2].result["argument_bytes"] > limit - used
    assert calls[3].decision is not None and calls[3].decision.ordinal == 2


async def test_the_server_budget_evicts_finished_then_idle_episodes_and_refuses_when_none_can_go() -> None:
    limits = MemoryBudget(server_bytes=400_000, finished_idle_seconds=3600, pressure_idle_seconds=0)
    served = server(limits)
    async with Client(served.mcp) as client:
        # Hand-over mode holds each call's events until taken: three episodes of ~100 kB each.
        for name in ("done", "idle", "other"):
            await client.call_tool(LOGGER, content(100_000), meta=meta(name))
        await client.call_tool("finish", {"status": "completed", "summary": "x"}, meta=meta("done"))
        assert served.recorder.account.total > 300_000
        # The next 100 kB do not fit: the finished episode goes first, the LRU idle one is spared.
        admitted = await client.call_tool(LOGGER, content(100_000), meta=meta("new"))
        assert not admitted.is_error
        assert served.episodes.peek("done") is None and served.episodes.peek("idle") is not None
        with pytest.raises(MCPError) as closed:
            await client.call_tool(LOGGER, content(100), meta=meta("done"))
        assert closed.value.code == types.INVALID_PARAMS and "needed its memory" in closed.value.error.message
        # A call bigger than all the others together: every other episode goes, then it is refused.
        too_big = await client.call_tool(LOGGER, content(390_000), meta=meta("new"))
    assert too_big.is_error and SERVER_MEMORY_LIMIT in too_big.content[0].text
    assert "--max-server-memory" in too_big.content[0].text
    assert served.episodes.peek("idle") is None and served.episodes.peek("other") is None
    assert served.recorder.account.evicted == {"finished": 1, "idle": 2}


async def test_the_account_gives_back_what_a_closed_episode_held() -> None:
    served = server()
    account = served.recorder.account
    async with Client(served.mcp) as client:
        await client.call_tool(LOGGER, content(50_000), meta=meta("a"))
        held = account.total
        live = served.episodes.peek("a")
        assert live is not None and held == retained(live) > 50_000
        served.take_events("a")  # the runner took the events: they are no longer held
        assert account.total < held - 50_000
        del live
        assert served.close_episode("a") is not None
    gc.collect()
    assert account.total == 0


async def test_a_served_episode_keeps_no_events_and_its_trace_comes_back_whole() -> None:
    handed, served = server(), server(hand_over_events=False)
    for one in (handed, served):
        async with Client(one.mcp) as client:
            for n in range(3):
                await client.call_tool(LOGGER, content(1_000 * (n + 1)), meta=meta("e"))
            await client.call_tool("finish", {"status": "completed", "summary": "ok"}, meta=meta("e"))
            live = one.episodes.peek("e")
            assert live is not None
            if one is served:  # nothing grows in memory: the events went to the spool file
                assert live.pending == [] and live.usage.pending_bytes == 0 and live.trace_path is not None
            one.events = await fetch_episode_trace(client, "e")  # type: ignore[attr-defined]
    theirs, ours = handed.events, served.events  # type: ignore[attr-defined]
    assert theirs is not None and ours is not None and len(ours) == 4
    assert [e.model_dump() for e in ours] == [e.model_dump() for e in theirs]
    assert not list(served.recorder.directory.iterdir())  # type: ignore[union-attr]  # read once, gone
    served.recorder.close()


async def test_an_evicted_served_episode_can_still_hand_over_its_trace() -> None:
    served = server(MemoryBudget(finished_idle_seconds=0), hand_over_events=False)
    async with Client(served.mcp) as client:
        await client.call_tool(LOGGER, content(1_000), meta=meta("gone"))
        await client.call_tool("finish", {"status": "completed", "summary": "ok"}, meta=meta("gone"))
        await client.call_tool(LOGGER, content(1_000), meta=meta("next"))  # evicts the finished one
        assert served.episodes.peek("gone") is None
        events = await fetch_episode_trace(client, "gone")
    assert events is not None and [e.event for e in events] == ["tool_call", "finish"]
    served.recorder.close()


async def test_deleting_an_http_session_closes_its_episode_at_once() -> None:
    served = server(hand_over_events=False)
    app = http_app(served, "127.0.0.1")
    starlette_app = app.app  # type: ignore[attr-defined]
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with starlette_app.router.lifespan_context(starlette_app):
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as http:
            opened = await http.post("/mcp", json=hello, headers=headers)
            session = opened.headers["mcp-session-id"]
            headers = {**headers, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
            await http.post(
                "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
            )
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": LOGGER, "arguments": content(1_000)},
            }
            answered = await http.post("/mcp", json=call, headers=headers)
            assert answered.status_code == 200 and served.episodes.peek(session) is not None
            deleted = await http.delete("/mcp", headers=headers)
    assert deleted.status_code < 300
    assert served.episodes.peek(session) is None
    assert served.recorder.account.evicted["session deleted"] == 1
    served.recorder.close()


def test_the_serve_flags_default_to_the_budget_module_and_refuse_nonsense(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert serve_cli.DEFAULT_EPISODE_MIB * budget.MIB == budget.DEFAULT_EPISODE_BYTES
    assert serve_cli.DEFAULT_SERVER_MIB * budget.MIB == budget.DEFAULT_SERVER_BYTES
    assert serve_cli._mebibytes("0.5") == budget.MIB // 2
    for bad in ("0", "-3", "nan", "lots"):
        with pytest.raises(Exception, match="MiB"):
            serve_cli._mebibytes(bad)
