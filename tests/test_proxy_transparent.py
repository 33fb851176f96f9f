"""A proxy that is what it says: each client meets the upstream through the proxy as it would directly.

Against the npm reference servers (server-everything, server-memory, server-filesystem, installed by the
tests in tests/peers/extra) and ``mcp-resili serve``: the SDK's default client through ``proxy
--transport http`` sees the tools, protocol era and call results it sees directly; each client has an
upstream session of its own (its capabilities, its state); stateless clients that name no episode get
their calls through, with faults keyed per client and reproducible; a broken upstream is one line and
exit 2; a hung one meets the proxy's own timeout.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from npm_peers import node_env, npm_peers
from servers import CLI_TIMEOUT, accepting, child_env, cli_command, free_port, process

from mcp_resili.trace import Trace

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def bin_dir() -> Path:
    return npm_peers()


@asynccontextmanager
async def proxied(upstream: str, *args: str, workdir: Path, **env_extra: str) -> AsyncIterator[str]:
    """``mcp-resili proxy --upstream UPSTREAM --transport http ARGS`` on a free port; yields its URL."""
    port = free_port()
    env = child_env(PATH=node_env()["PATH"], **env_extra)
    # A generous start-up bound: a loaded test machine starts a Python upstream slowly.
    argv = cli_command(
        "proxy",
        "--upstream",
        upstream,
        "--transport",
        "http",
        "--port",
        str(port),
        "--connect-timeout",
        "60",
        *args,
    )
    log = workdir / f"proxy-{port}.log"
    with process(argv, env, log) as proc:
        await accepting(port, proc, log)
        yield f"http://127.0.0.1:{port}/mcp"


def stdio(command: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=command[0], args=command[1:], env=node_env())


def upstreams(bin_dir: Path, root: Path) -> dict[str, list[str]]:
    return {
        "everything": [str(bin_dir / "mcp-server-everything"), "stdio"],
        "memory": [str(bin_dir / "mcp-server-memory")],
        "filesystem": [str(bin_dir / "mcp-server-filesystem"), str(root)],
    }


#: Calls whose results do not depend on time or on the process (compared direct vs proxied).
CALLS = {
    "everything": [("echo", {"message": "hi"}), ("get-sum", {"a": 2, "b": 40})],
    "memory": [
        ("create_entities", {"entities": [{"name": "ada", "entityType": "person", "observations": ["x"]}]}),
        ("read_graph", {}),
    ],
    "filesystem": [("list_directory", {"path": "{root}"}), ("read_text_file", {"path": "{root}/a.txt"})],
}


def without_meta(result: types.CallToolResult) -> dict[str, Any]:
    return result.model_dump(mode="json", exclude={"meta"}, exclude_none=True)


@pytest.mark.parametrize("name", ["everything", "memory", "filesystem"])
async def test_the_default_client_sees_through_the_proxy_what_it_sees_directly(
    bin_dir: Path, tmp_path: Path, name: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("hello")
    command = upstreams(bin_dir, root)[name]
    calls = [(tool, json.loads(json.dumps(args).replace("{root}", str(root)))) for tool, args in CALLS[name]]

    async def observe(client: Client) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
        tools = [t.model_dump(mode="json", exclude_none=True) for t in (await client.list_tools()).tools]
        results = [without_meta(await client.call_tool(tool, args)) for tool, args in calls]
        return client.protocol_version, tools, results

    # server-memory keeps its graph in a file: each run its own, empty at start.
    direct_params = StdioServerParameters(
        command=command[0], args=command[1:], env=node_env(MEMORY_FILE_PATH=str(tmp_path / "direct.jsonl"))
    )
    async with Client(direct_params) as client:
        direct = await observe(client)
    upstream = " ".join(command)
    memory = str(tmp_path / "proxied.jsonl")
    async with (
        proxied(upstream, "--faults", "none", workdir=tmp_path, MEMORY_FILE_PATH=memory) as url,
        Client(url) as client,
    ):
        through = await observe(client)
    assert direct[0] == through[0] == "2025-11-25"  # a handshake-era server: the same era either way
    assert through[1] == direct[1]  # the same tools, byte for byte
    assert through[2] == direct[2]


@pytest.mark.parametrize("shared", [False, True], ids=["per client", "--shared-upstream"])
async def test_each_client_has_an_upstream_session_of_its_own(tmp_path: Path, shared: bool) -> None:
    """Our own server upstream: a stdio connection is one episode. Two clients through the proxy are
    two upstream connections, two episodes (directly they would be two processes); with
    ``--shared-upstream`` they are one."""
    traces = tmp_path / "upstream-traces"
    upstream = f"{sys.executable} -m mcp_resili serve --faults none --trace-dir {traces}"
    call = ("network_fetcher", {"source": "https://api.example.com/orders/676"})
    flags = ("--faults", "none", *(["--shared-upstream"] if shared else []))
    async with proxied(upstream, *flags, workdir=tmp_path) as url, Client(url) as a, Client(url) as b:
        await a.call_tool(*call)
        await b.call_tool(*call)
        await a.call_tool(*call)
    episodes = sorted(len(Trace.read(path).events) for path in traces.glob("*.jsonl"))
    assert episodes == ([3] if shared else [1, 2])


async def test_upstream_requests_reach_the_client_they_belong_to(bin_dir: Path, tmp_path: Path) -> None:
    """A client that can sample is asked (and only it); one that cannot is offered no such tool."""
    asked: list[str] = []

    async def sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="sampled"), model="fake"
        )

    async def roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///only/mine", name="mine")])

    upstream = f"{bin_dir / 'mcp-server-everything'} stdio"
    async with (
        proxied(upstream, "--faults", "none", workdir=tmp_path) as url,
        Client(url, mode="legacy", sampling_callback=sample, list_roots_callback=roots) as able,
        Client(url, mode="legacy") as plain,
    ):
        able_tools = {t.name for t in (await able.list_tools()).tools}
        plain_tools = {t.name for t in (await plain.list_tools()).tools}
        sampled = await able.call_tool("trigger-sampling-request", {"prompt": "hello", "maxTokens": 5})
        listed = await able.call_tool("get-roots-list", {})
    assert "trigger-sampling-request" in able_tools and "trigger-sampling-request" not in plain_tools
    assert (
        len(asked) == 1 and "hello" in asked[0] and "sampled" in json.dumps(sampled.model_dump(mode="json"))
    )
    assert "file:///only/mine" in json.dumps(listed.model_dump(mode="json"))


async def test_a_stateless_client_naming_no_episode_gets_its_calls_through_with_reproducible_faults(
    bin_dir: Path, tmp_path: Path
) -> None:
    """Faults are keyed per client (``untasked/K``, K in arrival order) and call; a replay meets the same."""
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"kind": "chaos", "lam": 0.3}))
    upstream = f"{bin_dir / 'mcp-server-everything'} stdio"
    ledgers = []
    for run in range(2):
        traces = tmp_path / f"traces-{run}"
        args = ("--faults", "lambda=0.3", "--seed", "4", "--time-scale", "0", "--trace-dir", str(traces))
        async with proxied(upstream, *args, workdir=tmp_path) as url:
            for _ in range(2):  # two clients, one after the other: keys untasked/0 and untasked/1
                async with Client(url) as client:
                    for n in range(6):
                        await client.call_tool("echo", {"message": f"m{n}"})
        headers = {}
        for path in sorted(traces.glob("*.jsonl")):
            trace = Trace.read(path)
            headers[trace.header.fault_key] = [
                (e.tool, e.decision.model_dump() if e.decision else None)
                for e in trace.events
                if type(e).__name__ == "ToolCallEvent"
            ]
        ledgers.append(headers)
    assert set(ledgers[0]) == {"untasked/0", "untasked/1"}
    assert all(len(calls) == 6 for calls in ledgers[0].values())
    assert ledgers[0] == ledgers[1]
    assert ledgers[0]["untasked/0"] != ledgers[0]["untasked/1"]  # each client its own draws


JUNK = "import sys, time\nprint('hello from a careless server', flush=True)\ntime.sleep(600)\n"
SILENT = "import time\ntime.sleep(600)\n"


# The junk must arrive within the connect timeout (a loaded machine starts Python slowly); silence
# is the same at any timeout, so it waits the shortest.
@pytest.mark.parametrize(
    ("script", "said", "timeout"), [(JUNK, "not JSON-RPC", "3"), (SILENT, "did not answer", "1")]
)
async def test_a_broken_upstream_is_one_line_and_exit_2(
    tmp_path: Path, script: str, said: str, timeout: str
) -> None:
    upstream = tmp_path / "broken.py"
    upstream.write_text(script)
    argv = cli_command("proxy", "--upstream", f"{sys.executable} {upstream}", "--connect-timeout", timeout)
    with anyio.fail_after(CLI_TIMEOUT):
        proc = await anyio.run_process(argv, env=child_env(), check=False)
    stderr = proc.stderr.decode()
    assert proc.returncode == 2, stderr
    assert stderr.count("\n") == 1 and said in stderr and "Traceback" not in stderr


HANGS = r"""
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    method, mid = request.get("method"), request.get("id")
    if mid is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": request["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "hangs", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "hang", "inputSchema": {"type": "object"}},
                            {"name": "ok", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call" and request["params"]["name"] == "hang":
        continue  # never answers
    else:
        result = {"content": [{"type": "text", "text": "fine"}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}) + "\n")
    sys.stdout.flush()
"""


async def test_an_upstream_that_stops_answering_mid_call_meets_the_proxys_timeout(tmp_path: Path) -> None:
    upstream = tmp_path / "hangs.py"
    upstream.write_text(HANGS)
    traces = tmp_path / "traces"
    args = ("--call-timeout", "1", "--faults", "none", "--trace-dir", str(traces))
    async with (
        proxied(f"{sys.executable} {upstream}", *args, workdir=tmp_path) as url,
        Client(url) as client,  # the client itself would wait 300 s
    ):
        with anyio.fail_after(CLI_TIMEOUT):
            hung = await client.call_tool("hang", {})
        fine = await client.call_tool("ok", {})
    assert hung.is_error is True and "UPSTREAM_TIMEOUT" in hung.content[0].text
    assert fine.is_error is not True
    (trace_file,) = traces.glob("*.jsonl")
    codes = [e.error_code for e in Trace.read(trace_file).events if type(e).__name__ == "ToolCallEvent"]
    assert codes == ["UPSTREAM_TIMEOUT", None]


async def test_a_2026_upstream_is_met_in_2026_through_the_proxy_and_a_handshake_one_in_the_handshake_era(
    bin_dir: Path, tmp_path: Path
) -> None:
    ours = f"{sys.executable} -m mcp_resili serve --faults none"
    async with proxied(ours, "--faults", "none", workdir=tmp_path) as url, Client(url) as client:
        modern = client.protocol_version
        listed = {t.name for t in (await client.list_tools()).tools}
    assert modern == "2026-07-28"
    assert "finish" in listed
    async with (
        proxied(str(bin_dir / "mcp-server-memory"), "--faults", "none", workdir=tmp_path) as url,
        Client(url) as client,
    ):
        assert client.protocol_version == "2025-11-25"
