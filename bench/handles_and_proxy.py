"""Costs of issue 33: handle mode per call, and one upstream session per client behind the proxy.

Usage: python bench/handles_and_proxy.py [CALLS] [CLIENTS]  (needs tests/peers/extra installed:
``npm ci --prefix tests/peers/extra``).

1. Handle mode: the server's CPU per ``tools/call`` in process (2026-07-28 client, in memory) when the
   episode comes from a handle argument (HMAC check, argument removed) against the baseline, the same
   calls naming their episode in ``_meta``; measured in the same run, alternating.
2. The proxy over HTTP in front of stdio upstreams (server-memory on Node, ``mcp-resili serve`` on
   Python): CLIENTS clients one after the other, each connecting, listing and calling once, with one
   upstream session per client (the default) against ``--shared-upstream`` (the baseline). Reported:
   the proxy's start, a new client's first answer (its session opens then), a later call, and the
   upstream processes alive at the end.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio
from mcp import Client

from mcp_resili.constants import META_EPISODE
from mcp_resili.faults import parse_fault_spec
from mcp_resili.registry.loader import get_suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.server.episodes import ClientIdentity, EpisodeRequest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import write_section

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "tests" / "peers" / "extra" / "node_modules" / ".bin"
CALL = ("network_fetcher", {"source": "https://api.example.com/orders/676"})


async def per_call_cpu(calls: int, handle: bool) -> float:
    """CPU of this process (client and server, in memory) per call, in microseconds."""
    suite = get_suite("resilibench")
    task = suite.task("task_ada1c6bc")
    server = ResiliServer(suite, parse_fault_spec("none", suite.spec_scope), seed=0)
    if handle:
        # The handle as ``start_episode`` mints it (for no principal, as on a server without a token);
        # named in _meta it takes the same path as the handle argument: HMAC check, then lookup.
        minted, _ = server.episodes.start(EpisodeRequest(id="h", task=task.id), task, ClientIdentity())
        meta: dict[str, object] = {META_EPISODE: minted}
    else:
        meta = {META_EPISODE: {"id": "named", "task": task.id}}
    async with Client(server.mcp) as client:
        for _ in range(20):  # warm up
            await client.call_tool(*CALL, meta=meta)
        begin = time.process_time()
        for _ in range(calls):
            await client.call_tool(*CALL, meta=meta)
        return (time.process_time() - begin) / calls * 1e6


def children(pid: int) -> int:
    """Processes started by ``pid`` (direct children), from /proc."""
    count = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            count += len((task / "children").read_text().split())
    return count


async def proxy_run(upstream: str, shared: bool, clients: int) -> dict[str, float]:
    port = 19000 + (7 if shared else 3) + clients
    argv = [sys.executable, "-m", "mcp_resili", "proxy", "--upstream", upstream, "--transport", "http"]
    argv += ["--port", str(port), "--faults", "none", "--connect-timeout", "120"]
    argv += ["--shared-upstream"] if shared else []
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    begin = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    try:
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.02)
                continue
            await stream.aclose()
            break
        start = time.perf_counter() - begin
        first, later = [], []
        url = f"http://127.0.0.1:{port}/mcp"
        tool = "read_graph" if "memory" in upstream else CALL[0]
        arguments = {} if "memory" in upstream else CALL[1]
        for _ in range(clients):
            async with Client(url, mode="legacy") as client:
                t0 = time.perf_counter()
                await client.list_tools()
                await client.call_tool(tool, arguments)
                first.append(time.perf_counter() - t0)
                t1 = time.perf_counter()
                await client.call_tool(tool, arguments)
                later.append(time.perf_counter() - t1)
        alive = children(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {
        "start_s": start,
        "first_ms": statistics.median(first) * 1000,
        "later_ms": statistics.median(later) * 1000,
        "upstreams": alive,
    }


async def main(calls: int, clients: int) -> None:
    named, handled = [], []
    for _ in range(3):
        named.append(await per_call_cpu(calls, handle=False))
        handled.append(await per_call_cpu(calls, handle=True))
    n, h = statistics.median(named), statistics.median(handled)
    lines = [
        "## Issue 33: handle mode and the per-client proxy (`bench/handles_and_proxy.py`)",
        "",
        f"Measured with `python bench/handles_and_proxy.py {calls} {clients}` on the shared 2-core machine "
        f"(load average {os.getloadavg()[0]:.1f} at the end; other developers' tests ran alongside).",
        "",
        f"Handle mode, CPU per `tools/call` in process (client and server, {calls} calls, median of 3): "
        f"named in `_meta` {n:.0f} µs, by handle {h:.0f} µs: **{h / n:.2f}×** the baseline.",
        "",
        "| upstream (stdio) | mode | proxy start (s) | new client's first list+call (ms) | later call (ms) "
        "| upstream processes at the end |",
        "|---|---|---|---|---|---|",
    ]
    targets = {
        "server-memory (Node)": str(BIN / "mcp-server-memory"),
        "mcp-resili serve (Python)": f"{sys.executable} -m mcp_resili serve --faults none",
    }
    for label, upstream in targets.items():
        rows = {}
        for shared in (True, False):
            rows[shared] = await proxy_run(upstream, shared, clients)
            r = rows[shared]
            mode = "`--shared-upstream` (baseline)" if shared else "per client (default)"
            lines.append(
                f"| {label} | {mode} | {r['start_s']:.2f} | {r['first_ms']:.0f} | {r['later_ms']:.1f} "
                f"| {r['upstreams']:.0f} |"
            )
        ratio = rows[False]["first_ms"] / rows[True]["first_ms"]
        lines.append(
            f"| {label} | per client ÷ shared | | **{ratio:.1f}×** | "
            f"{rows[False]['later_ms'] / rows[True]['later_ms']:.2f}× | |"
        )
    lines += [
        "",
        "A client's first request through the per-client proxy starts its own upstream (a process, for a "
        "stdio upstream): that is the price of meeting the upstream as it would directly (its "
        "capabilities, its era, its state, its notifications); later calls cost what they cost shared. "
        "The start-up check connects once and closes; a stdio client (one client) pays one extra upstream "
        "start. `--shared-upstream` keeps one connection for every client.",
        "",
        "<!-- end handles_and_proxy -->",
    ]
    section = "\n".join(lines)
    print(section)
    write_section(section, lines[0], "<!-- end handles_and_proxy -->")


if __name__ == "__main__":
    anyio.run(
        main, int(sys.argv[1]) if len(sys.argv) > 1 else 400, int(sys.argv[2]) if len(sys.argv) > 2 else 6
    )
