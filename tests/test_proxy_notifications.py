"""The proxy keeps an upstream's notifications to the client session whose call they belong to, over
HTTP and stdio (a review finding: they reached every session)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import proxy_upstreams
import pytest
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.server import Server
from proxy_upstreams import log_collector
from servers import child_env, cli_command

from mcp_resili.faults.rules import NoFaults
from mcp_resili.proxy import ProxyServer, run_proxy
from mcp_resili.server.transports import http_app

pytestmark = pytest.mark.anyio


@pytest.fixture
def upstream_command(tmp_path: Path) -> str:
    return proxy_upstreams.upstream_command(tmp_path)


#: A guard only: every wait below ends as soon as what it waits for happens.
GUARD = 20.0


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
