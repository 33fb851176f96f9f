"""Soak: does a long-running server's memory reach a plateau? Hours of traffic in minutes, both transports.

A ``mcp-resili serve`` process (ReliabilityBench, ``lambda=0.2``, ``--time-scale 0``) is driven by
``--clients`` concurrent clients through ``--calls`` tool calls spread over many episodes, and its
resident memory is sampled as the calls go. Every episode writes support tickets (its tool state
grows), searches and lists them (results grow with it); argument sizes are drawn per call: 70% of
512 bytes, 25% of 16 KiB, 5% of 512 KiB. Episodes end the ways clients end them:

- 40% finish, then fetch their trace (`TRACE_METHOD`), as ``mcp-resili run --server`` does;
- 20% finish and leave;
- 20% over HTTP open a session of their own and delete it at the end (over stdio: leave unfinished);
- 20% stop mid-way and never come back.

Over HTTP each client holds one Streamable HTTP session (handshake era) and names its episodes in
``_meta``; over stdio every client shares the one connection. The same traffic (one seed) is played
against this checkout and against a baseline revision (``--base``, checked out into a temporary work
tree), one server process each, one after the other.

    python bench/soak.py                        # 20,000 calls per transport and revision
    python bench/soak.py --calls 2000 --quick   # a smoke run
    python bench/soak.py --write-docs           # also rewrite the soak section of docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import platform
import random
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
from benchdocs import write_section
from trees import checkout, cpu_seconds, revision_of, rss_mib, tree_env

START, END = "<!-- soak:start -->", "<!-- soak:end -->"
EPISODE_META = "mcp-resili/episode"
TRACE_METHOD = "mcp-resili/episode_trace"
#: A third row: this revision with a small server budget, so that eviction has to work during the run.
SMALL_BUDGET_MIB = 48
HELLO = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "soak", "version": "1"},
}
SIZES = ((0.70, 512), (0.25, 16 * 1024), (0.05, 512 * 1024))


def draw_size(rng: random.Random) -> int:
    roll, acc = rng.random(), 0.0
    for share, size in SIZES:
        acc += share
        if roll < acc:
            return size
    return SIZES[-1][1]


def call_of(rng: random.Random, n: int) -> tuple[str, dict[str, Any]]:
    """The ``n``-th call of an episode: mostly writes that grow its state, some reads of it."""
    size = draw_size(rng)
    text = "".join(rng.choice("abcdefghij ") for _ in range(64)) * (size // 64 + 1)
    roll = rng.random()
    if n == 0 or roll < 0.55:
        return "create_ticket", {
            "customer_id": f"C-{rng.randrange(1000)}",
            "subject": "soak",
            "description": text[:size],
            "priority": "low",
        }
    if roll < 0.75:
        return "search_knowledge_base", {"query": text[:size]}
    if roll < 0.9:
        return "update_ticket", {"ticket_id": "T-1001", "note": text[:size], "status": "pending"}
    return "list_open_tickets", {}


@dataclass
class Plan:
    """One episode of the traffic: how many calls, how it ends."""

    episode: str
    calls: list[tuple[str, dict[str, Any]]]
    ending: str  # fetch | finish | session | abandon | whole (every call, then gone)


#: And the issue's pattern: a few long episodes whose every call carries 3 MB, left unfinished.
HEAVY_EPISODES, HEAVY_CALLS, HEAVY_BYTES = 4, 25, 3 * 1024 * 1024


def traffic(calls: int, seed: int) -> list[Plan]:
    rng = random.Random(seed)
    plans, total = [], 0
    for k in itertools.count():
        if total >= calls:
            break
        count = min(rng.randint(4, 16), calls - total)
        ending = rng.choices(("fetch", "finish", "session", "abandon"), (0.4, 0.2, 0.2, 0.2))[0]
        plans.append(Plan(f"soak-{k}", [call_of(rng, n) for n in range(count)], ending))
        total += count
    description = "x" * HEAVY_BYTES
    heavy = (
        "create_ticket",
        {"customer_id": "C-1", "subject": "big", "description": description, "priority": "low"},
    )
    # Spread through the run (at 1/5, 2/5, ... of it), not played last: RSS at the end then says
    # whether the memory of what came before was given back, not only what the last episodes hold.
    ordinary = len(plans)
    for k in reversed(range(HEAVY_EPISODES)):
        plans.insert(
            (k + 1) * ordinary // (HEAVY_EPISODES + 1), Plan(f"heavy-{k}", [heavy] * HEAVY_CALLS, "whole")
        )
    return plans


@dataclass
class Result:
    transport: str
    calls: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    samples: list[tuple[int, float]] = field(default_factory=list)  # (calls done, RSS MiB)
    peak: float = 0.0
    cpu: float = 0.0
    seconds: float = 0.0
    episodes: int = 0

    def at(self, share: float) -> float:
        """RSS (MiB) sampled once ``share`` of the calls were done."""
        target = self.calls * share
        return next((rss for done, rss in self.samples if done >= target), self.samples[-1][1])

    @property
    def plateau(self) -> float:
        """Growth over the second half of the calls: RSS at the end over RSS at the half."""
        return self.at(1.0) / self.at(0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_command(tree: Path, transport: str, port: int, extra: list[str]) -> list[str]:
    base = [
        sys.executable,
        "-m",
        "mcp_resili",
        "serve",
        "--suite",
        "reliabilitybench",
        "--faults",
        "lambda=0.2",
    ]
    base += ["--time-scale", "0", "--transport", transport, *extra]
    return base + (["--port", str(port)] if transport == "http" else [])


def error_code(result: dict[str, Any]) -> str | None:
    if not result.get("isError"):
        return None
    text = (result.get("content") or [{}])[0].get("text", "")
    return text.split(":", 1)[0].removeprefix("Error ").strip()[:40] or "?"


class HttpClient:
    """A minimal Streamable HTTP client (handshake era): one session, JSON-RPC posts."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self.http, self.url, self.session = http, url, ""
        self.ids = itertools.count(1)

    async def open(self) -> None:
        response = await self.http.post(
            self.url,
            json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO},
            headers=self._h(),
        )
        self.session = response.headers["mcp-session-id"]
        await self.http.post(
            self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self._h()
        )

    def _h(self) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
        if self.session:
            headers["mcp-session-id"] = self.session
        return headers

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        response = await self.http.post(self.url, json=body, headers=self._h())
        text = response.text
        data = next((line[5:] for line in text.splitlines() if line.startswith("data:")), text)
        message = json.loads(data)
        if "error" in message:
            return {"isError": True, "content": [{"text": f"Error RPC{message['error']['code']}: "}]}
        return dict(message["result"])

    async def delete(self) -> None:
        await self.http.delete(self.url, headers=self._h())


class StdioClient:
    """JSON-RPC over a server's stdin/stdout, many requests in flight."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            message = json.loads(line)
            future = self.waiting.pop(message.get("id"), None)
            if future is not None:
                future.set_result(message)

    async def open(self) -> None:
        await self.request("initialize", HELLO)
        await self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = future
        await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        message = await future
        if "error" in message:
            return {"isError": True, "content": [{"text": f"Error RPC{message['error']['code']}: "}]}
        return dict(message["result"])


async def drive(
    transport: str, tree: Path, plans: list[Plan], clients: int, sample_every: int, extra: list[str]
) -> Result:
    result = Result(transport)
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *serve_command(tree, transport, port, extra),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=tree_env(tree),
        cwd=tree,
        limit=64 * 2**20,  # an answer line can be megabytes long
    )
    url = f"http://127.0.0.1:{port}/mcp"
    queue = iter(plans)
    done = 0
    started = time.perf_counter()

    def count(answer: dict[str, Any]) -> None:
        nonlocal done
        done += 1
        code = error_code(answer)
        if code is not None:
            result.errors[code] = result.errors.get(code, 0) + 1
        if done % sample_every == 0:
            result.samples.append((done, rss_mib(process.pid)[0]))

    async def play(client: Any, plan: Plan, named: bool) -> None:
        meta = {"_meta": {EPISODE_META: plan.episode}} if named else {}
        cut = len(plan.calls) // 2 if plan.ending == "abandon" else len(plan.calls)
        for tool, arguments in plan.calls[:cut]:
            count(await client.request("tools/call", {"name": tool, "arguments": arguments, **meta}))
        if plan.ending in ("fetch", "finish"):
            finish = {"name": "finish", "arguments": {"status": "completed", "summary": "soak"}, **meta}
            await client.request("tools/call", finish)
        if plan.ending == "fetch":
            await client.request(TRACE_METHOD, {"episode": plan.episode} if named else {})

    try:
        if transport == "http":
            async with httpx2.AsyncClient(timeout=120) as http:
                for _ in range(600):  # wait for the port (bounded: 60 s)
                    with contextlib.suppress(httpx2.HTTPError):
                        await http.get(url)
                        break
                    await asyncio.sleep(0.1)

                async def worker() -> None:
                    own = HttpClient(http, url)
                    await own.open()
                    for plan in queue:
                        if plan.ending == "session":  # its own session, deleted at the end
                            single = HttpClient(http, url)
                            await single.open()
                            await play(single, plan, named=False)
                            await single.delete()
                        else:
                            await play(own, plan, named=True)

                await asyncio.gather(*(worker() for _ in range(clients)))
        else:
            client = StdioClient(process)
            await client.open()

            async def stdio_worker() -> None:
                for plan in queue:
                    await play(client, plan, named=True)

            await asyncio.gather(*(stdio_worker() for _ in range(clients)))
        result.seconds = time.perf_counter() - started
        result.calls = done
        result.episodes = len(plans)
        result.samples.append((done, rss_mib(process.pid)[0]))
        result.peak = rss_mib(process.pid)[1]
        result.cpu = cpu_seconds(process.pid)
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()
    return result


def table(rows: list[tuple[str, Result]]) -> str:
    lines = [
        "| revision | transport | calls | episodes | RSS MiB at 25% | 50% | 75% | 100% | peak | end ÷ half "
        "| server CPU s | budget refusals |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows:
        refused = sum(v for k, v in r.errors.items() if "MEMORY_LIMIT" in k)
        lines.append(
            f"| {name} | {r.transport} | {r.calls:,} | {r.episodes:,} | {r.at(0.25):.0f} | {r.at(0.5):.0f} "
            f"| {r.at(0.75):.0f} | {r.at(1.0):.0f} | **{r.peak:.0f}** | {r.plateau:.2f} "
            f"| {r.cpu:.0f} | {refused} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--base", default="main", help="baseline git revision (default: main)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--transport", action="append", choices=("http", "stdio"))
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    transports = args.transport or ["http", "stdio"]
    plans = traffic(args.calls, args.seed)
    sent = sum(len(json.dumps(a)) for p in plans for _, a in p.calls)
    print(
        f"{len(plans)} episodes, {sum(len(p.calls) for p in plans)} calls, "
        f"{sent / 2**20:.0f} MiB of arguments"
    )
    load = " ".join(f"{x:.2f}" for x in __import__("os").getloadavg())
    rows: list[tuple[str, Result]] = []
    with checkout(args.base) as base_tree, checkout(".") as ours:
        runs = [
            (f"baseline `{args.base}` ({revision_of(base_tree)})", base_tree, []),
            (f"this ({revision_of(ours)})", ours, []),
            (
                f"this, `--max-server-memory {SMALL_BUDGET_MIB}`",
                ours,
                ["--max-server-memory", str(SMALL_BUDGET_MIB)],
            ),
        ]
        for transport in transports:
            for name, tree, extra in runs:
                every = max(1, args.calls // 40)
                result = asyncio.run(drive(transport, tree, plans, args.clients, every, extra))
                rows.append((name, result))
                print(
                    f"{name:32} {transport:5} {result.calls} calls in {result.seconds:.0f} s; RSS "
                    f"{result.at(0.25):.0f} {result.at(0.5):.0f} {result.at(0.75):.0f} "
                    f"{result.at(1.0):.0f} MiB, "
                    f"peak {result.peak:.0f}; errors {result.errors}",
                    flush=True,
                )
    text = table(rows)
    print(text)
    if args.write_docs:
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        section = "\n".join(
            [
                START,
                "## Server memory under a soak (`bench/soak.py`)",
                "",
                f"Measured {when} on {__import__('os').cpu_count()} CPUs ({platform.machine()}), Python "
                f"{platform.python_version()}; load average at the start {load}.",
                "",
                f"`mcp-resili serve --suite reliabilitybench --faults lambda=0.2 --time-scale 0`, driven by "
                f"{args.clients} concurrent clients through {sum(len(p.calls) for p in plans):,} tool "
                f"calls in {len(plans):,} episodes ({sent / 2**20:.0f} MiB of arguments: 70% of calls "
                "carry 512 B, 25% "
                "16 KiB, 5% 512 KiB; tickets written, searched, updated and listed, so each episode's state "
                "and results grow), and 4 episodes of 25 calls carrying 3 MiB each, left unfinished, "
                "spread through the run (at 1/5 to 4/5 of it). Episodes end as clients end them: 40% "
                "finish and fetch their trace, "
                "20% finish and leave, 20% (HTTP) delete their session or (stdio) leave unfinished, 20% stop "
                "mid-way. The same traffic against the baseline revision and this one, one server process "
                "each; RSS of the server process sampled as the calls go (MiB). *End ÷ half*: RSS after "
                "every call over RSS after half of them (1.00 = flat).",
                "",
                text,
                "",
                f"Reproduce: `python bench/soak.py --calls {args.calls} --write-docs`.",
                END,
            ]
        )
        write_section(section, START, END)


if __name__ == "__main__":
    main()
