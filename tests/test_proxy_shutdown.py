"""The proxy process stops promptly and cleanly: once stdin ends during a hung upstream call (stdio),
and on SIGTERM during a hung call (HTTP). Both were review findings."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import proxy_upstreams
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client
from mcp.shared.exceptions import MCPError
from proxy_upstreams import log_collector
from servers import child_env, cli_command

pytestmark = pytest.mark.anyio

#: A guard only: every wait below ends as soon as what it waits for happens.
GUARD = 20.0


@pytest.fixture
def upstream_command(tmp_path: Path) -> str:
    return proxy_upstreams.upstream_command(tmp_path)


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
