"""The fault-injecting proxy in front of any MCP server. Its upstream is our own server playing the
tiny suite (tests/tiny_suite) where a test needs real tools, or a hand-made server."""

import json
import shlex
import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from servers import child_env, cli_command, with_test_path
from tiny_suite import suite as tiny_suite

from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.constants import META_EVENT
from mcp_resili.faults import ErrorFault, NoFaults, RuleFaults
from mcp_resili.proxy import ClientRelay, ProxyServer, UpstreamError, connect_upstream, run_proxy
from mcp_resili.report import summarize
from mcp_resili.server.app import ResiliServer
from mcp_resili.trace import Trace
from mcp_resili.trace.codes import UPSTREAM_CLOSED

pytestmark = pytest.mark.anyio

TINY = tiny_suite()


def first_call_times_out(tool_glob, side="request"):
    return RuleFaults(
        rules=({"tool": tool_glob, "calls": (1,), "fault": ErrorFault(code="TIMEOUT", side=side)},)
    )


async def test_proxy_exposes_the_upstream_surface_unchanged():
    upstream = ResiliServer(TINY, NoFaults())
    async with Client(upstream.mcp) as direct:
        proxy = await ProxyServer.create(direct, NoFaults(), upstream="in-memory")
        async with Client(proxy.mcp) as client:
            via_proxy = (await client.list_tools()).tools
            assert [t.model_dump() for t in via_proxy] == [
                t.model_dump() for t in (await direct.list_tools()).tools
            ]
            prompts = await client.list_prompts()
            assert [p.name for p in prompts.prompts] == [
                p.name for p in (await direct.list_prompts()).prompts
            ]
            args = {"key": "fig"}
            proxied = await client.call_tool("lookup", args, meta={"mcp-resili/episode": "p1"})
            plain = await direct.call_tool("lookup", args, meta={"mcp-resili/episode": "d1"})
    assert proxied.content == plain.content and proxied.structured_content == plain.structured_content
    assert proxied.structured_content == {"key": "fig", "value": 11}


async def test_request_side_fault_never_reaches_the_upstream(tmp_path):
    upstream = ResiliServer(TINY, NoFaults(), trace_dir=tmp_path / "upstream")
    async with Client(upstream.mcp) as direct:
        proxy = await ProxyServer.create(
            direct,
            first_call_times_out("l*"),
            upstream="in-memory",
            trace_dir=tmp_path / "proxy",
            expose_faults=True,
        )
        async with Client(proxy.mcp) as client:
            meta = {"mcp-resili/episode": "e"}
            first = await client.call_tool("lookup", {"key": "apple"}, meta=meta)
            second = await client.call_tool("lookup", {"key": "apple"}, meta=meta)
    assert first.is_error and first.content[0].text.startswith("Error TIMEOUT")
    assert first.meta[META_EVENT]["fault"]["code"] == "TIMEOUT"
    assert not second.is_error
    (upstream_trace,) = (tmp_path / "upstream").iterdir()
    assert len(Trace.read(upstream_trace).tool_calls) == 1  # only the second call got through
    (proxy_trace,) = (tmp_path / "proxy").iterdir()
    trace = Trace.read(proxy_trace)
    assert trace.header.suite == "proxy" and [c.is_error for c in trace.tool_calls] == [True, False]


async def test_response_side_fault_lets_the_upstream_write_happen(tmp_path):
    upstream = ResiliServer(TINY, NoFaults(), trace_dir=tmp_path)
    async with Client(upstream.mcp) as direct:
        proxy = await ProxyServer.create(direct, first_call_times_out("record", "response"), upstream="mem")
        async with Client(proxy.mcp) as client:
            meta = {"mcp-resili/episode": "e"}
            looked = await client.call_tool("lookup", {"key": "apple"}, meta=meta)  # the write's dependency
            result = await client.call_tool("record", {"label": "a", "value": 3}, meta=meta)
    assert not looked.is_error and result.is_error and result.content[0].text.startswith("Error TIMEOUT")
    (trace_file,) = tmp_path.iterdir()
    calls = Trace.read(trace_file).tool_calls
    assert [(c.tool, c.is_error) for c in calls] == [("lookup", False), ("record", False)]
    assert calls[1].result == {"record_id": "R-0001", "count": 1}  # the upstream wrote it


@pytest.mark.parametrize("side", ["request", "response"])
async def test_runner_through_the_proxy_over_stdio_sees_the_proxy_faults(tmp_path, side):
    """Response side too: the proxy answers the runner's trace request with its own record (it used to
    forward it, and the upstream's record, with no fault, replaced the proxy's)."""
    faults = tmp_path / "faults.json"
    faults.write_text(
        json.dumps(
            {
                "kind": "rules",
                "rules": [
                    {
                        "tool": "scale",
                        "calls": [1],
                        "fault": {"type": "error", "code": "TIMEOUT", "side": side},
                    }
                ],
            }
        )
    )
    inner = f"{sys.executable} -m mcp_resili serve --suite tiny --faults none"
    proxy = f"{sys.executable} -m mcp_resili proxy --upstream {shlex.quote(inner)} --faults {faults}"
    proxy += " --expose-faults"
    config = RunConfig(
        suite="tiny",
        server=with_test_path(proxy),
        tasks=("tiny-2", "tiny-3", "tiny-5"),
        trials=1,
        db=tmp_path / "r.db",
    )
    result = await execute(config, suite=TINY)
    by_model = {s.model: s for s in summarize(result.rows)}
    assert by_model["scripted:oracle"].levels["full"].value == 1.0
    # Every task scales; the first scale call fails, and the naive agent never retries.
    assert by_model["scripted:naive"].levels["full"].value == 0.0
    first_scale_calls = [
        next(c for c in Trace.from_lines(row.trace.splitlines()).tool_calls if c.tool == "scale")
        for row in result.rows
    ]
    assert len(first_scale_calls) == 6 and all(c.fault is not None and c.is_error for c in first_scale_calls)


def marker_upstream() -> Server:
    """An upstream whose one tool returns its own ``_meta``, logs, and announces list changes."""

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[types.Tool(name="mark", input_schema={"type": "object"})])

    async def call_tool(ctx, params):
        log = types.LoggingMessageNotificationParams(level="info", data="marking")
        await ctx.session.send_notification(types.LoggingMessageNotification(params=log), ctx.request_id)
        await ctx.session.send_tool_list_changed()
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="ok")],
            structured_content={"n": 1},
            _meta={"upstream/marker": "kept"},
        )

    return Server("marker", version="1.2.3", on_list_tools=list_tools, on_call_tool=call_tool)


async def test_results_keep_the_upstream_meta_and_notifications_pass_through():
    relay = ClientRelay()
    seen: list[str] = []
    arrived = anyio.Event()

    async def on_message(message):
        if isinstance(message, Exception):
            return
        seen.append(message.method)
        if {"notifications/message", "notifications/tools/list_changed"} <= set(seen):
            arrived.set()

    async with Client(marker_upstream(), mode="legacy", **relay.client_options()) as upstream:
        plain = await ProxyServer.create(upstream, NoFaults(), upstream="mem", relay=relay)
        exposed = await ProxyServer.create(upstream, NoFaults(), upstream="mem", expose_faults=True)
        async with Client(plain.mcp, mode="legacy", message_handler=on_message) as client:
            assert client.server_info.name == "marker" and client.server_info.version == "1.2.3"
            result = await client.call_tool("mark", {"x": 1})
            with anyio.fail_after(5):
                await arrived.wait()
        async with Client(exposed.mcp, mode="legacy") as client:
            with_faults = await client.call_tool("mark", {"x": 1})
    assert result.meta == {"upstream/marker": "kept"} and result.structured_content == {"n": 1}
    assert with_faults.meta["upstream/marker"] == "kept"
    assert (
        with_faults.meta[META_EVENT]["arguments"] == {"x": 1}
        and with_faults.meta[META_EVENT]["fault"] is None
    )


async def test_a_faulted_result_carries_no_meta_unless_faults_are_exposed():
    async with Client(marker_upstream(), mode="legacy") as upstream:
        proxy = await ProxyServer.create(upstream, first_call_times_out("mark"), upstream="mem")
        async with Client(proxy.mcp, mode="legacy") as client:
            faulted = await client.call_tool("mark", {})
            untouched = await client.call_tool("mark", {})
    assert faulted.is_error and faulted.meta is None
    assert not untouched.is_error and untouched.meta == {"upstream/marker": "kept"}


async def test_an_upstream_json_rpc_error_reaches_the_client_as_sent_and_is_recorded(tmp_path):
    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[types.Tool(name="refuse", input_schema={"type": "object"})])

    async def call_tool(ctx, params):
        raise MCPError(types.INVALID_PARAMS, "refused on purpose")

    upstream_server = Server("refuser", on_list_tools=list_tools, on_call_tool=call_tool)
    async with Client(upstream_server, mode="legacy") as upstream:
        proxy = await ProxyServer.create(upstream, NoFaults(), upstream="mem", trace_dir=tmp_path)
        async with Client(proxy.mcp, mode="legacy") as client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("refuse", {})
    assert caught.value.code == types.INVALID_PARAMS and caught.value.error.message == "refused on purpose"
    (trace_file,) = tmp_path.iterdir()
    (call,) = Trace.read(trace_file).tool_calls
    assert call.is_error and call.error_code == f"JSONRPC_{types.INVALID_PARAMS}"


DYING = Path(__file__).parent / "fakes" / "dying_server.py"


async def test_after_its_upstream_dies_the_proxy_answers_calls_with_is_error_then_fails_in_one_line():
    answers = []

    async def serve(proxy):
        async with Client(proxy.mcp, mode="legacy") as client:
            answers.append(await client.list_tools())
            answers.append(await client.call_tool("crash", {}))  # the call the upstream dies on
            answers.append(await client.call_tool("crash", {}))  # a call after it died

    with anyio.fail_after(20), pytest.raises(UpstreamError, match="closed the connection"):
        await run_proxy(f"{sys.executable} {DYING}", NoFaults(), serve)
    listing, during, after = answers
    assert [t.name for t in listing.tools] == ["crash"]
    for result in (during, after):
        assert result.is_error and result.content[0].text.startswith(f"Error {UPSTREAM_CLOSED}:")
        assert "closed the connection" in result.content[0].text


async def test_the_proxy_process_answers_a_call_its_upstream_dies_during_with_is_error():
    """Over stdio, the upstream exiting mid-call: no hang, the client's call gets an ``isError`` result."""
    command = cli_command("proxy", "--upstream", f"{sys.executable} {DYING}", "--faults", "none")
    with anyio.fail_after(30):  # a guard only: the answers come as soon as the upstream is gone
        async with await anyio.open_process(command, env=child_env()) as proxy:
            assert proxy.stdin is not None and proxy.stdout is not None and proxy.stderr is not None
            replies = BufferedByteReceiveStream(proxy.stdout)

            async def send(message):
                await proxy.stdin.send(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

            async def ask(request_id, method, params):
                await send({"id": request_id, "method": method, "params": params})
                while True:  # skip notifications
                    reply = json.loads(await replies.receive_until(b"\n", 1 << 20))
                    if reply.get("id") == request_id:
                        return reply

            client_info = {"name": "test", "version": "1"}
            hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client_info}
            await ask(1, "initialize", hello)
            await send({"method": "notifications/initialized"})
            call = {"name": "crash", "arguments": {}}
            during = await ask(2, "tools/call", call)  # the upstream exits on receiving it
            after = await ask(3, "tools/call", call)  # the proxy keeps answering
            await proxy.stdin.aclose()  # the client leaves: the proxy stops, saying why
            status = await proxy.wait()
            stderr = b"".join([chunk async for chunk in proxy.stderr]).decode()
    for reply in (during, after):
        result = reply["result"]
        assert result["isError"] is True
        assert result["content"][0]["text"].startswith(f"Error {UPSTREAM_CLOSED}: the server")
        assert "closed the connection" in result["content"][0]["text"]
    assert status == 2 and "Traceback" not in stderr
    assert stderr.splitlines()[-1].startswith("mcp-resili: error: ")
    assert "closed the connection" in stderr.splitlines()[-1]


async def test_connecting_to_a_missing_upstream_fails_with_one_line():
    with pytest.raises(UpstreamError, match="command not found"):
        async with connect_upstream("no-such-command-mcp-resili"):
            pass


#: A handshake-era server that never answers ``server/discover`` (it ignores every method it does
#: not know) and writes down the methods it was sent, in order.
IGNORES_DISCOVER = r"""
import json, sys
log = open(sys.argv[1], "a")
for line in sys.stdin:
    request = json.loads(line)
    log.write(request.get("method", "") + "\n"); log.flush()
    if request.get("id") is None:
        continue
    if request["method"] == "initialize":
        result = {"protocolVersion": request["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "ignores-discover", "version": "0"}}
    elif request["method"] == "tools/list":
        result = {"tools": [{"name": "ok", "inputSchema": {"type": "object"}}]}
    else:
        continue
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}) + "\n")
    sys.stdout.flush()
"""


async def test_the_discover_probe_waits_the_connect_timeout_not_the_sdks_own(tmp_path, monkeypatch):
    # The SDK's fixed probe wait made an hour long: only our bound can end the probe.
    monkeypatch.setattr("mcp.client.session.DISCOVER_TIMEOUT_SECONDS", 3600.0)
    script, methods = tmp_path / "ignores.py", tmp_path / "methods.log"
    script.write_text(IGNORES_DISCOVER)
    target = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {shlex.quote(str(methods))}"
    with anyio.fail_after(120):  # a guard against hanging, far beyond the 2 s bound
        async with connect_upstream(target, read_timeout_seconds=2.0, mode="auto") as upstream:
            assert upstream.client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
            listed = await upstream.client.list_tools()
    assert [tool.name for tool in listed.tools] == ["ok"]
    assert methods.read_text().split()[:2] == ["server/discover", "initialize"]


async def test_a_fault_that_leaves_the_result_as_it_was_passes_the_upstream_result_through():
    """``high_latency`` (the same result, late): rebuilt from the record, the result lost its ``_meta``
    and content blocks, and showed the agent that a fault fired."""
    from mcp_resili.faults.chaos import HighLatency

    late = RuleFaults(rules=({"tool": "*", "calls": (1,), "fault": HighLatency(delay_seconds=0.0)},))
    upstream = marker_upstream()
    async with Client(upstream, mode="legacy") as direct:
        plain = await direct.call_tool("mark", {"x": 1})
        proxy = await ProxyServer.create(direct, late, upstream="mem", time_scale=0.0)
        async with Client(proxy.mcp, mode="legacy") as client:
            proxied = await client.call_tool("mark", {"x": 1}, meta={"mcp-resili/episode": "e"})
    assert proxied.model_dump() == plain.model_dump() and plain.meta


RAW = Path(__file__).parent / "fakes" / "raw_server.py"


async def test_an_upstream_result_that_breaks_the_schema_is_the_calls_error_and_is_recorded(tmp_path):
    """It reached the agent as -32602 "Invalid request parameters" (blaming its arguments), and the
    call, whose ordinal and decision were spent, was missing from the trace."""

    answers = []

    async def serve(proxy):
        async with Client(proxy.mcp, mode="legacy") as client:
            answers.append(await client.call_tool("fine", {}, meta={"mcp-resili/episode": "e"}))

    await run_proxy(f"{sys.executable} {RAW} --bad-results", NoFaults(), serve, trace_dir=tmp_path)
    (result,) = answers
    assert result.is_error
    assert result.content[0].text.startswith(
        "Error UPSTREAM_INVALID_RESULT: fine's result breaks the MCP schema"
    )
    (trace_file,) = tmp_path.iterdir()
    (call,) = Trace.read(trace_file).tool_calls
    assert call.error_code == "UPSTREAM_INVALID_RESULT" and call.decision is not None


async def test_an_upstream_whose_listing_breaks_the_schema_is_one_line_at_start():
    with pytest.raises(UpstreamError, match="tools/list result breaks the MCP schema"):
        await run_proxy(f"{sys.executable} {RAW}", NoFaults(), lambda proxy: anyio.sleep(0))


async def test_an_http_upstream_killed_mid_session_fails_the_call_instead_of_hanging_it(tmp_path):
    """Review finding: the call after the kill got no answer (60 s and more) and was recorded as the
    client's cancellation. It is the upstream's failure: `UPSTREAM_CLOSED`, at once, as over stdio."""
    from servers import running_http_server

    answers = []
    meta = {"mcp-resili/episode": "e"}
    args = {"key": "apple"}

    async with running_http_server("--suite", "tiny", "--faults", "none", workdir=tmp_path) as upstream:

        async def serve(proxy):
            async with Client(proxy.mcp, mode="legacy") as client:
                answers.append(await client.call_tool("lookup", args, meta=meta))
                upstream.process.kill()
                upstream.process.wait()
                answers.append(await client.call_tool("lookup", args, meta=meta))

        with anyio.fail_after(30):  # a guard only: the answer comes at once
            await run_proxy(upstream.url, NoFaults(), serve, trace_dir=tmp_path / "traces")
    before, after = answers
    assert not before.is_error
    assert after.is_error and after.content[0].text.startswith(f"Error {UPSTREAM_CLOSED}:")
    (trace_file,) = (tmp_path / "traces").iterdir()
    assert [c.error_code for c in Trace.read(trace_file).tool_calls] == [None, UPSTREAM_CLOSED]


async def test_episodes_naming_different_tasks_meet_their_own_draws_through_the_proxy(tmp_path):
    """The proxy has no tasks: it keyed every episode 'untasked/TRIAL', so trial 0 of every task met
    the same fault draws. The task the episode names keys them now, as on our own server."""
    upstream = ResiliServer(TINY, NoFaults())
    coin = RuleFaults(rules=({"tool": "*", "probability": 0.5, "fault": ErrorFault(code="TIMEOUT")},))
    async with Client(upstream.mcp) as direct:
        proxy = await ProxyServer.create(direct, coin, upstream="mem", trace_dir=tmp_path)
        async with Client(proxy.mcp) as client:
            tasks = [t.id for t in TINY.tasks[:2]]
            for task in tasks:
                meta = {"mcp-resili/episode": {"id": task, "task": task, "trial": 0}}
                for _ in range(3):
                    await client.call_tool("echo", {"text": "m"}, meta=meta)
    keys = {Trace.read(path).header.fault_key for path in tmp_path.iterdir()}
    assert keys == {f"{task}/0" for task in tasks}
