"""Every protocol fault type against real clients over Streamable HTTP: the Python SDK (handshake era),
fastmcp (2026-07-28) and the MCP Inspector CLI (npm). What each client does is recorded, not judged:
the tests check that each met every fault type (the server's ledger says so) and keep the observations.

One HTTP server serves the whole module; fault ``i`` fires on the first call of the session whose fault
key is ``untasked/i`` (each client names its sessions' trials), so every client meets every type once.
The server plays the tiny suite (tests/tiny_suite); its ``lookup`` is the tool every client calls.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from servers import CLI_TIMEOUT, child_env, http_server

from mcp_resili.constants import EPISODE_HEADER
from mcp_resili.faults import PROTOCOL_TYPES
from mcp_resili.trace import ToolCallEvent, Trace

READER = "lookup"
ARGS = {"key": "apple"}
#: Seconds an Inspector run may take; one that hangs past it (it keeps waiting for a reset response) is
#: recorded as hanging. Its normal runs take about two seconds.
HANG_SECONDS = 10.0
#: Trial numbers per client, so their sessions never share a fault key's episode counter.
OFFSET = {"sdk": 0, "fastmcp": 100, "inspector": 200}


def fault_file(path: Path) -> Path:
    rules = [
        {"fault": {"type": kind}, "at_call": [1], "fault_key": f"untasked/{base + i}"}
        for base in OFFSET.values()
        for i, kind in enumerate(PROTOCOL_TYPES)
    ]
    path.write_text(json.dumps({"kind": "protocol", "rules": rules}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    work = tmp_path_factory.mktemp("protocol-clients")
    traces = work / "traces"
    args = (
        "--suite",
        "tiny",
        "--faults",
        str(fault_file(work / "faults.json")),
        "--time-scale",
        "0",
        "--trace-dir",
        str(traces),
    )
    with http_server(*args, workdir=work) as server:
        yield server.url, traces


def ledger(traces: Path, prefix: str) -> dict[str, str]:
    """Fault type met per episode of one client, from the server's trace files."""
    met = {}
    for path in traces.glob(f"{prefix}*.jsonl"):
        trace = Trace.read(path)
        for event in trace.events:
            if isinstance(event, ToolCallEvent) and event.fault is not None:
                met[trace.header.episode] = event.fault.type  # type: ignore[attr-defined]
    return met


def episode(client: str, i: int) -> dict[str, Any]:
    return {"id": f"{client}-{i}", "trial": OFFSET[client] + i}


def test_the_python_sdk_client_meets_every_protocol_fault_type(served: tuple[str, Path]) -> None:
    url, traces = served
    seen: dict[str, str] = {}

    async def one(i: int, kind: str) -> None:
        named = json.dumps(episode("sdk", i))
        http = httpx2.AsyncClient(headers={EPISODE_HEADER: named}, timeout=30)
        async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            try:
                result = await client.call_tool(READER, ARGS)
                seen[kind] = (
                    "isError result" if result.is_error else f"result ({len(str(result.content))} chars)"
                )
            except Exception as exc:
                seen[kind] = f"{type(exc).__name__}: {str(exc)[:80]}"
            try:  # the next request on the same session shows what the fault left behind
                await client.list_tools()
                seen[kind] += " | next request served"
            except Exception as exc:
                seen[kind] += f" | next request: {type(exc).__name__}: {str(exc)[:60]}"

    async def main() -> None:
        for i, kind in enumerate(PROTOCOL_TYPES):
            with anyio.fail_after(60):
                await one(i, kind)

    anyio.run(main)
    assert sorted(ledger(traces, "sdk-").values()) == sorted(PROTOCOL_TYPES)
    # Recorded, not judged; what the docs rely on: after expiry or revocation the session's next request
    # meets the HTTP guard (404 / 401 with a JSON-RPC body the SDK surfaces as MCPError).
    assert "Session not found" in seen["session_expired"].split("|")[1], seen["session_expired"]
    assert "Unauthorized" in seen["unauthorized"].split("|")[1], seen["unauthorized"]
    print(json.dumps(seen, indent=1))


def test_fastmcp_meets_every_protocol_fault_type(served: tuple[str, Path]) -> None:
    from fastmcp import Client as FastClient

    url, traces = served
    seen: dict[str, str] = {}

    async def main() -> None:
        for i, kind in enumerate(PROTOCOL_TYPES):
            meta = {"mcp-resili/episode": episode("fastmcp", i)}
            try:  # a reset surfaces when the client's task group closes, so the whole session is inside
                with anyio.fail_after(60):
                    async with FastClient(url, timeout=30) as client:
                        result = await client.call_tool_mcp(READER, ARGS, meta=meta)
                        seen[kind] = "isError result" if result.is_error else "result"
            except Exception as exc:
                seen[kind] = f"{type(exc).__name__}: {str(exc)[:80]}"

    anyio.run(main)
    assert sorted(ledger(traces, "fastmcp-").values()) == sorted(PROTOCOL_TYPES)
    print(json.dumps(seen, indent=1))


def test_the_inspector_cli_meets_every_protocol_fault_type(
    inspector: Path, served: tuple[str, Path], tmp_path: Path
) -> None:
    url, traces = served
    env = child_env(HOME=str(tmp_path), MCP_CATALOG_PATH=str(tmp_path / "mcp.json"))

    def one(i: int) -> tuple[str, int, str]:
        command = [
            str(inspector),
            "--cli",
            "--connect-timeout",
            str(int(CLI_TIMEOUT * 1000)),
            "--method",
            "tools/call",
            "--tool-name",
            READER,
            "--tool-arg",
            f"key={ARGS['key']}",
            "--header",
            f"{EPISODE_HEADER}: {json.dumps(episode('inspector', i))}",
            "--transport",
            "http",
            "--server-url",
            url,
        ]
        try:
            proc = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                env=env,
                timeout=HANG_SECONDS,
            )
        except subprocess.TimeoutExpired:
            return PROTOCOL_TYPES[i], -1, f"no answer within {HANG_SECONDS:g} s (stopped)"
        said = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
        return PROTOCOL_TYPES[i], proc.returncode, (said[-1] if said else "")[:100]

    with ThreadPoolExecutor(max_workers=3) as pool:
        seen = list(pool.map(one, range(len(PROTOCOL_TYPES))))
    assert sorted(ledger(traces, "inspector-").values()) == sorted(PROTOCOL_TYPES)
    exits = {kind: code for kind, code, _ in seen}
    # Recorded, not judged: a clean call exits 0, a JSON-RPC error does not.
    assert exits["log_flood"] == 0 and exits["tool_removed"] != 0
    print(json.dumps({kind: [code, line] for kind, code, line in seen}, indent=1))
