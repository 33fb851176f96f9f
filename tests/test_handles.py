"""Zero-configuration episodes: the default 2026-07-28 client, nothing configured, on ``serve`` over HTTP.

A stateless client that names no episode meets handle mode: ``start_episode`` mints a handle, which it
passes as a tool argument. These tests drive the SDK's default ``mcp.Client(url)`` with a scripted agent
that reads only descriptions and results (`handle_agent`), and check isolation, ownership, reproducible
fault draws, and that a handle-mode score is the runner's for the same task, trial and seed.
"""

from __future__ import annotations

import json
import ssl
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from handle_agent import play_with_handle, text_of
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from servers import running_http_server

from mcp_resili.agents.scripted import NaiveAgent, OracleAgent
from mcp_resili.client.plan import RunConfig
from mcp_resili.client.runner import execute
from mcp_resili.constants import HANDLE_ARGUMENT, META_EPISODE, START_TOOL, TRACE_METHOD
from mcp_resili.faults import parse_fault_spec
from mcp_resili.proxy.upstream import forward
from mcp_resili.registry.loader import get_suite
from mcp_resili.scoring.coping import score_episode
from mcp_resili.server.app import ResiliServer
from mcp_resili.server.handles import plain_schema
from mcp_resili.trace import Trace

pytestmark = pytest.mark.anyio

SUITE = get_suite("resilibench")
SEED = 5
TASK = "task_ada1c6bc"
#: One TLS context for the hundred clients (plain HTTP needs none; each would load the CA bundle).
TLS = ssl.create_default_context()
TOKEN_A = "a" * 24
TOKEN_B = "b" * 24


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def traces(trace_dir: Path) -> dict[str, Trace]:
    return {path.stem: Trace.read(path) for path in sorted(trace_dir.glob("*.jsonl"))}


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory):
    """``serve --transport http --faults resilibench --seed 5 --trace-dir DIR``, nothing else."""
    workdir = tmp_path_factory.mktemp("handles")
    args = ("--faults", "resilibench", "--seed", str(SEED), "--trace-dir", str(workdir / "traces"))
    async with running_http_server(*args, workdir=workdir) as server:
        yield server.url, workdir / "traces"


async def test_the_default_client_completes_a_task_by_reading_descriptions_and_scores_as_the_runner(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, trace_dir = served
    task = SUITE.task(TASK)
    async with Client(url) as client:  # nothing pinned: the default mode lands on 2026-07-28
        assert client.protocol_version == "2026-07-28"
        play = await play_with_handle(client, OracleAgent(), task, start_arguments={"task": TASK, "trial": 2})
    assert play.finished == "completed"
    assert f"Your task ({TASK}, trial 2)" in play.start_text
    assert SUITE.prompt(task) in play.start_text  # the runner's user prompt, word for word
    (trace,) = [t for t in traces(trace_dir).values() if play.handle not in json.dumps(t.header.model_dump())]
    assert (trace.header.task, trace.header.trial, trace.header.seed) == (TASK, 2, SEED)
    # No plumbing in the record: no start_episode call, no handle among the arguments.
    recorded = [e for e in trace.events if getattr(e, "tool", None) is not None]
    assert START_TOOL not in {e.tool for e in recorded}
    assert all(HANDLE_ARGUMENT not in e.arguments for e in recorded)
    assert [(e.tool, e.arguments) for e in recorded] == [(n, a) for n, a, _ in play.calls if n != "finish"]

    # The runner, in process, same task, trial and seed, same agent: the same score, component for component.
    run = await execute(
        RunConfig(
            suite="resilibench",
            models=("scripted:oracle",),
            faults=("resilibench",),
            tasks=(TASK,),
            trials=3,
            seed=SEED,
            db=tmp_path / "runs.db",
            stop_rules="none",
        )
    )
    (row,) = [r for r in run.rows if r.trial == 2]
    ours = score_episode(SUITE, task, trace)
    assert (ours.label, ours.value) == (row.label, row.value)
    assert ours.components == row.score["components"]
    runner_calls = [
        (e.tool, e.arguments)
        for e in Trace.from_lines(row.trace.splitlines()).events
        if getattr(e, "tool", None) not in (None, "finish") and type(e).__name__ == "ToolCallEvent"
    ]
    assert runner_calls == [(n, a) for n, a, _ in play.calls if n != "finish"]


async def test_handle_mode_schemas_are_the_runners_plus_one_required_string(served: tuple[str, Path]) -> None:
    url, _ = served
    async with Client(url) as client:
        handle_mode = {t.name: t for t in (await client.list_tools()).tools}
    runner_side = ResiliServer(SUITE, parse_fault_spec("resilibench", SUITE.spec_scope), seed=SEED)
    async with Client(runner_side.mcp) as client:  # in memory: a connection is an episode, no handles
        runner = {t.name: t for t in (await client.list_tools()).tools}
    assert set(handle_mode) == set(runner) | {START_TOOL}
    for name, tool in runner.items():
        theirs = handle_mode[name]
        assert theirs.input_schema["properties"][HANDLE_ARGUMENT]["type"] == "string"
        assert HANDLE_ARGUMENT in theirs.input_schema["required"]
        assert plain_schema(theirs.input_schema) == tool.input_schema, name
        assert (theirs.description, theirs.output_schema) == (tool.description, tool.output_schema)
    assert HANDLE_ARGUMENT not in json.dumps([t.input_schema for t in runner.values()])


async def test_a_hundred_default_clients_at_once_stay_isolated_with_their_own_reproducible_draws(
    served: tuple[str, Path],
) -> None:
    url, trace_dir = served
    tasks = [t.id for t in SUITE.default_tasks[:10]]
    plays: dict[int, Any] = {}

    async def agent(i: int) -> None:
        task = SUITE.task(tasks[i % 10])
        # The default client in every respect but one: the CA bundle is loaded once, not 100 times
        # (64 ms of CPU each). Each client still has its own HTTP client, connections and cookie jar.
        http = httpx2.AsyncClient(verify=TLS, timeout=60)
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            start = {"task": task.id, "trial": 10 + i // 10}
            plays[i] = await play_with_handle(client, NaiveAgent(), task, start_arguments=start, max_turns=3)

    with anyio.fail_after(300):
        async with anyio.create_task_group() as group:
            for i in range(100):
                group.start_soon(agent, i)
    assert {len(play.calls) for play in plays.values()} == {3}  # three turns each: a short episode
    assert len({play.handle for play in plays.values()}) == 100
    ours = {
        (t.header.task, t.header.trial): t for t in traces(trace_dir).values() if (t.header.trial or 0) >= 10
    }
    assert len(ours) == 100  # one episode each, every (task, trial) its own
    for trace in ours.values():
        # Decided calls (a call refused for its arguments takes no draw).
        calls = [e for e in trace.events if type(e).__name__ == "ToolCallEvent" and e.decision is not None]
        assert calls
        # Nothing shared: sequence numbers and every tool's ordinals are the episode's own.
        assert [e.seq for e in trace.events] == list(range(1, len(trace.events) + 1))
        seen: Counter[str] = Counter()
        for event in calls:
            assert event.decision.ordinal == seen[event.tool]
            seen[event.tool] += 1
    # Reproducible by seed: a fresh in-process server replays each episode's draws from (seed, task,
    # trial) alone; another seed draws differently.
    for seed, same in ((SEED, True), (SEED + 1, False)):
        replay = ResiliServer(
            SUITE, parse_fault_spec("resilibench", SUITE.spec_scope), seed=seed, time_scale=0
        )
        differ = 0
        # Every episode with the server's seed; twenty with another.
        replayed_here = list(ours.items()) if same else list(ours.items())[:20]
        async with Client(replay.mcp) as client:
            for (task_id, trial), trace in replayed_here:
                meta = {
                    META_EPISODE: {"id": f"replay-{seed}-{task_id}-{trial}", "task": task_id, "trial": trial}
                }
                recorded = [e for e in trace.events if type(e).__name__ == "ToolCallEvent"]
                for event in recorded:
                    await client.call_tool(event.tool, event.arguments, meta=meta)
                live = replay.episodes.peek(f"replay-{seed}-{task_id}-{trial}")
                assert live is not None
                replayed = [e for e in live.events if type(e).__name__ == "ToolCallEvent"]
                pairs = [(a.decision, b.decision) for a, b in zip(recorded, replayed, strict=True)]
                if same:
                    assert all(a == b for a, b in pairs), (task_id, trial)
                differ += any(a is not None and b is not None and a.roll != b.roll for a, b in pairs)
        assert (differ == 0) if same else differ > 10


async def test_a_missing_unknown_forged_or_expired_handle_is_an_error_result_saying_what_to_do(
    served: tuple[str, Path],
) -> None:
    url, _ = served
    args = {"source": "data/x.csv"}
    async with Client(url) as client:
        missing = await client.call_tool("file_operations_reader", args)
        junk = await client.call_tool("file_operations_reader", {**args, HANDLE_ARGUMENT: 12})
        forged = await client.call_tool("file_operations_reader", {**args, HANDLE_ARGUMENT: "eh-aaaa-bbbb"})
        started = await client.call_tool(START_TOOL, {"task": TASK})
        handle = started.structured_content[HANDLE_ARGUMENT]
        tampered = handle[:-1] + ("a" if handle[-1] != "a" else "b")
        altered = await client.call_tool("file_operations_reader", {**args, HANDLE_ARGUMENT: tampered})
        served_call = await client.call_tool("file_operations_reader", {**args, HANDLE_ARGUMENT: handle})
        # The runner-only method closes the episode (its owner may): the handle expires with it.
        trace = await forward(client, TRACE_METHOD, {"episode": handle})
        expired = await client.call_tool("file_operations_reader", {**args, HANDLE_ARGUMENT: handle})
    assert trace["header"]["task"] == TASK and len(trace["events"]) == 1
    assert "Error NO_EPISODE" not in text_of(served_call) and "HANDLE" not in text_of(served_call)
    for result, code in (
        (missing, "NO_EPISODE"),
        (junk, "NO_EPISODE"),
        (forged, "INVALID_HANDLE"),
        (altered, "INVALID_HANDLE"),
        (expired, "EPISODE_EXPIRED"),
    ):
        assert result.is_error is True
        assert text_of(result).startswith(f"Error {code}: ")
        assert START_TOOL in text_of(result)


async def test_a_handle_is_bound_to_the_principal_that_obtained_it(tmp_path: Path) -> None:
    """Two tokens, two principals: a leaked handle is inert for the other one."""
    args = ("--faults", "none", "--auth-token", TOKEN_A, "--auth-token", TOKEN_B)
    async with running_http_server(*args, workdir=tmp_path) as server:

        def client(token: str) -> Client:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
            return Client(streamable_http_client(server.url, http_client=http))

        async with client(TOKEN_A) as alice, client(TOKEN_B) as bob:
            started = await alice.call_tool(START_TOOL, {"task": TASK})
            handle = started.structured_content[HANDLE_ARGUMENT]
            call = {"source": "https://api.example.com/orders/676", HANDLE_ARGUMENT: handle}
            stolen = await bob.call_tool("network_fetcher", call)
            own = await alice.call_tool("network_fetcher", call)
            # Naming it in _meta does not help either.
            meta = {META_EPISODE: handle}
            via_meta = await bob.call_tool("network_fetcher", {"source": call["source"]}, meta=meta)
    assert own.is_error is False
    for refused in (stolen, via_meta):
        assert refused.is_error is True and text_of(refused).startswith("Error INVALID_HANDLE: ")


async def test_an_episode_belongs_to_whoever_opened_it(served: tuple[str, Path]) -> None:
    """Another client (its own cookie) naming your episode is refused; a cookie-less stranger too."""
    url, _ = served
    episode = f"mine-{id(object())}"
    meta = {META_EPISODE: {"id": episode, "task": TASK, "trial": 7}}
    call = ("network_fetcher", {"source": "https://api.example.com/orders/676"})
    async with Client(url) as owner, Client(url) as other:
        first = await owner.call_tool(*call, meta=meta)
        again = await owner.call_tool(*call, meta=meta)  # the owner keeps its episode
        intruder = await other.call_tool(*call, meta=meta)
    assert "NOT_YOUR_EPISODE" not in text_of(first) + text_of(again)
    assert intruder.is_error is True and text_of(intruder).startswith("Error NOT_YOUR_EPISODE: ")
    # A client that keeps no cookie cannot be told apart from anyone: a client-chosen id does not open
    # an existing episode for it, even its own; the handle it got from start_episode does.
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    modern = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "curl", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28"}

    async def post(params: dict[str, Any]) -> dict[str, Any]:
        routing = {"mcp-method": "tools/call", "mcp-name": params["name"]}
        async with httpx2.AsyncClient(timeout=30) as http:  # a fresh client each time: no cookie kept
            reply = await http.post(url, json={**body, "params": params}, headers={**headers, **routing})
        text = reply.text
        data = (
            next(line[5:] for line in text.splitlines() if line.startswith("data:"))
            if "data:" in text
            else text
        )
        return json.loads(data)["result"]

    cookieless = f"cookieless-{id(object())}"
    named = {"_meta": {**modern, META_EPISODE: cookieless}, "name": call[0], "arguments": call[1]}
    opened = await post(named)
    reopened = await post(named)
    assert "isError" not in opened or "Error NOT_YOUR_EPISODE" not in json.dumps(opened)
    assert reopened["isError"] is True and "NOT_YOUR_EPISODE" in reopened["content"][0]["text"]
    start = await post({"_meta": modern, "name": START_TOOL, "arguments": {"task": TASK}})
    handle = start["structuredContent"][HANDLE_ARGUMENT]
    for _ in range(2):
        result = await post(
            {"_meta": modern, "name": call[0], "arguments": {**call[1], HANDLE_ARGUMENT: handle}}
        )
        assert (
            "Error" not in result["content"][0]["text"][:6] or "NOT_YOUR" not in result["content"][0]["text"]
        )


async def test_two_in_memory_connections_cannot_share_an_episode_by_naming_it() -> None:
    server = ResiliServer(SUITE, parse_fault_spec("none", SUITE.spec_scope), seed=0)
    meta = {META_EPISODE: {"id": "shared?", "task": TASK}}
    call = ("network_fetcher", {"source": "https://api.example.com/orders/676"})
    async with Client(server.mcp) as first, Client(server.mcp) as second:
        ok = await first.call_tool(*call, meta=meta)
        refused = await second.call_tool(*call, meta=meta)
    assert ok.is_error is False
    assert refused.is_error is True and text_of(refused).startswith("Error NOT_YOUR_EPISODE: ")


async def test_a_server_that_forbids_client_seeds_decides_every_draw(tmp_path: Path) -> None:
    args = ("--faults", "resilibench", "--seed", "3", "--forbid-client-seeds")
    async with running_http_server(*args, workdir=tmp_path) as server, Client(server.url) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "seed" not in tools[START_TOOL].input_schema["properties"]
        refused = await client.call_tool(START_TOOL, {"task": TASK, "seed": 4})
        call = ("network_fetcher", {"source": "https://api.example.com/orders/676"})
        own_seed = await client.call_tool(*call, meta={META_EPISODE: {"id": "s3", "task": TASK, "seed": 3}})
        other_seed = await client.call_tool(*call, meta={META_EPISODE: {"id": "s4", "task": TASK, "seed": 4}})
        key = {"id": "k", "task": TASK, "trial": 1, "fault_key": "other/9"}
        other_key = await client.call_tool(*call, meta={META_EPISODE: key})
    assert refused.is_error is True and "seed" in text_of(refused)
    assert "CLIENT_SEED_REFUSED" not in text_of(own_seed)
    for result in (other_seed, other_key):
        assert result.is_error is True and text_of(result).startswith("Error CLIENT_SEED_REFUSED: ")


async def test_serve_episode_over_http_pins_every_unnamed_request_to_one_episode(tmp_path: Path) -> None:
    args = ("--faults", "none", "--task", TASK, "--episode", "pinned-1", "--trace-dir", str(tmp_path / "t"))
    call = ("network_fetcher", {"source": "https://api.example.com/orders/676"})
    async with (
        running_http_server(*args, workdir=tmp_path) as server,
        Client(server.url) as modern,
        Client(server.url, mode="legacy") as legacy,
    ):
        names = {t.name for t in (await modern.list_tools()).tools}
        assert START_TOOL not in names  # pinned: no handles needed
        for client in (modern, legacy):
            assert (await client.call_tool(*call)).is_error is False
    (trace,) = traces(tmp_path / "t").values()
    assert trace.header.episode == "pinned-1" and trace.header.task == TASK
    assert [e.seq for e in trace.events] == [1, 2]
