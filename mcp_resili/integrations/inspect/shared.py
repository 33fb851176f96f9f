"""One server per eval: the suite's `ResiliServer` in inspect's own event loop, one episode per sample.

A sample used to start its own ``mcp-resili serve`` process over stdio: 2–6 s of interpreter start,
imports and suite loading per sample, about 30× the wall time of ``mcp-resili run`` on the same
episodes. Now the first sample of a task builds one server for the task's (suite, faults, seed, time
scale, call budget) in the eval's event loop, and every sample reaches it as ``mcp-resili run`` does:
an in-process MCP client (`mcp_resili.client.inprocess.InProcessClient`: the SDK's client, no process,
no socket), every ``tools/call`` naming the sample's episode in ``_meta["mcp-resili/episode"]`` (id,
task, trial, seed). So the same fault draws and the same scores as the runner. At the sample's end the
episode's trace is taken from the server through the runner-only method.

The model is handed the server's tools as inspect tool definitions whose parameters are built once per
server (`SharedServer.tool_params`); what a call returns reaches the model as inspect's own MCP client
hands it over (an ``isError`` result is a `ToolError` with the result's text). Servers are kept per
event loop (a later ``eval()`` in the same process runs its own loop and gets its own servers); they
hold no process or socket and go with their loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from inspect_ai.tool import ToolDef, ToolParams
    from mcp import Client

    from mcp_resili.server.app import ResiliServer


@dataclass(frozen=True)
class ServerKey:
    """What a shared server serves: every sample of a task with these arguments shares it."""

    suite: str
    faults: str
    seed: int
    time_scale: float
    max_turns: int | None


@dataclass
class SharedServer:
    """A task's server, and its tools as inspect describes them (built once)."""

    server: ResiliServer
    #: (name, description, parameters) of every tool the server lists, in its order.
    tool_params: list[tuple[str, str, ToolParams]] = field(default_factory=list)
    #: Held while the first sample lists the tools (the samples starting with it wait, not list again).
    listing: asyncio.Lock = field(default_factory=asyncio.Lock)


_SERVERS: WeakKeyDictionary[asyncio.AbstractEventLoop, dict[ServerKey, SharedServer]] = WeakKeyDictionary()


def shared_server(key: ServerKey) -> SharedServer:
    """The server of ``key`` in the running event loop, built on first use."""
    from mcp_resili.client.session import without_idle_tracing
    from mcp_resili.faults import parse_fault_spec
    from mcp_resili.registry.loader import get_suite, spec_scope
    from mcp_resili.server.app import ResiliServer

    servers = _SERVERS.setdefault(asyncio.get_running_loop(), {})
    shared = servers.get(key)
    if shared is None:
        suite = get_suite(key.suite)
        plan = parse_fault_spec(key.faults, spec_scope(suite))
        server = ResiliServer(suite, plan, seed=key.seed, time_scale=key.time_scale, max_turns=key.max_turns)
        without_idle_tracing(server.mcp)
        shared = servers[key] = SharedServer(server)
    return shared


def _parameters(schema: dict[str, Any]) -> ToolParams:
    """The parameters inspect's own MCP client builds from an MCP input schema."""
    from inspect_ai.tool import ToolParams

    parameters = ToolParams.model_validate(schema)
    for name, param in parameters.properties.items():
        param.description = param.description or name
    return parameters


def _execute(client: Client, tool: str, episode: dict[str, Any]) -> Callable[..., Awaitable[Any]]:
    """The call of ``tool`` in the sample's episode, answered as inspect's MCP client answers it."""
    from inspect_ai.tool import ToolError
    from inspect_ai.tool._mcp._local import tool_result_as_text
    from inspect_ai.tool._mcp.sampling import as_inspect_content_list

    from mcp_resili.constants import META_EPISODE

    async def execute(**arguments: Any) -> Any:
        result = await client.call_tool(tool, arguments, meta={META_EPISODE: episode})  # type: ignore[arg-type]
        if result.is_error:
            raise ToolError(tool_result_as_text(result.content))
        return as_inspect_content_list(result.content)  # type: ignore[arg-type]

    return execute


@contextlib.asynccontextmanager
async def sample_tools(
    shared: SharedServer, episode: dict[str, Any]
) -> AsyncIterator[tuple[list[ToolDef], Client]]:
    """The sample's tools on ``shared``: inspect tool definitions calling its episode, while open.

    Also the sample's client: the episode belongs to its connection, so its trace is taken through it.
    """
    from inspect_ai.tool import ToolDef

    from mcp_resili.client.inprocess import InProcessClient

    async with InProcessClient(shared.server.mcp) as client:
        async with shared.listing:
            if not shared.tool_params:
                listed = (await client.list_tools()).tools
                shared.tool_params = [
                    (t.name, t.description or t.name, _parameters(t.input_schema)) for t in listed
                ]
        tools = [
            ToolDef(_execute(client, name, episode), name=name, description=description, parameters=params)
            for name, description, params in shared.tool_params
        ]
        yield tools, client


async def take_trace(client: Client, episode_id: str) -> dict[str, Any]:
    """Close the episode and take its trace (header and events), through the runner-only method.

    ``client`` is the connection that played the episode (its owner).
    """
    import mcp_types as types

    from mcp_resili.constants import TRACE_METHOD
    from mcp_resili.server.app import EpisodeTraceResult

    request = types.Request[dict[str, Any], str](method=TRACE_METHOD, params={"episode": episode_id})
    result = await client.session.send_request(request, EpisodeTraceResult)
    return {"header": result.header, "events": result.events}
