"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance`` 0.1.16, on Node 22).

Its generic server scenarios (those any server can pass: initialize, ping, logging, completion, listings,
an unknown tool's error, SSE streams, DNS-rebinding protection) pass on ``serve --transport http``; and
through ``proxy --transport http`` in front of the reference server-everything, every scenario ends as
it does against server-everything directly.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from npm_peers import GENERIC_SCENARIOS, node_env, npm_peers, passed, run_conformance
from servers import accepting, child_env, cli_command, free_port, process, running_http_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_the_generic_scenarios_pass_on_serve(tmp_path: Path) -> None:
    npm_peers()
    async with running_http_server("--faults", "none", workdir=tmp_path) as server:
        results = await anyio.to_thread.run_sync(run_conformance, server.url, tmp_path / "out")
    failed = {
        name: checks for name, checks in results.items() if name in GENERIC_SCENARIOS and not passed(checks)
    }
    assert set(GENERIC_SCENARIOS) <= set(results)
    assert not failed, failed


async def test_through_the_proxy_every_scenario_ends_as_it_does_directly(tmp_path: Path) -> None:
    bin_dir = npm_peers()
    upstream_port, proxy_port = free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}/mcp"
    everything = [str(bin_dir / "mcp-server-everything"), "streamableHttp"]
    proxy = cli_command(
        "proxy",
        "--upstream",
        upstream_url,
        "--transport",
        "http",
        "--port",
        str(proxy_port),
        "--faults",
        "none",
    )
    with process(everything, node_env(PORT=str(upstream_port)), tmp_path / "everything.log") as upstream:
        await accepting(upstream_port, upstream, tmp_path / "everything.log")
        with process(proxy, child_env(), tmp_path / "proxy.log") as proxied:
            await accepting(proxy_port, proxied, tmp_path / "proxy.log")
            direct = await anyio.to_thread.run_sync(run_conformance, upstream_url, tmp_path / "direct")
            through = await anyio.to_thread.run_sync(
                run_conformance, f"http://127.0.0.1:{proxy_port}/mcp", tmp_path / "through"
            )
    assert set(direct) == set(through)
    differ = {name: (direct[name], through[name]) for name in direct if direct[name] != through[name]}
    # One difference, on purpose: the proxy checks Host/Origin itself (DNS-rebinding protection on
    # loopback), which server-everything does not; through the proxy that scenario passes.
    rebinding = differ.pop("dns-rebinding-protection", None)
    assert not differ, differ
    assert passed(through["dns-rebinding-protection"])
    assert rebinding is None or not passed(direct["dns-rebinding-protection"])
    assert sum(passed(checks) for checks in direct.values()) > len(GENERIC_SCENARIOS)
