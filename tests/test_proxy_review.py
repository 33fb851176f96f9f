"""Review findings on the proxy: notifications kept to their own client session, ``finish`` never faulted
by a wildcard rule, a prompt exit once stdin ends during a hung upstream call, and a clean SIGTERM over
HTTP."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
import uvicorn
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client, StdioServerParameters
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from servers import child_env, cli_command

from mcp_resili.errors import UserError
from mcp_resili.faults import ErrorFault, RuleFaults
from mcp_resili.faults.rules import NoFaults
from mcp_resili.proxy import ProxyServer, run_proxy
from mcp_resili.server.transports import http_app
from mcp_resili.trace import Trace

pytestmark = pytest.mark.anyio

#: A guard only: every wait below ends as soon as what it waits for happens.
GUARD = 20.0

#: A hand-written JSON-RPC server over stdio (handshake era). ``wait`` is answered once ``release`` is
#: called, and logs on the way; ``hang`` logs, then never answers and stops reading its input.
UPSTREAM = r"""
import json, sys, threading

TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("wait", "release", "hang")]
waiting = []

def send(message):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()

def log(data):
    send({"method": "notifications/message", "params": {"level": "info", "data": data}})

def reply(message_id, text):
    send({"id": message_id, "result": {"content": [{"type": "text", "text": text}]}})

for line in sys.stdin:
    request = json.loads(line)
    method, message_id = request.get("method"), request.get("id")
    if message_id is None:
        continue
    if method == "initialize":
        send({"id": message_id, "result": {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}, "logging": {}},
            "serverInfo": {"name": "review-upstream", "version": "0"},
        }})
    elif method == "tools/list":
        send({"id": message_id, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name = request["params"]["name"]
        if name == "wait":
            waiting.append(message_id)
            log("waiting")
        elif name == "release":
            log("released")  # written for the waiting call, but nothing on stdio says so
            for waiter in waiting:
                reply(waiter, "released")
            reply(message_id, "done")
        elif name == "hang":
            log("hanging")
            threading.Event().wait()  # hung: never answers, never reads again
    else:
        send({"id": message_id, "result": {}})
"""


@pytest.fixture
def upstream_command(tmp_path: Path) -> str:
    script = tmp_path / "upstream.py"
    script.write_text(UPSTREAM)
    return f"{sys.executable} {script}"


class _NoSignals(uvicorn.Server):
    """A uvicorn server that leaves the test process's signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` on a loopback port; yield its MCP URL; stop it gracefully on exit.

    The socket listens before uvicorn starts: a client connecting early waits in the backlog.
    """
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    server = _NoSignals(config)
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve, [sock])
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            server.should_exit = True


def log_collector(logs: list[Any], heard: anyio.Event) -> Callable[[Any], Any]:
    async def on_message(message: Any) -> None:
        if isinstance(message, types.LoggingMessageNotification):
            logs.append(message.params.data)
            heard.set()

    return on_message


@contextlib.asynccontextmanager
async def two_sessions(
    url: str, logs: dict[str, list[Any]], heard: dict[str, anyio.Event]
) -> AsyncIterator[tuple[Client, Client]]:
    """Clients ``a`` and ``b`` of the proxy at ``url`` (separate HTTP sessions), each collecting its logs."""
    async with (
        Client(url, mode="legacy", message_handler=log_collector(logs["a"], heard["a"])) as a,
        Client(url, mode="legacy", message_handler=log_collector(logs["b"], heard["b"])) as b,
    ):
        yield a, b


def serve_over_http(scenario: Callable[[str], Any]) -> Callable[[ProxyServer], Any]:
    async def serve(proxy: ProxyServer) -> None:
        async with serving(http_app(proxy, "127.0.0.1")) as url:
            await scenario(url)

    return serve


# --- 1. an upstream notification reaches its own client session only --------------------------


def talking_upstream(arrived: dict[str, anyio.Event], go: dict[str, anyio.Event]) -> Server:
    """``talk(who)`` waits for ``go[who]``, logs ``for WHO`` on its own request, then answers."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="talk", input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        who = str((params.arguments or {})["who"])
        arrived[who].set()
        await go[who].wait()
        log = types.LoggingMessageNotificationParams(level="info", data=f"for {who}")
        await ctx.session.send_notification(types.LoggingMessageNotification(params=log), ctx.request_id)
        return types.CallToolResult(content=[types.TextContent(type="text", text=who)])

    return Server("talking", version="0", on_list_tools=list_tools, on_call_tool=call_tool)


async def test_an_http_upstreams_log_reaches_the_session_whose_call_it_belongs_to():
    """It went to the newest call in flight: client B, whose call started later, got A's log."""
    arrived = {who: anyio.Event() for who in "ab"}
    go = {who: anyio.Event() for who in "ab"}
    logs: dict[str, list[Any]] = {"a": [], "b": []}
    heard = {who: anyio.Event() for who in "ab"}

    async def scenario(url: str) -> None:
        async with two_sessions(url, logs, heard) as (a, b), anyio.create_task_group() as group:
            done = {who: anyio.Event() for who in "ab"}

            async def talk(client: Client, who: str) -> None:
                await client.call_tool("talk", {"who": who})
                done[who].set()

            group.start_soon(talk, a, "a")
            await arrived["a"].wait()
            group.start_soon(talk, b, "b")  # B's call is the newest in flight when A's log comes
            await arrived["b"].wait()
            go["a"].set()
            await done["a"].wait()
            go["b"].set()
            await done["b"].wait()
            await heard["b"].wait()
            assert logs["b"] == ["for b"]  # (A's, sent before B's answer, would have come first)
            await heard["a"].wait()
        assert logs == {"a": ["for a"], "b": ["for b"]}

    upstream = talking_upstream(arrived, go)
    with anyio.fail_after(GUARD):
        async with serving(http_app(_Holder(upstream), "127.0.0.1")) as upstream_url:
            await run_proxy(upstream_url, NoFaults(), serve_over_http(scenario))


class _Holder:
    """What `http_app` serves: an object holding a lowlevel server."""

    def __init__(self, mcp: Server) -> None:
        self.mcp = mcp


async def test_a_stdio_upstreams_log_that_cannot_be_attributed_is_dropped(upstream_command):
    """Over stdio nothing says which call a log belongs to: with two sessions' calls in flight it went
    to the newest (B's ``release``) although the upstream wrote it for A's ``wait``."""
    logs: dict[str, list[Any]] = {"a": [], "b": []}
    heard = {who: anyio.Event() for who in "ab"}

    async def scenario(url: str) -> None:
        async with two_sessions(url, logs, heard) as (a, b), anyio.create_task_group() as group:
            answers: dict[str, types.CallToolResult] = {}

            async def call(client: Client, who: str, tool: str) -> None:
                answers[who] = await client.call_tool(tool, {})

            group.start_soon(call, a, "a", "wait")
            await heard["a"].wait()  # A's call alone in flight: its log is A's
            await call(b, "b", "release")
        assert [answers[who].content[0].text for who in "ab"] == ["released", "done"]

    with anyio.fail_after(GUARD):  # the clients share one upstream connection: the rule applies there
        await run_proxy(upstream_command, NoFaults(), serve_over_http(scenario), shared_upstream=True)
    assert logs == {"a": ["waiting"], "b": []}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_one_stdio_client_with_calls_in_flight_still_gets_what_cannot_be_attributed(
    upstream_command, mode
):
    """The other side of the rule above: one client is one client, in either protocol era (at
    2026-07-28 each request has a connection of its own, all on the client's one stdio channel)."""
    logs: list[Any] = []
    heard = anyio.Event()
    answers: dict[str, str] = {}
    command = cli_command("proxy", "--upstream", upstream_command, "--faults", "none")
    proxy = StdioServerParameters(command=command[0], args=command[1:], env=child_env())
    with anyio.fail_after(GUARD):
        async with (
            Client(proxy, mode=mode, message_handler=log_collector(logs, heard)) as client,
            anyio.create_task_group() as group,
        ):

            async def call(tool: str) -> None:
                # Episodes of their own: one episode's calls run one at a time.
                result = await client.call_tool(tool, {}, meta={"mcp-resili/episode": tool})
                answers[tool] = result.content[0].text

            group.start_soon(call, "wait")
            await heard.wait()
            await call("release")
    assert logs == ["waiting", "released"] and answers == {"wait": "released", "release": "done"}


# --- 2. finish ---------------------------------------------------------------------------------


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


# --- 3 and 4. the proxy process stops promptly and cleanly -------------------------------------


async def receive_json_until(replies: BufferedByteReceiveStream, done: Callable[[dict], bool]) -> dict:
    while True:
        message: dict = json.loads(await replies.receive_until(b"\n", 1 << 20))
        if done(message):
            return message


async def test_the_stdio_proxy_exits_promptly_once_stdin_ends_during_a_hung_upstream_call(upstream_command):
    """It answered nothing for 30 s (the stdio drain waited for the hung call), then took the upstream
    down. The call in flight is now abandoned upstream and answered, and the upstream closed."""
    command = cli_command("proxy", "--upstream", upstream_command, "--faults", "none")
    async with await anyio.open_process(command, env=child_env()) as proxy:
        assert proxy.stdin is not None and proxy.stdout is not None and proxy.stderr is not None
        replies = BufferedByteReceiveStream(proxy.stdout)

        async def send(message: dict) -> None:
            await proxy.stdin.send(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

        with anyio.fail_after(GUARD):
            hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
            await send({"id": 1, "method": "initialize", "params": hello})
            await receive_json_until(replies, lambda m: m.get("id") == 1)
            await send({"method": "notifications/initialized"})
            await send({"id": 2, "method": "tools/call", "params": {"name": "hang", "arguments": {}}})
            # The upstream's log says it has the call (and hangs in it).
            await receive_json_until(replies, lambda m: m.get("method") == "notifications/message")
            await proxy.stdin.aclose()
            answer = await receive_json_until(replies, lambda m: m.get("id") == 2)
            status = await proxy.wait()
            stderr = b"".join([chunk async for chunk in proxy.stderr]).decode()
    assert answer["error"]["code"] == types.CONNECTION_CLOSED
    assert status == 0 and "Traceback" not in stderr, stderr


async def test_sigterm_stops_the_http_proxy_cleanly_during_a_hung_call(upstream_command):
    """uvicorn's lifespan task (and its connections') were left behind by the cancellation: tracebacks
    on stderr, exit 0. SIGTERM now lets the HTTP server stop in order."""
    command = cli_command(
        "proxy", "--upstream", upstream_command, "--transport", "http", "--port", "0", "--faults", "none"
    )
    logs: list[Any] = []
    heard = anyio.Event()
    async with await anyio.open_process(command, env=child_env()) as proxy:
        assert proxy.stderr is not None
        errors = BufferedByteReceiveStream(proxy.stderr)
        with anyio.fail_after(GUARD):
            started = (await errors.receive_until(b"\n", 1 << 16)).decode()
            url = started.rsplit(" at ", 1)[-1].strip()
            assert url.startswith("http://127.0.0.1:"), started
            async with (
                Client(url, mode="legacy", message_handler=log_collector(logs, heard)) as client,
                anyio.create_task_group() as group,
            ):
                failures: list[Exception] = []

                async def wait() -> None:
                    try:
                        await client.call_tool("wait", {})  # answered only after a release
                    except Exception as exc:  # the proxy goes away during the call
                        failures.append(exc)

                group.start_soon(wait)
                await heard.wait()  # the upstream has the call
                proxy.send_signal(signal.SIGTERM)
                status = await proxy.wait()
            rest = b"".join([chunk async for chunk in proxy.stderr])
            stderr = f"{started}\n{(bytes(errors.buffer) + rest).decode()}"
    assert status == 0 and "Traceback" not in stderr, stderr
    assert logs == ["waiting"]
    (failure,) = failures  # the call in flight is answered, saying why
    assert isinstance(failure, MCPError) and failure.code == types.CONNECTION_CLOSED
    assert "shutting down" in failure.error.message
