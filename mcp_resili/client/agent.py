"""The agent loop: one episode of one model against one MCP server, recorded as a trace."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from mcp_resili import DISCOVERY_TOOLS, META_EPISODE, META_EVENT
from mcp_resili.client.model import (
    CONTINUE_WITH,
    REFLECTION_CHARS,
    AssistantMessage,
    ContextWindowExceededError,
    InfrastructureError,
    Message,
    Model,
    ModelRequest,
    Reflection,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)
from mcp_resili.scoring.termination import COMPLETION_PHRASES, StopRules, resolve_stop_rules
from mcp_resili.tasks.model import Task
from mcp_resili.trace import (
    EpisodeEndEvent,
    FinishEvent,
    ModelTurnEvent,
    ReflectionEvent,
    ToolCallEvent,
    TraceEvent,
    event_from_meta,
)

logger = logging.getLogger(__name__)
FINISH_TOOL = "finish"


@dataclass(frozen=True)
class EpisodeSpec:
    """Identity of one episode: ``id`` isolates its state; ``fault_key`` and ``seed`` fix its faults."""

    id: str
    fault_key: str
    seed: int
    task: Task | None
    prompt: str
    max_turns: int = 10
    #: ``react`` or ``reflexion``: the loop is the same; Reflexion's trials start with ``memory``.
    architecture: str = "react"
    #: The stop rules that may end the episode early (True: ResiliBench's, False: none).
    stop_rules: StopRules | bool = True
    #: Reflexion: reflections written after earlier failed trials of the same task, oldest first.
    memory: tuple[Reflection, ...] = ()
    #: Input plus output tokens the episode may spend; the turn that crosses it is the last.
    max_tokens: int | None = None
    #: Wall-clock seconds the episode may take (model and tool time together).
    time_limit: float | None = None

    def meta(self) -> dict[str, Any]:
        """The ``_meta`` our server reads to route and seed the call."""
        return {
            META_EPISODE: {
                "id": self.id,
                "task": self.task.id if self.task else None,
                "fault_key": self.fault_key,
                "seed": self.seed,
            }
        }


@dataclass(frozen=True)
class EpisodeOutcome:
    """The recorded events, why the episode ended, and the conversation (for a reflection)."""

    events: tuple[TraceEvent, ...]
    termination: str
    turns: int
    #: The stop rule that ended the episode, if one did.
    stop_rule: str | None = None
    messages: tuple[Message, ...] = ()
    tools: tuple[ToolDefinition, ...] = ()


def with_memory(prompt: str, memory: Sequence[Reflection]) -> str:
    """The first user message of a Reflexion trial: the prompt, then the reflections it starts with."""
    if not memory:
        return prompt
    notes = "\n".join(f"{n}. (after attempt {r.trial + 1}) {r.text}" for n, r in enumerate(memory, 1))
    return (
        f"{prompt}\n\nYou have attempted this same task before and failed. Your reflections on "
        f"those attempts, oldest first:\n{notes}\nUse them to succeed this time."
    )


def reflection_prompt(termination: str, stop_rule: str | None) -> str:
    """Reflexion's request for a self-reflection after a failed trial (binary feedback only)."""
    ended = f"{termination} (stop rule {stop_rule})" if stop_rule else termination
    return (
        "Your attempt is over and it failed: a check of the final state shows the task was not "
        f"accomplished (the episode ended: {ended}). Do not call any tool now. In a few sentences, "
        "diagnose what went wrong and write a concrete plan for your next attempt at this same task, "
        "which will start from the same initial state."
    )


async def reflect(model: Model, episode: EpisodeSpec, outcome: EpisodeOutcome, trial: int) -> ReflectionEvent:
    """Ask ``model`` to reflect on the failed trial ``outcome`` (a real model turn); the event keeps it.

    The model sees the whole trial and a request to reflect, with the trial's tools still defined
    (providers reject tool results without them) but any tool call ignored. A provider failure gives
    an event with ``error`` and no text (the next trial then starts without this reflection).
    """
    request = ModelRequest(
        messages=(*outcome.messages, UserMessage(reflection_prompt(outcome.termination, outcome.stop_rule))),
        tools=outcome.tools,
        task=episode.task,
        max_turns=episode.max_turns,
        purpose="reflect",
        memory=episode.memory,
    )
    try:
        response = await model.generate(request)
    except (InfrastructureError, ContextWindowExceededError) as exc:
        return ReflectionEvent(episode=episode.id, role="written", from_trial=trial, text="", error=str(exc))
    return ReflectionEvent(
        episode=episode.id,
        role="written",
        from_trial=trial,
        text=response.text.strip()[:REFLECTION_CHARS],
        input_tokens=response.input_tokens,
        output_tokens=response.output_tokens,
    )


#: Definitions already built, by the identity of the tool list they came from (which they keep alive).
_DEFINITIONS: dict[int, tuple[Sequence[types.Tool], tuple[ToolDefinition, ...]]] = {}


def tool_definitions(tools: Sequence[types.Tool]) -> tuple[ToolDefinition, ...]:
    """MCP tools as offered to a model.

    A run lists its tools once and plays every episode with that list: the definitions are built once
    per list, not per episode (models read them and never change them).
    """
    hit = _DEFINITIONS.get(id(tools))
    if hit is not None and hit[0] is tools:
        return hit[1]
    definitions = tuple(ToolDefinition(t.name, t.description or "", dict(t.input_schema)) for t in tools)
    if len(_DEFINITIONS) >= 64:  # lists of finished runs: drop them rather than grow
        _DEFINITIONS.clear()
    _DEFINITIONS[id(tools)] = (tools, definitions)
    return definitions


async def call_tool(
    client: Client, episode: EpisodeSpec, call: ToolCall, seq: int
) -> tuple[ToolResult, TraceEvent]:
    """Call one tool through MCP; return what the model reads and the trace event.

    Our server attaches its own event (with the fault decision) in the result's ``_meta``; for any
    other server the event is built here from what came back. A JSON-RPC error is shown to the agent
    as an error result (it is the server's answer); a broken connection raises `InfrastructureError`.
    """
    try:
        result = await client.call_tool(call.name, call.arguments, meta=episode.meta())  # type: ignore[arg-type]
    except MCPError as exc:
        text = f"Error {exc.code}: {exc.error.message}"
        event: TraceEvent = ToolCallEvent(
            episode=episode.id,
            seq=seq,
            tool=call.name,
            arguments=call.arguments,
            is_error=True,
            error_code=f"JSONRPC_{exc.code}",
            result={"code": exc.code, "message": exc.error.message},
        )
        return ToolResult(call.id, call.name, text, True), event
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError, TimeoutError) as exc:
        raise InfrastructureError(f"MCP connection failed during {call.name}: {exc!r}") from exc
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    raw_event = (result.meta or {}).get(META_EVENT)
    try:
        event = (
            event_from_meta(raw_event, call.arguments, result.structured_content)
            if raw_event is not None
            else _observed(episode, call, result, seq)
        )
    except ValidationError:
        event = _observed(episode, call, result, seq)
    if call.name == FINISH_TOOL and not isinstance(event, FinishEvent):
        # e.g. behind a proxy, whose event is a plain tool call: the signal is what counts.
        event = _observed(episode, call, result, seq)
    return ToolResult(call.id, call.name, text, bool(result.is_error), result.structured_content), event


def _observed(episode: EpisodeSpec, call: ToolCall, result: types.CallToolResult, seq: int) -> TraceEvent:
    if call.name == FINISH_TOOL and not result.is_error:
        status: Literal["completed", "aborted"] = (
            "aborted" if call.arguments.get("status") == "aborted" else "completed"
        )
        return FinishEvent(
            episode=episode.id, seq=seq, status=status, summary=str(call.arguments.get("summary", ""))
        )
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    return ToolCallEvent(
        episode=episode.id,
        seq=seq,
        tool=call.name,
        arguments=call.arguments,
        is_error=bool(result.is_error),
        result=result.structured_content if not result.is_error else {"message": text},
    )


@dataclass
class _LoopState:
    events: list[TraceEvent] = field(default_factory=list)
    calls: list[ToolCallEvent] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    termination: str = "max_turns"
    detail: str = ""
    stop_rule: str | None = None
    turn: int = 0
    tokens: int = 0


async def play_episode(
    client: Client, model: Model, episode: EpisodeSpec, tools: Sequence[types.Tool]
) -> EpisodeOutcome:
    """Run ``model`` on ``episode`` until it finishes, stops, breaks a limit, or the provider fails.

    Limits: ``max_turns`` model turns, ``max_tokens`` tokens, ``time_limit`` seconds. A provider that
    fails after retries ends the episode as ``infrastructure_error`` (void, not scored); a conversation
    that outgrows the context ends it as ``context_exceeded`` (scored: the agent's doing).
    """
    state = _LoopState()
    state.events.extend(
        ReflectionEvent(episode=episode.id, role="memory", from_trial=r.trial, text=r.text)
        for r in episode.memory
    )
    rules = resolve_stop_rules(episode.stop_rules)
    definitions = tool_definitions(tools)
    limit = episode.time_limit if episode.time_limit is not None else math.inf
    with anyio.move_on_after(limit) as scope:
        await _loop(client, model, episode, definitions, rules, state)
    if scope.cancelled_caught:
        state.termination, state.detail = "time_limit", f"episode exceeded {episode.time_limit}s"
    state.events.append(
        EpisodeEndEvent(
            episode=episode.id,
            termination=state.termination,  # type: ignore[arg-type]
            turns=state.turn,
            detail=state.detail,
            stop_rules=rules.name,
            stop_rule=state.stop_rule,
        )
    )
    return EpisodeOutcome(
        tuple(state.events),
        state.termination,
        state.turn,
        state.stop_rule,
        tuple(state.messages),
        definitions,
    )


async def _loop(
    client: Client,
    model: Model,
    episode: EpisodeSpec,
    definitions: tuple[ToolDefinition, ...],
    rules: StopRules,
    state: _LoopState,
) -> None:
    messages = state.messages
    messages.append(UserMessage(with_memory(episode.prompt, episode.memory)))
    events, calls = state.events, state.calls
    for turn in range(1, episode.max_turns + 1):
        state.turn = turn
        request = ModelRequest(
            messages=tuple(messages),
            tools=definitions,
            task=episode.task,
            max_turns=episode.max_turns,
            memory=episode.memory,
        )
        try:
            response = await model.generate(request)
        except InfrastructureError as exc:
            state.termination, state.detail = "infrastructure_error", str(exc)
            return
        except ContextWindowExceededError as exc:
            state.termination, state.detail = "context_exceeded", str(exc)
            return
        state.tokens += response.input_tokens + response.output_tokens
        events.append(
            ModelTurnEvent(
                episode=episode.id,
                turn=turn,
                text=response.text,
                tool_calls=tuple(
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls
                ),
                input_tokens=response.input_tokens,
                output_tokens=response.output_tokens,
            )
        )
        messages.append(AssistantMessage(response.text, response.tool_calls))
        if not response.tool_calls:
            reminder = response.extra.get(CONTINUE_WITH)
            if isinstance(reminder, str) and reminder:
                # The model's own harness (e.g. the text protocol) answers a turn without an action.
                messages.append(UserMessage(reminder))
                continue
            said_done = any(p in response.text.lower() for p in COMPLETION_PHRASES)
            state.termination = "completed" if said_done else "agent_stopped"
            return
        results: list[ToolResult] = []
        finished: FinishEvent | None = None
        try:
            for call in response.tool_calls:
                result, event = await call_tool(client, episode, call, seq=len(events) + 1)
                results.append(result)
                events.append(event)
                if isinstance(event, ToolCallEvent) and event.tool not in DISCOVERY_TOOLS:
                    calls.append(event)
                elif isinstance(event, FinishEvent) and finished is None:
                    finished = event
        except InfrastructureError as exc:
            state.termination, state.detail = "infrastructure_error", str(exc)
            return
        messages.append(ToolResultsMessage(tuple(results)))
        if finished is not None:
            state.termination = finished.status
            return
        stop = rules.check(calls)
        if stop is not None:
            state.termination, state.stop_rule = stop.termination, stop.rule
            state.detail = f"stop rule {stop.rule} ({rules.name})"
            return
        if episode.max_tokens is not None and state.tokens >= episode.max_tokens:
            state.termination = "max_tokens"
            state.detail = f"{state.tokens} tokens spent, limit {episode.max_tokens}"
            return
    state.termination = "max_turns"
