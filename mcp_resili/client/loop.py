"""The agent loop: a model and an MCP client play one episode, turn by turn, call by call (MCP only)."""

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
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcp_resili.agents.model import (
    CONTINUE_WITH,
    HARNESS_WAIT,
    AssistantMessage,
    ContextWindowExceededError,
    HarnessWait,
    InfrastructureError,
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)
from mcp_resili.client.episode import EpisodeOutcome, EpisodeSpec
from mcp_resili.client.recorded import RecordedEvents, merge_recorded
from mcp_resili.client.reflexion import with_memory
from mcp_resili.constants import (
    COMPLETION_PHRASES,
    DISCOVERY_TOOLS,
    FINISH_TOOL,
    META_EVENT,
    VERSION,
)
from mcp_resili.scoring.termination import StopRules, counts_against_budget
from mcp_resili.trace import (
    EndStateEvent,
    EpisodeEndEvent,
    FinishEvent,
    ModelTurnEvent,
    ProtocolEvent,
    ReflectionEvent,
    ToolCallEvent,
    TraceEvent,
    event_from_meta,
)
from mcp_resili.trace.codes import SERVER_MEMORY_LIMIT, TOOL_CRASHED, UPSTREAM_CLOSED

logger = logging.getLogger(__name__)


#: Longest result text handed to the model; the rest is cut (an oversized result must not flood it).
MAX_RESULT_CHARS = 100_000


#: ``error.data["reason"]`` of a refused request that never ran: initialize again, then retry any call.
_SESSION_GONE = frozenset({"session_expired", "unauthorized"})


#: How long a server that closed a request's connection has to answer a ping before it counts as gone.
PING_SECONDS = 10.0
#: ``ModelTurnEvent(**fields)`` without `BaseModel.__init__`'s Python frame and keyword packing: the
#: same validation, the same event, a quarter less of its cost on every turn.
_new_model_turn = ModelTurnEvent.__pydantic_validator__.validate_python


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


async def reinitialize(client: Client, episode: EpisodeSpec) -> bool:
    """Start the episode's session again (``initialize``, or ``server/discover`` on 2026-07-28).

    The request names the episode, so the server lets it continue. False when the server refused.
    """
    modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
    meta: dict[str, Any] = episode.meta()
    try:
        if modern:
            await client.session.send_request(
                types.DiscoverRequest(params=types.RequestParams(_meta=meta)),  # type: ignore[arg-type]
                types.DiscoverResult,
            )
        else:
            params = types.InitializeRequestParams(
                protocol_version=client.protocol_version,
                capabilities=types.ClientCapabilities(),
                client_info=types.Implementation(name="mcp-resili", version=VERSION),
                _meta=meta,  # type: ignore[arg-type]
            )
            await client.session.send_request(types.InitializeRequest(params=params), types.InitializeResult)
    except MCPError as exc:
        logger.info("re-initialization of %s refused: %s", episode.id, exc.error.message)
        return False
    return True


async def connection_alive(client: Client) -> bool:
    """Whether the server still answers a ping (within `PING_SECONDS`).

    Any answer counts, an error too: a 2026-07-28 server may not know ``ping`` any more.
    """
    try:
        with anyio.fail_after(PING_SECONDS):
            await client.session.send_ping()
    except MCPError as exc:
        return exc.code != types.CONNECTION_CLOSED
    except (TimeoutError, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        return False
    return True


def _reason(exc: MCPError) -> str | None:
    data = exc.error.data
    reason = data.get("reason") if isinstance(data, dict) else None
    return reason if isinstance(reason, str) else None


async def call_tool(
    client: Client,
    episode: EpisodeSpec,
    call: ToolCall,
    seq: int,
    recorded: RecordedEvents | None = None,
    *,
    read_only: frozenset[str] = frozenset(),
    protocol: list[TraceEvent] | None = None,
) -> tuple[ToolResult, TraceEvent, bool]:
    """Call one tool through MCP; return what the model reads, the trace event, and whether it answered.

    The event is the one our server recorded when ``recorded.after_call`` has it (in process), else
    the one a ``--expose-faults`` server attached to the result, else it is built here from what came
    back (and may be replaced at the episode's end, see `merge_recorded`). A JSON-RPC error is shown to
    the agent as an error result (it is the server's answer); a broken connection raises
    `InfrastructureError`.

    Coping with protocol faults: a request refused because the session expired or the token was
    revoked never ran, so the loop initializes again and retries it (once); a timeout or a dropped
    connection leaves the outcome unknown, so only a read-only tool (in ``read_only``) is retried.
    The server's protocol events recorded meanwhile are appended to ``protocol``.
    """
    result: types.CallToolResult | None = None
    error: MCPError | None = None
    for attempt in range(2):
        try:
            result = await client.call_tool(
                call.name,
                call.arguments,
                read_timeout_seconds=episode.call_timeout,
                meta=episode.meta(),  # type: ignore[arg-type]
            )
            error = None
            break
        except MCPError as exc:
            error = exc
            reason = _reason(exc)
            if attempt == 1:
                break
            if reason in _SESSION_GONE or (reason == "server_restart" and call.name in read_only):
                if not await reinitialize(client, episode):
                    break
            elif not (
                exc.code in (types.REQUEST_TIMEOUT, types.CONNECTION_CLOSED) and call.name in read_only
            ):
                break
            if recorded is not None and recorded.after_call is not None and protocol is not None:
                protocol.extend(recorded.after_call(episode.id))  # the failed attempt's record
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError, TimeoutError) as exc:
            raise InfrastructureError(f"MCP connection failed during {call.name}: {exc!r}") from exc
    if error is not None and error.code == types.CONNECTION_CLOSED and not await connection_alive(client):
        # A server that died is the harness's trouble; a dropped response (a protocol fault) is not.
        raise InfrastructureError(f"MCP server gone during {call.name}: {error.error.message}")
    own = list(recorded.after_call(episode.id)) if recorded is not None and recorded.after_call else []
    if protocol is not None:
        protocol.extend(e for e in own if isinstance(e, ProtocolEvent))
    own = [e for e in own if isinstance(e, ToolCallEvent | FinishEvent)]
    if error is not None or result is None:
        assert error is not None  # one of the two is set after the loop
        text = f"Error {error.code}: {error.error.message}"
        event: TraceEvent = (
            own[-1]
            if own
            else ToolCallEvent(
                episode=episode.id,
                seq=seq,
                tool=call.name,
                arguments=call.arguments,
                is_error=True,
                error_code=f"JSONRPC_{error.code}",
                result={"code": error.code, "message": error.error.message},
            )
        )
        return ToolResult(call.id, call.name, text, True), event, bool(own)
    if protocol is not None and len(own) > 1:
        protocol.extend(own[:-1])  # earlier attempts of a retried call
        own = own[-1:]
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    if result.is_error and text.startswith(f"Error {UPSTREAM_CLOSED}:"):
        # Our proxy's upstream died: as with a server of our own that died, nothing was measured.
        raise InfrastructureError(f"MCP server gone during {call.name}: {text}")
    if len(text) > MAX_RESULT_CHARS:
        cut = f"[result cut: {len(text)} characters, the first {MAX_RESULT_CHARS} shown]"
        text = f"{text[:MAX_RESULT_CHARS]}\n{cut}"
    raw_event = (result.meta or {}).get(META_EVENT)
    try:
        if len(own) == 1:
            event = own[0]
        elif raw_event is not None:
            event = event_from_meta(raw_event, call.arguments, result.structured_content)
        else:
            event = _observed(episode, call, result, seq)
    except ValidationError:
        event = _observed(episode, call, result, seq)
    if call.name == FINISH_TOOL and not isinstance(event, FinishEvent):
        # e.g. behind a proxy, whose event is a plain tool call: the signal is what counts.
        event = _observed(episode, call, result, seq)
    if isinstance(event, ToolCallEvent) and event.error_code == TOOL_CRASHED and event.fault is None:
        # A tool that raised what it does not declare is a bug in the tool: nothing about the agent.
        raise InfrastructureError(f"tool {call.name} crashed (a bug in the tool): {text}")
    if isinstance(event, ToolCallEvent) and event.error_code == SERVER_MEMORY_LIMIT:
        # The server was full of other episodes: this one measured nothing about the agent.
        raise InfrastructureError(f"the server refused {call.name} for lack of memory: {text}")
    answer = ToolResult(call.id, call.name, text, bool(result.is_error), result.structured_content)
    return answer, event, True


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
    #: Positions in ``events`` of tool events built from a server's answer (see `merge_recorded`).
    answered: list[int] = field(default_factory=list)
    calls: list[ToolCallEvent] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    termination: str = "max_turns"
    detail: str = ""
    stop_rule: str | None = None
    turn: int = 0
    tokens: int = 0
    #: Calls spent of the episode's call budget.
    spent: int = 0
    #: The tools as last listed (a list change makes the loop list them again). The run's own list
    #: object until then: `tool_definitions` builds definitions once per list object.
    tools: Sequence[types.Tool] = field(default_factory=list)
    wait: HarnessWait = field(default_factory=HarnessWait)
    #: Whether a model call is under way (`_generate`; `_keep_time` lets it outlast the limit).
    model_call_running: bool = False
    #: Set by `_keep_time` when the limit finds a model call under way; the call sets it on ending.
    model_call_ended: anyio.Event | None = None
    #: How the episode ends if `_keep_time` cuts it (termination, detail), decided when it cuts: read
    #: afterwards, the harness wait or model call it cut for may have ended before the cut took effect.
    cut: tuple[str, str] | None = None


async def play_episode(
    client: Client,
    model: Model,
    episode: EpisodeSpec,
    tools: Sequence[types.Tool],
    recorded: RecordedEvents | None = None,
) -> EpisodeOutcome:
    """Run ``model`` on ``episode`` until it finishes, stops, breaks a limit, or the provider fails.

    Limits: ``max_turns`` model turns and as many tool calls, ``max_tokens`` tokens, ``time_limit``
    seconds. A provider that fails after retries ends the episode as ``infrastructure_error`` (void,
    not scored); a conversation that outgrows the context ends it as ``context_exceeded`` (scored:
    the agent's doing).
    """
    state = _LoopState()
    state.events.extend(
        ReflectionEvent(episode=episode.id, role="memory", from_trial=r.trial, text=r.text)
        for r in episode.memory
    )
    rules = episode.stop_rules
    definitions = tool_definitions(tools)
    state.tools = tools
    limit = episode.time_limit if episode.time_limit is not None else math.inf
    wait = state.wait
    token = HARNESS_WAIT.set(wait)
    # Whether `_loop` ended the episode itself: a cut delivered after that (at the clock's last
    # await) must not overturn its verdict.
    finished = False
    try:
        with anyio.CancelScope() as scope:
            wait.deadline = anyio.current_time() + limit
            if limit == math.inf or getattr(model, "answers_at_once", False):
                # No model call to let outlast the limit (a scripted agent): one timer, no watchdog.
                scope.deadline = wait.deadline
                await _loop(client, model, episode, definitions, rules, state, recorded)
                finished = True
            else:
                failure: Exception | None = None
                async with anyio.create_task_group() as clock:
                    clock.start_soon(_keep_time, scope, state, episode)
                    try:
                        await _loop(client, model, episode, definitions, rules, state, recorded)
                        finished = True
                    except Exception as exc:  # raised below, outside the group (no exception group)
                        failure = exc
                    clock.cancel_scope.cancel()
                if failure is not None:
                    raise failure
    finally:
        HARNESS_WAIT.reset(token)
    definitions = tool_definitions(state.tools)
    if scope.cancelled_caught and not finished:
        # No watchdog (the scope's own deadline): a harness wait it cut short is still marked.
        state.termination, state.detail = state.cut or _ran_out(state, episode)
    if recorded is not None and recorded.at_end is not None:
        try:
            final = await recorded.at_end(episode.id)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError, TimeoutError) as exc:
            logger.warning("could not read the recorded events of %s: %r", episode.id, exc)
            final = None
        if final is not None:
            merge_recorded(state.events, state.answered, final)
            state.events.extend(e for e in final if isinstance(e, EndStateEvent))
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


_READ_ONLY: dict[int, tuple[Sequence[types.Tool], frozenset[str]]] = {}


def _read_only(tools: Sequence[types.Tool]) -> frozenset[str]:
    """Tools that declare themselves read-only: safe to call again when an outcome is unknown.

    Asked on every call with the run's one tool list: computed once per list (as `tool_definitions`).
    """
    hit = _READ_ONLY.get(id(tools))
    if hit is not None and hit[0] is tools:
        return hit[1]
    names = frozenset(t.name for t in tools if t.annotations is not None and t.annotations.read_only_hint)
    if len(_READ_ONLY) >= 64:  # lists of finished runs: drop them rather than grow
        _READ_ONLY.clear()
    _READ_ONLY[id(tools)] = (tools, names)
    return names


async def _relist(
    client: Client, episode: EpisodeSpec, recorded: RecordedEvents | None, events: list[TraceEvent]
) -> list[types.Tool] | None:
    """The episode's tools listed again (every page), or None when the server refused."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    try:
        for _ in range(100):
            page = await client.list_tools(cursor=cursor, meta=episode.meta(), cache_mode="refresh")  # type: ignore[arg-type]
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
    except MCPError as exc:
        logger.info("listing the tools of %s again failed: %s", episode.id, exc.error.message)
        tools = []
    if recorded is not None and recorded.after_call is not None:
        events.extend(recorded.after_call(episode.id))  # the server's record of the listing
    return tools or None


#: How long past the time limit a model call already under way may take to answer (and at most the
#: time limit again): a late answer is the model's pace, no answer at all a hung API.
LATE_ANSWER_GRACE = 120.0


def _grace(episode: EpisodeSpec) -> float:
    limit = episode.time_limit if episode.time_limit is not None else math.inf
    return min(LATE_ANSWER_GRACE, limit)


async def _keep_time(scope: anyio.CancelScope, state: _LoopState, episode: EpisodeSpec) -> None:
    """End the episode (``scope``) when its time runs out, but never cut a model call at the limit.

    Cut there, a model API that hangs would count as the agent running out of time. A call under way
    may finish within the grace (`_generate` then ends the episode on its late answer); one that gives
    no answer by then is cancelled and voids the episode. A harness wait (a retry, a rate limit) under
    way at the limit is cut at once, and voids it too: it was never the agent's. One timer per
    episode: nothing is rescheduled per turn.
    """
    await anyio.sleep_until(state.wait.deadline)
    if state.wait.reason is not None or not state.model_call_running:
        state.cut = _ran_out(state, episode)
    else:
        grace = _grace(episode)
        state.model_call_ended = anyio.Event()
        with anyio.move_on_after(grace):
            await state.model_call_ended.wait()
        if not state.model_call_running:
            return  # answered (or failed) within the grace: `_loop` ends the episode itself
        state.cut = (
            "infrastructure_error",
            f"the model gave no answer within {grace:g}s after the time limit of {episode.time_limit}s "
            "ran out during its call (a hung model API is not the agent's doing)",
        )
    scope.cancel()


def _ran_out(state: _LoopState, episode: EpisodeSpec) -> tuple[str, str]:
    """How an episode whose time ran out ends: void if the harness was waiting, else ``time_limit``."""
    if state.wait.reason is not None:
        # The clock ran out on the harness (a provider being retried, the run's rate limits).
        return (
            "infrastructure_error",
            f"the time limit of {episode.time_limit}s ran out while {state.wait.reason}",
        )
    return "time_limit", f"episode exceeded {episode.time_limit}s"


async def _generate(model: Model, request: ModelRequest, state: _LoopState) -> ModelResponse:
    """The model's turn; `_keep_time` lets it run past the time limit (within the grace).

    A late answer is recorded and ends the episode as ``time_limit`` (the model was slow), unless the
    harness waited on the call (then, like a failure or no answer within the grace, it is void).
    """
    state.wait.waited = False
    state.model_call_running = True  # left set if the grace runs out: `play_episode` reads it
    try:
        response = await model.generate(request)
    finally:
        if state.model_call_ended is not None:
            state.model_call_ended.set()
    state.model_call_running = False
    return response


async def _loop(
    client: Client,
    model: Model,
    episode: EpisodeSpec,
    definitions: tuple[ToolDefinition, ...],
    rules: StopRules,
    state: _LoopState,
    recorded: RecordedEvents | None,
) -> None:
    messages = state.messages
    messages.append(UserMessage(with_memory(episode.prompt, episode.memory)))
    events, calls = state.events, state.calls
    notices = recorded.notices if recorded is not None else None
    seen = notices.version(episode.id) if notices is not None else (0, 0)
    for turn in range(1, episode.max_turns + 1):
        if notices is not None and notices.version(episode.id) != seen:
            # notifications/tools/list_changed: list again, and offer the model the new tools.
            seen = notices.version(episode.id)
            fresh = await _relist(client, episode, recorded, events)
            if fresh is not None:
                state.tools = fresh
                definitions = tool_definitions(fresh)
        state.turn = turn
        request = ModelRequest(
            messages=tuple(messages),
            tools=definitions,
            task=episode.task,
            max_turns=episode.max_turns,
            memory=episode.memory,
        )
        try:
            response = await _generate(model, request, state)
        except InfrastructureError as exc:
            state.termination, state.detail = "infrastructure_error", str(exc)
            return
        except ContextWindowExceededError as exc:
            state.termination, state.detail = "context_exceeded", str(exc)
            return
        state.tokens += response.input_tokens + response.output_tokens
        events.append(
            _new_model_turn(
                {
                    "episode": episode.id,
                    "turn": turn,
                    "text": response.text,
                    "tool_calls": tuple(
                        {"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls
                    ),
                    "input_tokens": response.input_tokens,
                    "output_tokens": response.output_tokens,
                }
            )
        )
        messages.append(AssistantMessage(response.text, response.tool_calls))
        if state.wait.overdue():  # the answer came after the time limit: recorded, but it ends here
            if state.wait.waited:
                state.termination = "infrastructure_error"
                state.detail = (
                    f"the time limit of {episode.time_limit}s ran out while the harness waited on "
                    "the model call (retries or rate limits)"
                )
            else:
                state.termination = "time_limit"
                state.detail = f"the model answered after the time limit of {episode.time_limit}s"
            return
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
                if state.spent >= episode.max_turns:  # the call budget is spent: no more calls
                    break
                if finished is not None:  # the agent declared the episode over: nothing after counts
                    break
                protocol: list[TraceEvent] = []
                result, event, answered = await call_tool(
                    client,
                    episode,
                    call,
                    seq=len(events) + 1,
                    recorded=recorded,
                    read_only=_read_only(state.tools),
                    protocol=protocol,
                )
                # The server's protocol events in its own order: what it recorded after the call follows it.
                seq = getattr(event, "seq", 0)
                events.extend(p for p in protocol if getattr(p, "seq", 0) < seq)
                results.append(result)
                if answered:
                    state.answered.append(len(events))
                events.append(event)
                events.extend(p for p in protocol if getattr(p, "seq", 0) >= seq)
                state.spent += counts_against_budget(event)
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
        if state.spent >= episode.max_turns:
            state.termination, state.detail = "max_turns", f"call budget of {episode.max_turns} spent"
            return
        if episode.max_tokens is not None and state.tokens >= episode.max_tokens:
            state.termination = "max_tokens"
            state.detail = f"{state.tokens} tokens spent, limit {episode.max_tokens}"
            return
    state.termination = "max_turns"
