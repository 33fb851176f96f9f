"""Fuzz the server at scale and measure session isolation (issue 12).

Usage::

    python bench/fuzz_server.py [--calls 10000] [--stdio-calls 1500] [--sessions 200] [--write-docs]

Fuzz: calls drawn by hypothesis (fixed seed) from every tool's input schema, with the same strategies
and checks as tests/test_fuzz.py (tests/fuzzing.py), spread over the three suites in memory, plus
``--stdio-calls`` through a real ``mcp-resili serve`` subprocess over stdio (ReliabilityBench), whose
episodes are read back with ``mcp-resili/episode_trace``. Each suite runs with faults that reshape or
replace results (chaos λ=0.3 / λ=0.2, ToolMaze P4). Counted: JSON-RPC (protocol) errors, results
breaking their output schema or holding NaN/infinity, tool crashes and timeouts, calls missing from
(or misnumbered in) the trace.

Isolation: ``--sessions`` standard `mcp.Client` sessions in the handshake era, all open at once against
``mcp-resili serve --transport http`` (ReliabilityBench, chaos λ=0.3, a support task) on 127.0.0.1,
each writing a ticket and listing tickets. Counted: tickets of another session seen, ticket ids not
starting afresh, sequence numbers or ordinals not the session's own, fault decisions that differ from a
replay of the session's (seed, task, trial) in a fresh server, and trials shared by two sessions.

``--write-docs`` rewrites the section between the fuzz markers in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from benchdocs import write_section
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from mcp_resili.client.recorded import fetch_episode_trace
from mcp_resili.constants import DISCOVERY_TOOLS, META_EPISODE, META_EVENT, VERSION
from mcp_resili.faults import CallOutcome, parse_fault_spec
from mcp_resili.registry.loader import get_suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.server.episodes import EpisodeRequest
from mcp_resili.trace import Trace

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
START_MARKER = "<!-- fuzz:start -->"
END_MARKER = "<!-- fuzz:end -->"
sys.path.insert(0, str(REPO_ROOT / "tests"))
from fuzzing import CallChecker, calls_for  # noqa: E402
from servers import running_http_server, stdio_parameters  # noqa: E402

SUITES = {"resilibench": "lambda=0.3", "reliabilitybench": "lambda=0.2", "toolmaze": "toolmaze:P4"}
STDIO_SUITE = "reliabilitybench"
ISOLATION_TASK = "rb_support_l1_00"
ISOLATION_FAULTS = "lambda=0.3"
SEED = 7


@dataclass
class FuzzCounts:
    where: str
    calls: int = 0
    protocol_errors: int = 0
    schema_violations: int = 0
    missing_from_trace: int = 0
    crashes: int = 0
    other_problems: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, checker: CallChecker) -> None:
        self.calls += checker.calls
        self.codes += checker.errors
        for problem in checker.problems:
            self.examples.append(problem)
            if "breaks its schema" in problem or "NaN" in problem or "without structured" in problem:
                self.schema_violations += 1
            elif "recorded" in problem or "seq" in problem or "ordinal" in problem:
                self.missing_from_trace += 1
            elif "TOOL_CRASHED" in problem or "TOOL_TIMEOUT" in problem:
                self.crashes += 1
            else:
                self.other_problems += 1


def draw_episodes(tools: list[Any], task_ids: list[str], calls: int) -> list[tuple[list[Any], str]]:
    """Episodes of 1–6 fuzzed calls, drawn with a fixed seed until they hold ``calls`` calls."""
    drawn: list[tuple[list[Any], str]] = []
    total = 0

    @settings(
        # Episodes hold 3 calls on average: half as many examples as calls is enough, and bounded.
        max_examples=max(1, calls // 2),
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(calls_for(tools), min_size=1, max_size=6), st.sampled_from(task_ids))
    def collect(episode: list[Any], task: str) -> None:
        nonlocal total
        if total < calls:
            drawn.append((episode, task))
            total += len(episode)

    collect()
    return drawn


async def fuzz_in_memory(suite_name: str, faults: str, calls: int) -> FuzzCounts:
    suite = get_suite(suite_name)
    server = ResiliServer(suite, parse_fault_spec(faults, suite.spec_scope), time_scale=0)
    tools = {tool.name: tool for tool in server._tools}
    episodes = draw_episodes(server._tools, [t.id for t in suite.tasks], calls)
    counts = FuzzCounts(f"{suite_name} ({faults}), in memory")
    start = time.perf_counter()
    async with Client(server.mcp) as client:
        for number, (episode_calls, task) in enumerate(episodes):
            episode_id = f"fuzz-{number}"
            meta = {META_EPISODE: {"id": episode_id, "task": task}}
            episode = server.episode(EpisodeRequest(episode_id, task=task))
            episode.history += [CallOutcome(name, True) for name in tools]  # reach every tool
            checker = CallChecker(tools)
            for name, arguments in episode_calls:
                try:
                    result = await client.call_tool(name, arguments, meta=meta)
                except (MCPError, RuntimeError) as exc:
                    counts.protocol_errors += 1
                    counts.examples.append(f"{name}: {type(exc).__name__}: {exc}")
                    server.take_events(episode_id)
                    continue
                checker.check(name, arguments, result, server.take_events(episode_id))
            counts.add(checker)
            server.close_episode(episode_id)
    counts.seconds = time.perf_counter() - start
    return counts


async def fuzz_stdio(calls: int) -> FuzzCounts:
    suite = get_suite(STDIO_SUITE)
    tools_list = ResiliServer(suite, parse_fault_spec("none"))._tools
    episodes = draw_episodes(tools_list, [t.id for t in suite.tasks], calls)
    counts = FuzzCounts(f"{STDIO_SUITE} ({SUITES[STDIO_SUITE]}), stdio subprocess")
    params = stdio_parameters("--suite", STDIO_SUITE, "--faults", SUITES[STDIO_SUITE], "--time-scale", "0")
    start = time.perf_counter()
    async with Client(params, read_timeout_seconds=60) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        for number, (episode_calls, task) in enumerate(episodes):
            episode_id = f"fuzz-stdio-{number}"
            meta = {META_EPISODE: {"id": episode_id, "task": task}}
            answered = []
            for name, arguments in episode_calls:
                try:
                    answered.append((name, arguments, await client.call_tool(name, arguments, meta=meta)))
                except (MCPError, RuntimeError) as exc:
                    counts.protocol_errors += 1
                    counts.examples.append(f"{name}: {type(exc).__name__}: {exc}")
            pending = list(await fetch_episode_trace(client, episode_id) or [])
            checker = CallChecker(tools)
            for name, arguments, result in answered:
                mine = [] if name in DISCOVERY_TOOLS or not pending else [pending.pop(0)]
                checker.check(name, arguments, result, mine)
            counts.add(checker)
            counts.missing_from_trace += len(pending)
    counts.seconds = time.perf_counter() - start
    return counts


@dataclass
class IsolationCounts:
    sessions: int
    calls: int = 0
    episodes: int = 0
    state_leaks: int = 0
    ordinal_leaks: int = 0
    draw_leaks: int = 0
    shared_trials: int = 0
    distinct_ledgers: int = 0
    seconds: float = 0.0


def _ticket(i: int) -> dict[str, Any]:
    return {"customer_id": f"C-S{i}", "subject": f"session {i}", "description": "x", "priority": "low"}


def _session_calls(i: int) -> list[tuple[str, dict[str, Any]]]:
    return [("create_ticket", _ticket(i)), ("list_open_tickets", {}), ("create_ticket", _ticket(i))]


async def isolation(sessions: int) -> IsolationCounts:
    suite = get_suite(STDIO_SUITE)
    counts = IsolationCounts(sessions)
    tls = ssl.create_default_context()
    played: dict[int, list[tuple[Any, dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        args = ("--suite", STDIO_SUITE, "--faults", ISOLATION_FAULTS, "--seed", str(SEED))
        args += ("--task", ISOLATION_TASK, "--time-scale", "0", "--expose-faults")
        args += ("--trace-dir", str(workdir / "traces"))
        async with running_http_server(*args, workdir=workdir) as server:

            async def one(i: int) -> None:
                async with (
                    httpx2.AsyncClient(verify=tls, timeout=120) as http,
                    Client(streamable_http_client(server.url, http_client=http), mode="legacy") as client,
                ):
                    played[i] = []
                    for tool, arguments in _session_calls(i):
                        result = await client.call_tool(tool, arguments)
                        played[i].append((result, (result.meta or {})[META_EVENT]))

            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(sessions):
                    tg.start_soon(one, i)
            counts.seconds = time.perf_counter() - start
        initial = suite.initial_state(suite.task(ISOLATION_TASK))["tickets"]
        allowed = {t["customer_id"] for t in initial.values()}
        plan = parse_fault_spec(ISOLATION_FAULTS, suite.spec_scope)
        replay = ResiliServer(suite, plan, seed=SEED, time_scale=0, expose_faults=True)
        trials: Counter[int | None] = Counter()
        ledgers = set()
        episodes = set()
        async with Client(replay.mcp) as client:
            for i, calls in played.items():
                events = [event for _, event in calls]
                counts.calls += len(events)
                episodes.add(events[0]["episode"])
                if [e["seq"] for e in events] != [1, 2, 3] or [e["decision"]["ordinal"] for e in events] != [
                    0,
                    0,
                    1,
                ]:
                    counts.ordinal_leaks += 1
                created = [
                    r.structured_content["ticket_id"]
                    for r, _ in calls
                    if not r.is_error and "ticket_id" in (r.structured_content or {})
                ]
                listed = [
                    t["customer_id"]
                    for r, _ in calls
                    if not r.is_error
                    for t in (r.structured_content or {}).get("tickets", [])
                ]
                if any(c not in ("T-1001", "T-1002") for c in created) or any(
                    c not in allowed | {f"C-S{i}"} for c in listed
                ):
                    counts.state_leaks += 1
                header = Trace.read(workdir / "traces" / f"{events[0]['episode']}.jsonl").header
                trials[header.trial] += 1
                meta = {META_EPISODE: {"id": f"replay-{i}", "task": ISOLATION_TASK, "trial": header.trial}}
                replayed = [
                    (await client.call_tool(tool, arguments, meta=meta)).meta[META_EVENT]["decision"]
                    for tool, arguments in _session_calls(i)
                ]
                recorded = [e["decision"] for e in events]
                counts.draw_leaks += replayed != recorded
                ledgers.add(json.dumps(recorded, sort_keys=True))
        counts.episodes = len(episodes)
        counts.shared_trials = sum(n - 1 for n in trials.values() if n > 1)
        counts.distinct_ledgers = len(ledgers)
    return counts


def _revision() -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{sha} + uncommitted changes" if dirty else sha


def docs_section(fuzz: list[FuzzCounts], iso: IsolationCounts, args: argparse.Namespace) -> str:
    total = FuzzCounts("total")
    for counts in fuzz:
        for name in ("calls", "protocol_errors", "schema_violations", "missing_from_trace", "crashes"):
            setattr(total, name, getattr(total, name) + getattr(counts, name))
        total.codes += counts.codes
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    command = "python bench/fuzz_server.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "write_docs"
    )
    lines = [
        START_MARKER,
        "## Fuzzing and session isolation (`bench/fuzz_server.py`)",
        "",
        "Calls drawn by hypothesis (fixed seed) from every tool's input schema, mostly valid, with the",
        "bounds, NaN/infinity, 2**53 and 10**400, wrong types, unknown keys and unknown tools mixed in",
        "(the strategies and checks of `tests/test_fuzz.py`, at scale). Each suite runs with faults that",
        "reshape or replace results.",
        "",
        f"- Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        f"- Machine: {os.cpu_count()} CPUs ({platform.machine()}), Python {platform.python_version()}, "
        f"mcp-resili {VERSION}; load average (1/5/15 min) at the end: {load}",
        f"- Revision: {_revision()}",
        f"- Command: `{command} --write-docs`",
        "",
        "| where | calls | protocol errors | output-schema violations | missing from trace | crashes"
        ", timeouts | s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in [*fuzz, total]:
        name = f"**{c.where}**" if c is total else c.where
        seconds = "" if c is total else f"{c.seconds:.0f}"
        lines.append(
            f"| {name} | {c.calls} | {c.protocol_errors} | {c.schema_violations} | "
            f"{c.missing_from_trace} | {c.crashes} | {seconds} |"
        )
    top = ", ".join(f"{code} {n}" for code, n in total.codes.most_common(8))
    lines += [
        "",
        f"Error results by code (all suites): {top}.",
        "`INVALID_INPUT` is mostly the fuzzer's doing (arguments off the schema, numbers no tool can use);",
        "the rest are the tools' declared errors and injected faults.",
        "",
        f"**Session isolation**: {iso.sessions} standard `mcp.Client` sessions (handshake era, one",
        "Streamable HTTP session each, all open at once) against `mcp-resili serve --transport http`",
        f"(ReliabilityBench, `{ISOLATION_FAULTS}`, task `{ISOLATION_TASK}`), each writing a ticket, listing",
        f"tickets and writing again ({iso.calls} calls in {iso.seconds:.1f} s): {iso.episodes} episodes;",
        f"{iso.state_leaks} sessions saw another's state, {iso.ordinal_leaks} had sequence numbers or",
        f"ordinals not their own, {iso.draw_leaks} had fault decisions that differ from a replay of their",
        f"(seed, task, trial) in a fresh server; {iso.shared_trials} trials were shared, and the sessions'",
        f"fault ledgers took {iso.distinct_ledgers} distinct values (independent draws per trial).",
        END_MARKER,
    ]
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> tuple[list[FuzzCounts], IsolationCounts]:
    fuzz = []
    share = args.calls // len(SUITES)
    for name, faults in SUITES.items():
        counts = await fuzz_in_memory(name, faults, share)
        print(f"{counts.where}: {counts.calls} calls, {counts.seconds:.0f} s", file=sys.stderr)
        fuzz.append(counts)
    if args.stdio_calls:
        counts = await fuzz_stdio(args.stdio_calls)
        print(f"{counts.where}: {counts.calls} calls, {counts.seconds:.0f} s", file=sys.stderr)
        fuzz.append(counts)
    iso = await isolation(args.sessions)
    return fuzz, iso


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=10_000, help="fuzzed calls in memory, over all suites")
    parser.add_argument("--stdio-calls", type=int, default=1500, help="fuzzed calls over stdio")
    parser.add_argument("--sessions", type=int, default=200, help="concurrent HTTP sessions")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    fuzz, iso = anyio.run(main, args)
    section = docs_section(fuzz, iso, args)
    print(section)
    for counts in fuzz:
        for example in counts.examples[:5]:
            print(f"PROBLEM ({counts.where}): {example}", file=sys.stderr)
    if args.write_docs:
        write_section(section, START_MARKER, END_MARKER)


if __name__ == "__main__":
    cli()
