"""Fairness: a well-behaved episode's latency alone, and beside three hostile clients (separate processes).

One ``mcp-resili serve --transport http`` (ResiliBench, no faults). The well-behaved client plays
``--calls`` calls in its own Streamable HTTP session, one at a time, as an agent does: read a small
file, parse it, and so on; its p50/p90/p99 are measured first alone, then while three hostile
client processes hammer the same server:

- ``invalid``: 3.5 MB calls whose arguments break the schema everywhere (every item of a big record
  list has the wrong types: validation and its explanation are the work), 4 in flight;
- ``bulk``: 3.5 MB valid calls of the parser (a big CSV whose parsed records come back: the biggest
  result a call can produce), 4 in flight;
- ``flood``: many small calls at once (64 in flight), the most requests per second.

The same is measured for this checkout and a baseline revision (``--base``) in one run, each against
its own server process. Goal (issue 37): p99 beside the hostile clients within 2× of p99 alone.

    python bench/fairness.py                   # this checkout against main
    python bench/fairness.py --write-docs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
from benchdocs import write_section
from mcp import Client
from soak import HttpClient, free_port
from trees import checkout, cpu_seconds, revision_of, tree_env

START, END = "<!-- fairness:start -->", "<!-- fairness:end -->"
BODY = 3_500_000
#: Longest a measurement of the well-behaved client may take (beside a server that does not protect
#: it, every call can take seconds).
MAX_SECONDS = 120.0


def big_csv(nbytes: int) -> str:
    row = "7,widget,tools,12.5\n"
    return "id,name,category,value\n" + row * (nbytes // len(row))


def invalid_records(nbytes: int) -> list[dict[str, Any]]:
    item = {"id": "x", "name": 5, "category": [], "value": "y"}
    return [item] * (nbytes // len(json.dumps(item)))


def hostile_call(kind: str) -> dict[str, Any]:
    if kind == "invalid":
        return {
            "name": "data_processing_validator",
            "arguments": {"data": {"records": invalid_records(BODY)}},
        }
    if kind == "bulk":
        return {
            "name": "data_processing_parser",
            "arguments": {"data": {"content": big_csv(BODY), "format": "csv"}},
        }
    return {"name": "file_operations_reader", "arguments": {"source": "data/flood.csv"}}


async def hostile(kind: str, url: str) -> None:
    """Send ``kind`` calls until killed, each slot naming a fresh episode for every call.

    The body is encoded once: the client spends its CPU on sending, not on building JSON. It runs
    at a lower CPU priority (``nice 10``): on this 2-core machine the hostile clients' own work would
    otherwise take the cores from the well-behaved client, which measures the machine, not the
    server (their requests cost the server as much either way).
    """
    os.nice(10)
    width = 64 if kind == "flood" else 4
    call = hostile_call(kind)
    async with httpx2.AsyncClient(timeout=600, limits=httpx2.Limits(max_connections=width)) as http:
        client = HttpClient(http, url)
        await client.open()
        headers = {**client._h(), "content-type": "application/json"}

        async def slot(k: int) -> None:
            for n in itertools.count():
                params = {**call, "_meta": {"mcp-resili/episode": f"{kind}-{os.getpid()}-{k}-{n}"}}
                body = json.dumps(
                    {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
                ).encode()
                with contextlib.suppress(httpx2.HTTPError):
                    await http.post(url, content=body, headers=headers)

        await asyncio.gather(*(slot(k) for k in range(width)))


async def well_behaved(url: str, calls: int, seconds: float) -> list[float]:
    """Latencies (s) of up to ``calls`` ordinary calls (at most ``seconds``), one at a time.

    The client is the MCP SDK's own (``mcp.Client``), as an agent would use, naming its episode.
    """
    content = "id,name,category,value\n1,a,x,2.5\n2,b,y,3.5\n"
    steps = [
        ("file_operations_reader", {"source": "data/good.csv"}),
        ("data_processing_parser", {"data": {"content": content, "format": "csv"}}),
    ]
    meta = {"mcp-resili/episode": f"good-{os.getpid()}-{time.monotonic_ns()}"}
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    async with Client(url, read_timeout_seconds=600) as client:
        for n in range(calls + 10):
            started = time.perf_counter()
            result = await client.call_tool(*steps[n % 2], meta=meta)
            if n >= 10:  # warm-up calls are not counted
                latencies.append(time.perf_counter() - started)
            assert not result.is_error, result
            if started > deadline:
                break
    return latencies


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def wait_for(url: str) -> None:
    async with httpx2.AsyncClient(timeout=5) as http:
        for _ in range(600):
            with contextlib.suppress(httpx2.HTTPError):
                await http.get(url)
                return
            await asyncio.sleep(0.1)
    raise SystemExit(f"no server at {url}")


def measure(tree: Path, calls: int, kinds: tuple[str, ...] = ("invalid", "bulk", "flood")) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [sys.executable, "-m", "mcp_resili", "serve", "--faults", "none", "--transport", "http"]
    server = subprocess.Popen(
        [*command, "--port", str(port)], env=tree_env(tree), cwd=tree, stderr=subprocess.DEVNULL
    )
    hostiles: list[subprocess.Popen[bytes]] = []
    try:
        asyncio.run(wait_for(url))
        alone = asyncio.run(well_behaved(url, calls, MAX_SECONDS))
        cpu_alone = cpu_seconds(server.pid)
        here = str(Path(__file__).resolve())
        for kind in kinds:
            hostiles.append(
                subprocess.Popen(
                    [sys.executable, here, "--hostile", kind, "--url", url], stderr=subprocess.DEVNULL
                )
            )
        time.sleep(3)  # let them reach full pressure
        beside = asyncio.run(well_behaved(url, calls, MAX_SECONDS))
        alive = [h.poll() is None for h in hostiles]
    finally:
        for process in (*hostiles, server):
            process.terminate()
        for process in (*hostiles, server):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
    return {
        "alone": alone,
        "beside": beside,
        "hostiles_alive": all(alive),
        "cpu_alone": cpu_alone,
    }


def summary(latencies: list[float]) -> str:
    ms = [x * 1000 for x in latencies]
    return f"{statistics.median(ms):.1f} / {percentile(ms, 0.9):.1f} / {percentile(ms, 0.99):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hostile", choices=("invalid", "bulk", "flood"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--base", default="main")
    parser.add_argument("--hostiles", default="invalid,bulk,flood", help="which hostile clients to run")
    parser.add_argument("--skip-base", action="store_true", help="measure this checkout only")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    if args.hostile:
        asyncio.run(hostile(args.hostile, args.url))
        return
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = []
    with checkout(args.base) as base_tree, checkout(".") as ours:
        trees = [
            (f"baseline `{args.base}` ({revision_of(base_tree)})", base_tree),
            (f"this ({revision_of(ours)})", ours),
        ]
        for name, tree in trees[1:] if args.skip_base else trees:
            got = measure(tree, args.calls, tuple(args.hostiles.split(",")))
            p99_alone = percentile(got["alone"], 0.99)
            p99_beside = percentile(got["beside"], 0.99)
            rows.append((name, got, p99_beside / p99_alone))
            print(
                f"{name}: alone {summary(got['alone'])} ms, beside {summary(got['beside'])} ms "
                f"(p50/p90/p99); p99 ratio {p99_beside / p99_alone:.2f}x; "
                f"hostiles alive {got['hostiles_alive']}",
                flush=True,
            )
    lines = [
        "| revision | alone p50 / p90 / p99 ms | beside 3 hostile clients p50 / p90 / p99 ms "
        "| p99 beside ÷ alone |",
        "|---|---|---|---:|",
    ]
    for name, got, ratio in rows:
        lines.append(f"| {name} | {summary(got['alone'])} | {summary(got['beside'])} | **{ratio:.2f}×** |")
    text = "\n".join(lines)
    print(text)
    if args.write_docs:
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        ours_ratio = rows[-1][2]
        section = "\n".join(
            [
                START,
                "## Fairness under hostile clients (`bench/fairness.py`)",
                "",
                f"Measured {when} on {os.cpu_count()} CPUs ({platform.machine()}), Python "
                f"{platform.python_version()}; load average at the start {load}.",
                "",
                "`mcp-resili serve --transport http` (ResiliBench, no faults). A well-behaved client plays "
                f"{args.calls} ordinary calls one at a time in its own session "
                "(read a small file, parse it), "
                "first alone, then beside three hostile client processes: 3.5 MB calls whose every record "
                "breaks the schema (4 in flight), 3.5 MB valid parser calls whose parsed records come back "
                "(4 in flight), and a flood of small calls (64 in flight). Same run, one server process per "
                "revision.",
                "",
                text,
                "",
                "Goal: p99 beside the hostile clients within 2× of p99 alone: "
                f"**{'met' if ours_ratio <= 2 else 'not met'}** "
                f"({ours_ratio:.2f}×).",
                "",
                "Reproduce: `python bench/fairness.py --write-docs`.",
                END,
            ]
        )
        write_section(section, START, END)


if __name__ == "__main__":
    main()
