"""Fuzzing every suite's tools from their input schemas (hypothesis, fixed seed, bounded examples).

Each example is one episode: a few fuzzed calls (see tests/fuzzing.py). In memory the server's own
recorder is read after every call; over stdio (one real subprocess) the episode's events come back
through the runner's ``mcp-resili/episode_trace`` method once it is closed. Either way: no call ends in
a JSON-RPC error, no structured content breaks its output schema or holds a non-JSON number, no tool
crashes or times out, and every call is in the trace with the next sequence number and ordinal.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import mcp_types as types
import pytest
from fuzzing import CallChecker, calls_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, MCPError
from servers import stdio_parameters

from mcp_resili.client.recorded import fetch_episode_trace
from mcp_resili.constants import DISCOVERY_TOOLS, META_EPISODE
from mcp_resili.faults import CallOutcome, parse_fault_spec
from mcp_resili.registry.loader import get_suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.server.episodes import EpisodeRequest

pytestmark = pytest.mark.anyio

#: Each benchmark with faults that reshape or replace results: chaos (schema drift, stale data) for the
#: stateful suites, ToolMaze's implicit corruption for ToolMaze. What is fuzzed is each benchmark's own
#: tool schemas through the framework's server, so these stay on the benchmarks.
SUITES = {"resilibench": "lambda=0.3", "reliabilitybench": "lambda=0.2", "toolmaze": "toolmaze:P4"}
EXAMPLES = 40
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


#: One server per suite for the whole module (their tool lists feed the strategies at collection).
SERVERS = {
    name: ResiliServer(get_suite(name), parse_fault_spec(faults, get_suite(name).spec_scope), time_scale=0)
    for name, faults in SUITES.items()
}


@pytest.fixture(scope="module")
async def clients() -> AsyncIterator[dict[str, Client]]:
    async with AsyncExitStack() as stack:
        yield {name: await stack.enter_async_context(Client(server.mcp)) for name, server in SERVERS.items()}


def episode_meta(task: str | None) -> dict[str, Any]:
    return {META_EPISODE: {"id": f"fuzz-{uuid.uuid4().hex[:12]}", "task": task}}


def tools_of(server: ResiliServer) -> dict[str, types.Tool]:
    return {tool.name: tool for tool in server._tools}


async def fuzz_in_memory(suite: str, client: Client, calls: list[tuple[str, Any]], task: str) -> None:
    server = SERVERS[suite]
    meta = episode_meta(task)
    episode_id = meta[META_EPISODE]["id"]
    # Every tool counts as having succeeded before: the dependency check lets each call reach its tool.
    episode = server.episode(EpisodeRequest(episode_id, task=task))
    episode.history += [CallOutcome(name, True) for name in tools_of(server)]
    checker = CallChecker(tools_of(server))
    for name, arguments in calls:
        result = await client.call_tool(name, arguments, meta=meta)
        checker.check(name, arguments, result, server.take_events(episode_id))
    assert not checker.problems, "\n".join(checker.problems[:5])


def fuzz_test(suite: str) -> Any:
    """A hypothesis test fuzzing ``suite`` in memory: episodes of up to 6 calls, each bound to a task."""
    server = SERVERS[suite]

    @FUZZ
    @given(
        calls=st.lists(calls_for(server._tools), min_size=1, max_size=6),
        task=st.sampled_from([task.id for task in server.suite.tasks]),
    )
    async def test(clients: dict[str, Client], calls: list[tuple[str, Any]], task: str) -> None:
        await fuzz_in_memory(suite, clients[suite], calls, task)

    return test


test_fuzzed_resilibench_calls_get_schema_valid_answers_and_are_all_in_the_trace = fuzz_test("resilibench")
test_fuzzed_reliabilitybench_calls_get_schema_valid_answers_and_are_all_in_the_trace = fuzz_test(
    "reliabilitybench"
)
test_fuzzed_toolmaze_calls_get_schema_valid_answers_and_are_all_in_the_trace = fuzz_test("toolmaze")


STDIO_SUITE = "reliabilitybench"


@pytest.fixture(scope="module")
async def stdio_client() -> AsyncIterator[tuple[Client, dict[str, types.Tool]]]:
    params = stdio_parameters("--suite", STDIO_SUITE, "--faults", SUITES[STDIO_SUITE], "--time-scale", "0")
    async with Client(params, read_timeout_seconds=30) as client:
        yield client, {tool.name: tool for tool in (await client.list_tools()).tools}


@settings(FUZZ, max_examples=20)
@given(
    calls=st.lists(calls_for(SERVERS[STDIO_SUITE]._tools), min_size=1, max_size=5),
    task=st.sampled_from([task.id for task in get_suite(STDIO_SUITE).tasks]),
)
async def test_fuzzed_calls_over_stdio_get_answers_and_the_closed_episode_hands_over_every_call(
    stdio_client: tuple[Client, dict[str, types.Tool]], calls: list[tuple[str, Any]], task: str
) -> None:
    client, tools = stdio_client
    meta = episode_meta(task)
    results = [
        (name, arguments, await client.call_tool(name, arguments, meta=meta)) for name, arguments in calls
    ]
    recorded = await fetch_episode_trace(client, meta[META_EPISODE]["id"])
    assert recorded is not None
    checker = CallChecker(tools)
    pending = list(recorded)
    for name, arguments, result in results:
        mine = [] if name in DISCOVERY_TOOLS or not pending else [pending.pop(0)]
        checker.check(name, arguments, result, mine)
    assert not pending, f"{len(pending)} recorded events match no call"
    assert not checker.problems, "\n".join(checker.problems[:5])
    # The episode is closed: a model-facing harness cannot peek at the trace and carry on.
    with pytest.raises(MCPError) as refused:
        await client.call_tool(calls[0][0], calls[0][1], meta=meta)
    assert refused.value.code == types.INVALID_PARAMS
