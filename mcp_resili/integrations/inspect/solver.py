"""The solver: one episode of our MCP server per sample, played like ``mcp-resili run`` plays one.

Each sample is its own episode of one server the task's samples share (`shared`: built by the first
sample, in inspect's event loop, reached through the runner's in-process client, the episode named in
every call's ``_meta``), or, with ``-T server=URL``, of a server the user runs (through inspect's MCP
client, the episode named in the ``x-mcp-resili-episode`` header: inspect cannot send ``_meta``);
either way with the runner's fault key TASK/TRIAL (trial = epoch - 1). ``-T server=process`` keeps the
former way: a ``mcp-resili serve`` process over stdio per sample (``--episode``, ``--trial``), 2–6 s of
start each. Through inspect's MCP client the loop runs inside `mcp_connection`: without it inspect
starts a fresh server for every tool call.

The loop keeps the runner's rules: the call budget (the task's ``max_turns``), the suite's stop rules,
the task's time limit (kept as the runner keeps it: `EpisodeClock`), and the end at the first successful
``finish``. An episode that ends as ``infrastructure_error`` (void in ``mcp-resili run``) is a sample
error here: the solver raises `InfrastructureError`, so inspect scores nothing, and ``--retry-on-error``
or ``inspect eval-retry`` plays it again (as ``mcp-resili run --resume`` does).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageTool,
    Model,
    ModelOutput,
    execute_tools,
    get_model,
)
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.tool import MCPServer, ToolDef, mcp_connection, mcp_server_http, mcp_server_stdio

from mcp_resili.constants import FINISH_TOOL
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


def mcp_server(episode: SampleEpisode, time_scale: float, cookie: str | None = None) -> MCPServer:
    """The sample's MCP server (nothing starts until a connection is entered).

    ``cookie``: the client id a shared server minted for this sample (see `client_cookie`).
    """
    from mcp_resili.constants import EPISODE_HEADER

    if episode.server is not None:
        headers = {EPISODE_HEADER: episode_header(episode), **({"cookie": cookie} if cookie else {})}
        return mcp_server_http(name=SERVER_NAME, url=episode.server, headers=headers)
    return mcp_server_stdio(
        name=SERVER_NAME, command=sys.executable, args=serve_arguments(episode, time_scale)
    )


@solver
def resili_agent(
    episode_fields: dict[str, Any], time_scale: float = 1.0, per_sample_process: bool = False
) -> Solver:
    """Play the sample's task as one episode of our server, with the eval's model.

    ``episode_fields``: the `SampleEpisode` fields every sample of the task shares (suite, seed,
    faults, variant, trace_dir, server); the solver adds the sample's own task, trial and id. Without
    a ``server`` the samples share one server of this process (`shared`), unless
    ``per_sample_process`` asks for a ``serve`` process per sample.
    """

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        from mcp_resili.integrations.inspect.shared import ServerKey, sample_tools, shared_server, take_trace
        from mcp_resili.registry.loader import get_suite

        suite = get_suite(episode_fields["suite"])
        task = suite.task(str(state.sample_id))
        episode = sample_episode(episode_fields, task.id, state.epoch, state.uuid, task.constraints)
        state.store.set(EPISODE_KEY, episode.to_store())
        rules = suite.own_stop_rules
        clock = EpisodeClock(episode.time_limit)
        if episode.server is None and not per_sample_process:
            assert episode.faults is not None  # known unless the user's own server (-T server) plays
            key = ServerKey(suite.name, episode.faults, episode.seed, time_scale, episode.max_turns_override)
            shared = shared_server(key)
            async with sample_tools(shared, json.loads(episode_header(episode))) as (tools, client):
                outcome = await clock.run(lambda: play(state, episode, tools, rules, clock), rules.name)
                state.store.set(OUTCOME_KEY, outcome.to_store())
                write_trace(episode, await take_trace(client, episode.id))
        else:
            cookie = await client_cookie(episode.server) if episode.server is not None else None
            server = mcp_server(episode, time_scale, cookie)
            async with mcp_connection([server]):
                # Definitions built once per sample: inspect would rebuild each from its callable at
                # every model turn and every tool call.
                tools = [ToolDef(t) for t in await server.tools()]
                outcome = await clock.run(lambda: play(state, episode, tools, rules, clock), rules.name)
            state.store.set(OUTCOME_KEY, outcome.to_store())
            if episode.server is not None:
                await fetch_trace(episode, cookie)
        if outcome.termination == "infrastructure_error":
            raise void_episode(episode, outcome)
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
        max_turns_override=fields.get("max_turns"),
        time_limit=float(constraints.timeout),
        trace_dir=trace_dir or tempfile.mkdtemp(prefix="mcp-resili-inspect-"),
        temporary=trace_dir is None,
        **shared,
    )


def void_episode(episode: SampleEpisode, outcome: Outcome) -> Exception:
    """The sample error of an episode that ended as ``infrastructure_error``: not the agent's doing.

    ``mcp-resili run`` records such an episode unscored (void) and plays it again on ``--resume``; in
    inspect the sample errors (`InfrastructureError`), which inspect leaves unscored and plays again
    with ``--retry-on-error`` or ``inspect eval-retry``.
    """
    from mcp_resili.agents.model import InfrastructureError

    return InfrastructureError(
        f"infrastructure_error in {episode.fault_key}: {outcome.detail}. The episode is void (the "
        "model API failed, not the agent) and is not scored."
    )


def _model_retries() -> int:
    """How many times inspect has retried a model call of this sample so far (provider errors, 429s).

    inspect counts every retry on the running sample (`ActiveSample.http_retries`, what its control
    channel reads); 0 outside a sample.
    """
    from inspect_ai.log._samples import sample_active

    active = sample_active()
    retries = getattr(active, "http_retries", 0) if active is not None else 0
    return retries if isinstance(retries, int) else 0


class EpisodeClock:
    """The episode's time limit, kept as `mcp_resili.client.loop.play_episode` keeps it.

    The limit running out while a tool runs (or between turns) ends the episode as ``time_limit``: the
    agent's time. A model call is never cut at the limit: a late answer ends the episode as
    ``time_limit`` (the model was slow) unless inspect retried the call (the provider failed or rate
    limited it: the harness waited). A call inspect has retried when the limit runs out, or that gives no
    answer within `LATE_ANSWER_GRACE` past it (at most the limit again), ends the episode as
    ``infrastructure_error``: a provider outage or a hung API is never the agent's failure.
    """

    def __init__(self, time_limit: float) -> None:
        from mcp_resili.client.loop import LATE_ANSWER_GRACE

        self.time_limit = time_limit
        self.grace = min(LATE_ANSWER_GRACE, time_limit)
        self.scope = anyio.CancelScope()
        #: The turn under way (recorded in the episode's end).
        self.turn = 0
        #: Why the harness, not the agent, ran out of time (set when the limit ends a retried call).
        self.harness_ran_out: str | None = None
        #: Whether a model call is under way (its deadline moved by `generate`).
        self.model_call_running = False
        #: The sample's model-call retries (`_model_retries`) when the call under way began.
        self.retries_before_call = 0
        #: How a model call that answered after the limit ends the episode (None: it answered in time).
        self.late: Outcome | None = None

    async def run(self, play: Callable[[], Awaitable[Outcome]], stop_rules: str) -> Outcome:
        """``play()``'s outcome, or how the time limit ended the episode when it ran out first."""
        self.scope = anyio.move_on_after(self.time_limit)
        with self.scope:
            return await play()
        limit = self.time_limit
        if self.harness_ran_out is None and self.model_call_running:
            self._note_retries(self.retries_before_call)  # retried within the grace, never answered
        if self.harness_ran_out is not None:
            return Outcome("infrastructure_error", self.turn, self.harness_ran_out, stop_rules)
        if self.model_call_running:
            detail = (
                f"the model gave no answer within {self.grace:g}s after the time limit of {limit}s ran "
                "out during its call (a hung model API is not the agent's doing)"
            )
            return Outcome("infrastructure_error", self.turn, detail, stop_rules)
        return Outcome("time_limit", self.turn, f"episode exceeded {limit}s", stop_rules)

    async def generate(
        self, model: Model, messages: list[ChatMessage], tools: list[ToolDef], stop_rules: str
    ) -> ModelOutput:
        """The model's turn, which the time limit does not cut short (see the class).

        An answer after the limit sets `late`: the episode ends there, the answer recorded.
        """
        deadline = self.scope.deadline
        if deadline == math.inf:
            return await model.generate(messages, tools)
        retries = self.retries_before_call = _model_retries()
        self.scope.deadline = deadline + self.grace
        self.model_call_running = True  # left set if the grace runs out: `run` reads it
        output: ModelOutput | None = None
        failure: Exception | None = None
        async with anyio.create_task_group() as watch:
            watch.start_soon(self._void_if_retried, deadline, retries)
            try:
                output = await model.generate(messages, tools)
            except Exception as exc:  # raised below, outside the task group (no exception group)
                failure = exc
            watch.cancel_scope.cancel()
        self.scope.deadline = deadline  # if already past, the clock stops the episode at its next wait
        self.model_call_running = False
        if failure is not None:
            raise failure
        assert output is not None  # set unless the call failed
        if anyio.current_time() >= deadline:
            if _model_retries() > retries:
                detail = (
                    f"the time limit of {self.time_limit}s ran out while the harness waited on the "
                    "model call (retries or rate limits)"
                )
                self.late = Outcome("infrastructure_error", self.turn, detail, stop_rules)
            else:
                detail = f"the model answered after the time limit of {self.time_limit}s"
                self.late = Outcome("time_limit", self.turn, detail, stop_rules)
        return output

    async def _void_if_retried(self, deadline: float, retries: int) -> None:
        """At the limit, end a model call inspect has retried: the harness, not the agent, ran out."""
        await anyio.sleep_until(deadline)
        if self._note_retries(retries):
            self.scope.cancel()

    def _note_retries(self, retries: int) -> bool:
        """Whether inspect retried the model call since ``retries``; if so, say so in `harness_ran_out`."""
        since = _model_retries() - retries
        if since > 0:
            self.harness_ran_out = (
                f"the time limit of {self.time_limit}s ran out while inspect retried the model call "
                f"({since} {'retry' if since == 1 else 'retries'}: the provider failed or rate limited it)"
            )
        return since > 0


async def play(
    state: TaskState, episode: SampleEpisode, tools: list[ToolDef], rules: StopRules, clock: EpisodeClock
) -> Outcome:
    """The runner's loop (`mcp_resili.client.loop.play_episode`) over inspect's model and tools.

    Runs within ``clock.run`` (the time limit); every model turn goes through ``clock.generate``.
    """
    from mcp_resili.constants import COMPLETION_PHRASES, DISCOVERY_TOOLS

    model = get_model()
    spent = 0
    calls: list[ToolCallEvent] = []
    for turn in range(1, episode.max_turns + 1):
        clock.turn = turn
        output = await clock.generate(model, state.messages, tools, rules.name)
        state.output = output
        message = output.message
        state.messages.append(message)
        if clock.late is not None:  # the answer came after the time limit: recorded, but it ends here
            return clock.late
        if not message.tool_calls:
            said_done = any(p in message.text.lower() for p in COMPLETION_PHRASES)
            return Outcome("completed" if said_done else "agent_stopped", turn, stop_rules=rules.name)
        left = episode.max_turns - spent
        if len(message.tool_calls) > left:
            # The runner makes no call past the budget; inspect runs every call of the message.
            message.tool_calls = message.tool_calls[:left]
        names = [call.function for call in message.tool_calls]
        if FINISH_TOOL in names:  # nor any after finish (the runner's: after an accepted one)
            message.tool_calls = message.tool_calls[: names.index(FINISH_TOOL) + 1]
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


async def client_cookie(url: str) -> str | None:
    """The client id a shared server mints for this sample, as a ``cookie`` header value.

    An episode belongs to the client that opened it: inspect's connection plays it and ours takes its
    trace, so both present the same server-minted id. None from a server that mints none.
    """
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from mcp_resili.server.episodes import CLIENT_COOKIE

    async with (
        httpx2.AsyncClient(timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        await client.list_tools()
        value = http.cookies.get(CLIENT_COOKIE)
    return f"{CLIENT_COOKIE}={value}" if value else None


async def fetch_trace(episode: SampleEpisode, cookie: str | None) -> None:
    """Close the episode on the user's server (``-T server``) and write its trace for the scorer.

    Our server hands an episode's recorded events over once, through its runner-only method, and
    refuses any later call to it (so nothing the model does afterwards can reach the episode). Only
    the episode's client may: ``cookie`` is the id the sample's calls presented.
    """
    import httpx2
    import mcp_types as types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from mcp_resili.constants import TRACE_METHOD
    from mcp_resili.server.app import EpisodeTraceResult

    assert episode.server is not None  # only called for a shared server
    request = types.Request[dict[str, Any], str](method=TRACE_METHOD, params={"episode": episode.id})
    headers = {"cookie": cookie} if cookie else None
    async with (
        httpx2.AsyncClient(timeout=60, headers=headers) as http,
        Client(streamable_http_client(episode.server, http_client=http)) as client,
    ):
        result = await client.session.send_request(request, EpisodeTraceResult)
    write_trace(episode, {"header": result.header, "events": result.events})


def write_trace(episode: SampleEpisode, taken: dict[str, Any]) -> None:
    """Write a trace taken from the server (``header``, ``events``) where the scorer reads it.

    No header: the episode made no call, and the scorer builds the header itself.
    """
    from pathlib import Path

    from mcp_resili.trace.model import Trace, TraceHeader, event_from_dict

    if taken["header"] is None:
        return
    trace = Trace(
        header=TraceHeader.model_validate(taken["header"]),
        events=tuple(event_from_dict(e) for e in taken["events"]),
    )
    (Path(episode.trace_dir) / f"{episode.id}.jsonl").write_text(trace.to_jsonl(), encoding="utf-8")
