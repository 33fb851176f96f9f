"""The solver: one episode of our MCP server per sample, played like ``mcp-resili run`` plays one.

Each sample gets its own ``mcp-resili serve`` process over stdio (``--episode``, ``--trial``: the
runner's fault key TASK/TRIAL, with trial = epoch - 1), or, with ``-T server=URL``, its own episode of
a shared HTTP server, named in the ``x-mcp-resili-episode`` header (inspect cannot send ``_meta``).
The loop runs inside `mcp_connection`: without it inspect starts a fresh server for every tool call.

The loop keeps the runner's rules: the call budget (the task's ``max_turns``), the suite's stop rules,
the task's time limit, and the end at the first successful ``finish``.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import anyio
from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, execute_tools, get_model
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.tool import MCPServer, Tool, mcp_connection, mcp_server_http, mcp_server_stdio

from mcp_resili.integrations.inspect.episode import (
    EPISODE_KEY,
    OUTCOME_KEY,
    Outcome,
    SampleEpisode,
    file_safe,
)

if TYPE_CHECKING:
    from mcp_resili.scoring.termination import StopRules
    from mcp_resili.tasks.model import TaskConstraints
    from mcp_resili.trace.model import ToolCallEvent

#: The name inspect shows for our server (its stderr goes to logger ``inspect_ai.tool._mcp.<name>``).
SERVER_NAME = "mcp-resili"
FINISH_TOOL = "finish"


def serve_arguments(episode: SampleEpisode, time_scale: float) -> list[str]:
    """``python`` arguments of the sample's own ``mcp-resili serve`` (stdio)."""
    arguments = [
        *("-m", "mcp_resili", "serve", "--suite", episode.suite, "--task", episode.task),
        *("--trial", str(episode.trial), "--episode", episode.id, "--trace-dir", episode.trace_dir),
        *("--seed", str(episode.seed), "--time-scale", repr(time_scale)),
    ]
    return arguments if episode.faults is None else [*arguments, "--faults", episode.faults]


def episode_header(episode: SampleEpisode) -> str:
    """The ``x-mcp-resili-episode`` header naming the sample's episode on a shared server."""
    return json.dumps({"id": episode.id, "task": episode.task, "trial": episode.trial, "seed": episode.seed})


def mcp_server(episode: SampleEpisode, time_scale: float) -> MCPServer:
    """The sample's MCP server (nothing starts until a connection is entered)."""
    from mcp_resili import EPISODE_HEADER

    if episode.server is not None:
        return mcp_server_http(
            name=SERVER_NAME, url=episode.server, headers={EPISODE_HEADER: episode_header(episode)}
        )
    return mcp_server_stdio(
        name=SERVER_NAME, command=sys.executable, args=serve_arguments(episode, time_scale)
    )


@solver
def resili_agent(episode_fields: dict[str, Any], time_scale: float = 1.0) -> Solver:
    """Play the sample's task as one episode of our server, with the eval's model.

    ``episode_fields``: the `SampleEpisode` fields every sample of the task shares (suite, seed,
    faults, variant, trace_dir, server); the solver adds the sample's own task, trial and id.
    """

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        from mcp_resili.registry.suites import get_suite
        from mcp_resili.scoring.termination import resolve_stop_rules

        suite = get_suite(episode_fields["suite"])
        task = suite.task(str(state.sample_id))
        episode = sample_episode(episode_fields, task.id, state.epoch, state.uuid, task.constraints)
        state.store.set(EPISODE_KEY, episode.to_store())
        server = mcp_server(episode, time_scale)
        rules = resolve_stop_rules(suite.stop_rules)
        async with mcp_connection([server]):
            tools = await server.tools()
            outcome = Outcome("time_limit", 0, f"episode exceeded {episode.time_limit:g}s", rules.name)
            with anyio.move_on_after(episode.time_limit):
                outcome = await play(state, episode, tools, rules)
        state.store.set(OUTCOME_KEY, outcome.to_store())
        if episode.server is not None:
            await fetch_trace(episode)
        return state

    return solve


def sample_episode(
    fields: dict[str, Any], task_id: str, epoch: int, run_uuid: str, constraints: TaskConstraints
) -> SampleEpisode:
    """The sample's episode: trial = epoch - 1, an id unique to this sample run (file-safe).

    Without ``trace_dir`` the trace goes to a temporary directory, removed once the sample is scored
    (the score's metadata keeps the trace).
    """
    import tempfile

    trial = epoch - 1
    shared = {k: v for k, v in fields.items() if k not in ("max_turns", "trace_dir")}
    trace_dir = fields.get("trace_dir")
    return SampleEpisode(
        task=task_id,
        trial=trial,
        id=file_safe(f"{task_id}-t{trial}-{run_uuid}"),
        max_turns=fields.get("max_turns") or constraints.max_turns,
        time_limit=float(constraints.timeout),
        trace_dir=trace_dir or tempfile.mkdtemp(prefix="mcp-resili-inspect-"),
        temporary=trace_dir is None,
        **shared,
    )


async def play(state: TaskState, episode: SampleEpisode, tools: list[Tool], rules: StopRules) -> Outcome:
    """The runner's loop (`mcp_resili.client.agent.play_episode`) over inspect's model and tools."""
    from mcp_resili import DISCOVERY_TOOLS
    from mcp_resili.scoring.termination import COMPLETION_PHRASES

    model = get_model()
    spent = 0
    calls: list[ToolCallEvent] = []
    for turn in range(1, episode.max_turns + 1):
        output = await model.generate(state.messages, tools)
        state.output = output
        message = output.message
        state.messages.append(message)
        if not message.tool_calls:
            said_done = any(p in message.text.lower() for p in COMPLETION_PHRASES)
            return Outcome("completed" if said_done else "agent_stopped", turn, stop_rules=rules.name)
        left = episode.max_turns - spent
        if len(message.tool_calls) > left:
            # The runner makes no call past the budget; inspect runs every call of the message.
            message.tool_calls = message.tool_calls[:left]
        executed = await execute_tools(state.messages, tools)
        state.messages.extend(executed.messages)
        finished = None
        for result in executed.messages:
            if not isinstance(result, ChatMessageTool) or result.function in DISCOVERY_TOOLS:
                continue
            spent += 1
            status = _finish_status(message, result)
            if status is not None:
                finished = finished or status
            else:
                calls.append(_observed_call(episode, result, len(calls) + 1))
        if finished is not None:
            return Outcome(finished, turn, stop_rules=rules.name)
        stop = rules.check(calls)
        if stop is not None:
            detail = f"stop rule {stop.rule} ({rules.name})"
            return Outcome(stop.termination, turn, detail, rules.name, stop.rule)
        if spent >= episode.max_turns:
            return Outcome("max_turns", turn, f"call budget of {episode.max_turns} spent", rules.name)
    return Outcome("max_turns", episode.max_turns, stop_rules=rules.name)


def _finish_status(message: ChatMessageAssistant, result: ChatMessageTool) -> str | None:
    """``completed``/``aborted`` for a successful ``finish`` call, else None."""
    if result.function != FINISH_TOOL or result.error is not None:
        return None
    call = next((c for c in message.tool_calls or () if c.id == result.tool_call_id), None)
    return "aborted" if call is not None and call.arguments.get("status") == "aborted" else "completed"


def _observed_call(episode: SampleEpisode, result: ChatMessageTool, seq: int) -> ToolCallEvent:
    """What the stop rules need of a call: its tool and whether it failed (the agent saw an error)."""
    from mcp_resili.trace.model import ToolCallEvent

    return ToolCallEvent(
        episode=episode.id,
        seq=seq,
        tool=result.function or "",
        arguments={},
        is_error=result.error is not None,
    )


async def fetch_trace(episode: SampleEpisode) -> None:
    """Close the episode on the shared server and write its trace where the scorer reads it.

    Our server hands an episode's recorded events over once, through its runner-only method, and
    refuses any later call to it (so nothing the model does afterwards can reach the episode).
    """
    from pathlib import Path

    import mcp_types as types
    from mcp import Client

    from mcp_resili import TRACE_METHOD
    from mcp_resili.server.app import EpisodeTraceResult
    from mcp_resili.trace.model import Trace, TraceHeader, event_from_dict

    assert episode.server is not None  # only called for a shared server
    request = types.Request[dict[str, Any], str](method=TRACE_METHOD, params={"episode": episode.id})
    async with Client(episode.server, read_timeout_seconds=60) as client:
        result = await client.session.send_request(request, EpisodeTraceResult)
    if result.header is None:
        return  # no call was made: the scorer builds the header itself
    trace = Trace(
        header=TraceHeader.model_validate(result.header),
        events=tuple(event_from_dict(e) for e in result.events),
    )
    (Path(episode.trace_dir) / f"{episode.id}.jsonl").write_text(trace.to_jsonl(), encoding="utf-8")
