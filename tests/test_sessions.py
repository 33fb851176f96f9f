"""One episode per MCP session, independent reproducible trials, and the runner-only trace channel.

The HTTP tests run a real ``mcp-resili serve --transport http`` subprocess on 127.0.0.1 and connect with the
standard `mcp.Client`: in the handshake era (``mode="legacy"``) each Streamable HTTP session is an episode;
in the stateless modern era a request must name its episode. The rest runs in memory. The server plays
the tiny suite (tests/tiny_suite) under the generic chaos profile: ``record`` writes to the episode's
state (after ``lookup``, its dependency), ``list_records`` reads it back.
"""

from __future__ import annotations

import json
import math
import ssl
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from servers import running_http_server
from tiny_suite import suite as tiny_suite

from mcp_resili.client.recorded import fetch_episode_trace
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.constants import EPISODE_HEADER, META_EPISODE, META_EVENT, TRACE_METHOD
from mcp_resili.faults import parse_fault_spec
from mcp_resili.server.app import EpisodeTraceResult, ResiliServer
from mcp_resili.server.episodes import EpisodeRequest, EpisodeTable, fault_key_of
from mcp_resili.trace import Trace

pytestmark = pytest.mark.anyio

SUITE = tiny_suite()
TASK = "tiny-5"
FAULTS = "lambda=0.3"
SEED = 7
SESSIONS = 200


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class HttpTarget:
    def __init__(self, url: str, trace_dir: Path) -> None:
        self.url = url
        self.trace_dir = trace_dir


@pytest.fixture(scope="module")
async def http(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HttpTarget]:
    """A tiny-suite server with chaos faults, bound to one task, exposing each call's event."""
    workdir = tmp_path_factory.mktemp("sessions")
    args = ("--suite", "tiny", "--faults", FAULTS, "--seed", str(SEED), "--task", TASK)
    args += ("--time-scale", "0", "--expose-faults", "--trace-dir", str(workdir / "traces"))
    async with running_http_server(*args, workdir=workdir) as server:
        yield HttpTarget(server.url, workdir / "traces")


#: Each session's calls: the write's dependency, a write, then a read of the state every session would
#: share if they leaked.
def session_calls(i: int) -> list[tuple[str, dict[str, Any]]]:
    return [("lookup", {"key": "apple"}), ("record", {"label": f"s{i}", "value": i}), ("list_records", {})]


#: One TLS context for every client (plain HTTP needs none, but each new httpx2 client would otherwise
#: load the CA bundle: 200 of them cost seconds of CPU).
TLS = ssl.create_default_context()


async def play_session(url: str, i: int) -> list[tuple[types.CallToolResult, dict[str, Any]]]:
    """One standard client in the handshake era: one Streamable HTTP session, no episode named."""
    async with (
        httpx2.AsyncClient(verify=TLS, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        played = []
        for tool, arguments in session_calls(i):
            result = await client.call_tool(tool, arguments)
            played.append((result, (result.meta or {})[META_EVENT]))
        return played


async def test_200_concurrent_http_sessions_are_200_episodes_with_no_shared_state_ordinal_or_draw(
    http: HttpTarget,
) -> None:
    sessions: dict[int, list[tuple[types.CallToolResult, dict[str, Any]]]] = {}

    async def one(i: int) -> None:
        sessions[i] = await play_session(http.url, i)

    with anyio.fail_after(240):
        async with anyio.create_task_group() as tg:
            for i in range(SESSIONS):
                tg.start_soon(one, i)

    episodes = set()
    for i, played in sessions.items():
        events = [event for _, event in played]
        (episode,) = {event["episode"] for event in events}
        episodes.add(episode)
        # Ordinals and sequence numbers are the session's own; a write whose dependency failed in this
        # session is refused before any draw.
        assert [e["seq"] for e in events] == [1, 2, 3]
        looked, recorded, listed = played
        refused = looked[0].is_error
        assert (recorded[1]["error_code"] == "DEPENDENCY_NOT_MET") is refused
        assert [e["decision"] and e["decision"]["ordinal"] for e in events] == [0, None if refused else 0, 0]
        # State is the session's own: its record ids start afresh, it lists no other session's records.
        if not recorded[0].is_error:
            assert recorded[0].structured_content == {"record_id": "R-0001", "count": 1}
        if not listed[0].is_error:  # a response-side fault may hide a write that happened, or drop it
            own = [] if refused else [{"label": f"s{i}", "value": i}]
            assert listed[0].structured_content["records"] in ([], own)
    assert len(episodes) == SESSIONS

    # Draws: each session is trial k of the task, recorded in its trace header, and replays exactly
    # in a fresh server from (seed, task, trial) alone.
    replay = ResiliServer(
        SUITE, parse_fault_spec(FAULTS, SUITE.spec_scope), seed=SEED, time_scale=0, expose_faults=True
    )
    trials = []
    ledgers = set()
    async with Client(replay.mcp) as client:
        for i, played in sessions.items():
            header = Trace.read(http.trace_dir / f"{played[0][1]['episode']}.jsonl").header
            assert (header.seed, header.task, header.fault_key) == (SEED, TASK, f"{TASK}/{header.trial}")
            trials.append(header.trial)
            meta = {META_EPISODE: {"id": f"replay-{i}", "task": TASK, "trial": header.trial}}
            replayed = [
                (await client.call_tool(tool, arguments, meta=meta)).meta[META_EVENT]["decision"]
                for tool, arguments in session_calls(i)
            ]
            recorded = [event["decision"] for _, event in played]
            assert replayed == recorded
            ledgers.add(json.dumps(recorded, sort_keys=True))
    assert sorted(trials) == sorted(set(trials)) and len(trials) == SESSIONS
    assert len(ledgers) > SESSIONS // 2  # independent draws: trials do not repeat one another


async def test_a_stateless_request_naming_no_episode_is_told_how_to_start_one(http: HttpTarget) -> None:
    """Issue 33: no longer a JSON-RPC error but an error result a model can act on (handle mode)."""
    async with Client(http.url, read_timeout_seconds=30) as client:  # modern era: no session id
        refused = await client.call_tool("list_records", {})
        assert refused.is_error is True
        text = refused.content[0].text
        assert text.startswith("Error NO_EPISODE: ") and "start_episode" in text
        # The same client naming its episode in _meta is served.
        named = {META_EPISODE: {"id": f"named-{uuid.uuid4().hex[:8]}", "task": TASK, "trial": 3}}
        result = await client.call_tool("list_records", {}, meta=named)
    assert result.is_error is False or result.meta[META_EVENT]["fault"] is not None


async def test_the_episode_header_names_episode_task_and_trial_for_clients_that_cannot_send_meta(
    http: HttpTarget,
) -> None:
    episode = f"header-{uuid.uuid4().hex[:8]}"
    other_task = "tiny-2"
    header = json.dumps({"id": episode, "task": other_task, "trial": 5, "seed": 11})
    transport = streamable_http_client(
        http.url, http_client=httpx2.AsyncClient(headers={EPISODE_HEADER: header}, timeout=30)
    )
    async with Client(transport) as client:
        first = await client.call_tool("list_records", {})
        second = await client.call_tool("list_records", {})
    events = [first.meta[META_EVENT], second.meta[META_EVENT]]
    assert {e["episode"] for e in events} == {episode}
    assert [e["seq"] for e in events] == [1, 2]
    trace = Trace.read(http.trace_dir / f"{episode}.jsonl")
    assert (trace.header.task, trace.header.trial, trace.header.seed) == (other_task, 5, 11)
    assert trace.header.fault_key == f"{other_task}/5"


# --- in memory ------------------------------------------------------------------------------------


def make_server(**options: Any) -> ResiliServer:
    return ResiliServer(SUITE, parse_fault_spec(FAULTS, SUITE.spec_scope), seed=SEED, time_scale=0, **options)


async def test_connections_to_one_task_play_successive_trials_and_a_pinned_trial_repeats_its_draws(
    tmp_path: Path,
) -> None:
    server = make_server(task=TASK, trace_dir=tmp_path)
    for _ in range(3):
        async with Client(server.mcp) as client:  # one connection = one episode
            for _ in range(4):
                await client.call_tool("list_records", {})
    pinned = make_server(task=TASK, trial=1, trace_dir=tmp_path / "pinned")
    async with Client(pinned.mcp) as client:
        for _ in range(4):
            await client.call_tool("list_records", {})

    traces = sorted(
        (Trace.read(path) for path in tmp_path.glob("*.jsonl")), key=lambda t: t.header.trial or 0
    )
    assert [(t.header.trial, t.header.fault_key) for t in traces] == [(k, f"{TASK}/{k}") for k in range(3)]
    ledgers = [[c.decision.model_dump() for c in t.tool_calls if c.decision] for t in traces]
    assert len({json.dumps(ledger) for ledger in ledgers}) == 3  # trials draw independently
    (pinned_trace,) = [Trace.read(path) for path in (tmp_path / "pinned").glob("*.jsonl")]
    assert pinned_trace.header.trial == 1
    assert [c.decision.model_dump() for c in pinned_trace.tool_calls if c.decision] == ledgers[1]


async def test_episodes_without_a_task_never_share_a_fault_key() -> None:
    table = EpisodeTable(default_seed=0)
    keys = [table.get(EpisodeRequest(f"e{i}")).fault_key for i in range(5)]
    assert keys == [fault_key_of(None, k) for k in range(5)] and len(set(keys)) == 5


async def test_an_external_trial_meets_the_same_fault_draws_as_the_runners_trial(tmp_path: Path) -> None:
    config = RunConfig(
        suite="tiny",
        models=("scripted:naive",),
        faults=(FAULTS,),
        tasks=(TASK,),
        trials=2,
        seed=SEED,
        time_scale=0,
        db=tmp_path / "runs.db",
    )
    result = await execute(config)
    ran = Trace.from_lines(next(r for r in result.rows if r.trial == 1).trace.splitlines())
    assert ran.tool_calls, "the scripted agent made no call"
    # An outside agent making the same calls as trial 1, naming only task and trial.
    server = make_server(expose_faults=True)
    meta = {META_EPISODE: {"id": "outside", "task": TASK, "trial": 1}}
    async with Client(server.mcp) as client:
        decisions = [
            (await client.call_tool(call.tool, call.arguments, meta=meta)).meta[META_EVENT]["decision"]
            for call in ran.tool_calls
        ]
    assert decisions == [c.decision and c.decision.model_dump(mode="json") for c in ran.tool_calls]
    assert any(d and d["fault"] for d in decisions), "no fault fired: the comparison proves little"


async def test_the_trace_method_closes_the_episode_so_a_harness_cannot_peek_and_carry_on() -> None:
    server = make_server()
    meta = {META_EPISODE: {"id": "peek", "task": TASK}}
    async with Client(server.mcp) as client:
        await client.call_tool("list_records", {}, meta=meta)
        result = await client.call_tool("list_records", {}, meta=meta)
        assert META_EVENT not in (result.meta or {})  # nothing on the wire ...
        events = await fetch_episode_trace(client, "peek")  # ... the runner asks once the episode is over
        assert events is not None and [e.seq for e in events] == [1, 2]
        with pytest.raises(MCPError) as refused:
            await client.call_tool("list_records", {}, meta=meta)
        assert refused.value.code == types.INVALID_PARAMS and "closed" in refused.value.error.message
        assert await fetch_episode_trace(client, "peek") == []  # already handed over
        # Without an episode named, the method closes the connection's own (here: never started).
        own = await client.session.send_request(
            types.Request[dict[str, Any], str](method=TRACE_METHOD, params={}), EpisodeTraceResult
        )
    assert own.events == [] and own.header is None


async def test_a_server_without_the_trace_method_leaves_the_runner_what_came_back() -> None:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[])

    async with Client(Server("someone-else", on_list_tools=list_tools)) as client:
        assert await fetch_episode_trace(client, "any") is None


def test_idle_episodes_expire_and_the_table_stays_bounded() -> None:
    now = [0.0]
    table = EpisodeTable(default_seed=0, max_episodes=3, idle_seconds=60, clock=lambda: now[0])
    table.get(EpisodeRequest("old"))
    now[0] = 30
    for name in ("a", "b"):
        table.get(EpisodeRequest(name))
    now[0] = 61  # "old" idle for 61 s
    table.get(EpisodeRequest("a"))
    assert len(table) == 2
    with pytest.raises(MCPError, match="idle"):
        table.get(EpisodeRequest("old"))
    for name in ("c", "d"):
        table.get(EpisodeRequest(name))
    assert len(table) == 3  # "b", least recently used, made way
    with pytest.raises(MCPError, match="more than 3"):
        table.get(EpisodeRequest("b"))


def _idle_seen(table: EpisodeTable, now: list[float], steps: list[tuple[int, str]]) -> list[str]:
    """What each step saw: ``ok``, ``idle`` (refused as idle) or ``gone`` (closed otherwise)."""
    seen = []
    for advance, name in steps:
        now[0] += advance
        try:
            table.get(EpisodeRequest(name))
            seen.append("ok")
        except MCPError as exc:
            seen.append("idle" if "idle" in str(exc) else "gone")
    return seen


@settings(max_examples=200, derandomize=True, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 40), st.sampled_from("abcde")), max_size=40))
def test_idle_expiry_that_skips_its_walk_closes_exactly_the_episodes_a_walk_on_every_call_closes(
    steps: list[tuple[int, str]],
) -> None:
    """The table remembers when the first episode can expire; its answers are those of walking each time."""

    class WalkEveryCall(EpisodeTable):
        def _expire(self, now: float) -> None:
            self._first_expiry = -math.inf
            super()._expire(now)

    now_fast, now_walk = [0.0], [0.0]
    fast = EpisodeTable(default_seed=0, max_episodes=4, idle_seconds=60, clock=lambda: now_fast[0])
    walk = WalkEveryCall(default_seed=0, max_episodes=4, idle_seconds=60, clock=lambda: now_walk[0])
    assert _idle_seen(fast, now_fast, steps) == _idle_seen(walk, now_walk, steps)
    assert len(fast) == len(walk)
