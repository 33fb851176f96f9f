"""The MCP layer of protocol faults: one middleware, the same for our server and the proxy.

A protocol fault is decided by the call pipeline like any fault (seeded, ledgered on the ``tools/call``
it fires on). This layer wraps every inbound request (``Server.middleware``) and does what the fault
means on the wire:

* before a request: refuse it while the episode's session is expired or its token revoked (over
  Streamable HTTP, `ProtocolGuard` answers a real 404/401 first); resolve a call through the
  episode's changed catalogue (a removed or renamed tool: ``-32602 Unknown tool``; a versioned schema:
  an ``isError`` validation result);
* after the call: change the catalogue and send ``notifications/tools/list_changed``; expire the
  session; hold, stall, duplicate, enlarge or reset the response; flood progress or log messages; ask
  the client for an elicitation or a sampling answer.

Everything the client does at this layer while protocol faults are on (initialize again, list tools,
meet a refusal, answer a request) is recorded in the episode's trace as a `ProtocolEvent`, which is
what `mcp_resili.scoring.coping` scores. Without protocol faults in the plan the layer is not
installed at all.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from mcp_resili.faults.protocol import (
    DiscoverChanged,
    ElicitationRequest,
    HandleExpired,
    InputRequired,
    LogFlood,
    NotificationDropped,
    NotificationDuplicated,
    OversizedResult,
    ProgressFlood,
    ProtocolFault,
    ResponseDelayed,
    ResponseDropped,
    ResponseDuplicated,
    SamplingRequest,
    SchemaChanged,
    ServerRestart,
    SessionExpired,
    StaleListing,
    StreamStalled,
    ToolAdded,
    ToolRemoved,
    ToolRenamed,
    TransportReset,
    Unauthorized,
    schema_change,
)
from mcp_resili.server.episode import Episode
from mcp_resili.server.episodes import EpisodeTable, NoEpisodeError, episode_request
from mcp_resili.server.pipeline import CallPipeline
from mcp_resili.server.wire import shaped
from mcp_resili.trace import ProtocolEvent, ToolCallEvent

logger = logging.getLogger(__name__)

#: ``error.data["reason"]`` of the JSON-RPC errors this layer answers with (clients key on it).
REASON_EXPIRED = "session_expired"
REASON_UNAUTHORIZED = "unauthorized"
REASON_RESTARTED = "server_restart"
#: Seconds (times the server's time scale) a dropped or stalled response is held before the server
#: gives up on it; a client times out long before.
HOLD_SECONDS = 600.0
#: Seconds the server waits for an elicitation or sampling answer.
ANSWER_SECONDS = 60.0
#: Key in an HTTP request's ASGI scope under which the layer leaves wire actions for `ProtocolGuard`.
WIRE_ACTIONS = "mcp-resili/wire-actions"
#: Requests that never meet a refusal: the way back into a session, and liveness.
_REINITIALIZE = frozenset({"initialize", "server/discover"})
#: What `DiscoverChanged` puts first among the supported versions: a revision the client never heard of.
NEWER_VERSION = "2099-01-01"
#: Capabilities `DiscoverChanged` takes away (``capabilities``).
_DROPPED_CAPABILITIES = ("prompts", "resources", "logging", "completions")
#: The schema of what an `InputRequired` round asks; an answer that does not fit it is malformed.
CONFIRM_SCHEMA = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "description": "Continue?"}},
    "required": ["confirm"],
}


@dataclass
class CallSlot:
    """Filled by the tools/call handler: the episode and the event the pipeline recorded."""

    episode: Episode | None = None
    event: ToolCallEvent | None = None


_SLOT: contextvars.ContextVar[CallSlot | None] = contextvars.ContextVar("mcp_resili_call_slot", default=None)


def note_call(episode: Episode, event: ToolCallEvent) -> None:
    """Tell the protocol layer (if any) which episode and event a ``tools/call`` produced."""
    slot = _SLOT.get()
    if slot is not None:
        slot.episode, slot.event = episode, event


@dataclass
class StdioWire:
    """Wire actions for the stdio writer: responses to send twice, or to reset the connection at."""

    actions: dict[types.RequestId, str] = field(default_factory=dict)

    def take(self, request_id: types.RequestId) -> str | None:
        """The action for the response to ``request_id``, once."""
        return self.actions.pop(request_id, None)


@dataclass
class HttpSessions:
    """Streamable HTTP sessions the layer has expired or whose token it revoked (read by `ProtocolGuard`)."""

    #: Session id → why it is gone (``session_expired``, ``server_restart``).
    expired: dict[str, str] = field(default_factory=dict)
    #: Session id → the ``Authorization`` header that was refused ('' when none was sent).
    revoked: dict[str, str] = field(default_factory=dict)


def _dump(result: HandlerResult) -> dict[str, Any]:
    if isinstance(result, BaseModel):
        dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return dumped
    return dict(result or {})


def _session_id(ctx: ServerRequestContext[Any]) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    value = headers.get("mcp-session-id") if headers is not None else None
    return str(value) if value else None


def _authorization(ctx: ServerRequestContext[Any]) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    return None if headers is None else str(headers.get("authorization") or "")


def _filler(megabytes: float) -> str:
    """``megabytes`` MB of readable text (lines of a fixed sentence)."""
    line = "This line pads an oversized result injected by mcp-resili (oversized_result).\n"
    size = int(megabytes * 1_000_000)
    return (line * (size // len(line) + 1))[:size]


class ProtocolLayer:
    """Applies protocol faults for one server (ours or the proxy); records each episode's protocol events."""

    def __init__(
        self,
        pipeline: CallPipeline,
        episodes: EpisodeTable,
        *,
        server_info: dict[str, Any],
        connection_episode: Callable[[], str | None] = lambda: None,
        resolve: Callable[[ServerRequestContext[Any]], Episode | None] | None = None,
        publish: Callable[[ServerRequestContext[Any]], Awaitable[int]] | None = None,
        revoke_handle: Callable[[Episode, bool], bool] | None = None,
    ) -> None:
        self.pipeline = pipeline
        #: Sends a tools list change to the client's ``subscriptions/listen`` streams; how many got it.
        self._publish = publish
        #: Revokes an episode's handle (True), or says it has none (False: not in handle mode).
        self._revoke_handle = revoke_handle
        #: The ``ttlMs`` a plan with `StaleListing` promises on 2026-07-28 listings (None: no promise).
        self.ttl_ms = _promised_ttl(pipeline.plan_dict)
        #: The server's own way from a request to its live episode (ownership, handles), if it has one.
        self._resolve = resolve
        #: The server's ``serverInfo`` stamp, for the 2026-era answers this layer gives itself.
        self.server_info = server_info
        self.episodes = episodes
        self._connection_episode = connection_episode
        self.http = HttpSessions()
        #: Set by `serve_stdio` while it serves: the stdio writer's wire actions.
        self.stdio: StdioWire | None = None

    # --- the middleware ---------------------------------------------------------------------------

    async def middleware(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        """Wrap one inbound message (install first in ``Server.middleware``, after the SDK's own)."""
        if ctx.request_id is None:
            return await call_next(ctx)
        episode = self._peek(ctx)
        if ctx.method in _REINITIALIZE:
            result = await call_next(ctx)
            if episode is not None:
                await self._reinitialized(episode, ctx)
                if episode.protocol.discover is not None:
                    return self._changed_discovery(ctx, result, episode.protocol.discover)
            return result
        if episode is not None and ctx.method != "ping":
            await self._check_session(ctx, episode)
        if ctx.method == "tools/list":
            result = await call_next(ctx)
            promise = self.ttl_ms is not None and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
            if episode is None and not promise:
                return result
            listing = _dump(result)
            if promise:
                listing["ttlMs"] = self.ttl_ms  # the cache promise a StaleListing fault breaks
            if episode is not None:
                await self._record(episode, "list_tools", ctx.method)
                if episode.protocol.changed:
                    listing["tools"] = episode.protocol.listing(list(listing.get("tools") or []))
            return self._shaped(ctx, listing)
        if ctx.method == "tools/call":
            return await self._call(ctx, call_next, episode)
        return await call_next(ctx)

    def _shaped(self, ctx: ServerRequestContext[Any], result: dict[str, Any]) -> dict[str, Any]:
        """An answer of this layer's own as the client's protocol version needs it (`wire.shaped`)."""
        return shaped(ctx.protocol_version, result, self.server_info)

    def _peek(self, ctx: ServerRequestContext[Any]) -> Episode | None:
        """The live episode of a request, if it has one (never creates an episode)."""
        if self._resolve is not None:
            return self._resolve(ctx)
        try:
            request = episode_request(ctx, self._connection_episode())
        except NoEpisodeError:
            return None
        except MCPError:
            return None  # a malformed episode: the handler answers it
        return self.episodes.peek(request.id)

    async def _record(self, episode: Episode, kind: str, method: str = "", **detail: Any) -> None:
        async with episode.lock:
            event = ProtocolEvent(
                episode=episode.id, seq=episode.next_seq(), kind=kind, method=method, detail=detail
            )
            self.pipeline.recorder.record(episode, event)

    async def resumed(self, episode: Episode) -> None:
        """A client resumed an episode whose handle a fault revoked (``start_episode`` again)."""
        await self._record(episode, "initialize", "tools/call", resumed=True)

    async def _reinitialized(self, episode: Episode, ctx: ServerRequestContext[Any]) -> None:
        state = episode.protocol
        revoked = REASON_UNAUTHORIZED if state.revoked is not None else None
        detail: dict[str, Any] = {"cleared": state.expired or revoked}
        state.expired = None
        state.revoked = None
        await self._record(episode, "initialize", ctx.method, **detail)

    async def _check_session(self, ctx: ServerRequestContext[Any], episode: Episode) -> None:
        state = episode.protocol
        if state.revoked is not None:
            sent = _authorization(ctx)
            if sent is not None and sent != state.revoked:
                state.revoked = None  # a refreshed token
            else:
                await self._record(episode, "refused", ctx.method, reason=REASON_UNAUTHORIZED)
                raise _unauthorized()
        if state.expired is not None:
            await self._record(episode, "refused", ctx.method, reason=state.expired)
            raise _expired(state.expired)

    # --- tools/call ---------------------------------------------------------------------------------

    async def _call(
        self, ctx: ServerRequestContext[Any], call_next: CallNext, episode: Episode | None
    ) -> HandlerResult:
        params = dict(ctx.params or {})
        name = params.get("name")
        pending_key = params.get("requestState")
        if episode is not None and isinstance(pending_key, str) and pending_key in episode.protocol.pending:
            if episode.protocol.pending[pending_key].get("fault") == "input_required":
                return await self._round_answered(ctx, episode, pending_key, params)
            return await self._answered(ctx, episode, pending_key, params)
        if episode is not None and episode.protocol.changed and isinstance(name, str):
            rewritten = await self._through_catalogue(ctx, episode, name, params)
            if isinstance(rewritten, dict):
                return rewritten
            ctx = rewritten
        slot = CallSlot()
        token = _SLOT.set(slot)
        try:
            result = await call_next(ctx)
        finally:
            _SLOT.reset(token)
        event = slot.event
        if slot.episode is None or event is None or not isinstance(event.fault, ProtocolFault):
            return result
        return await self._apply(ctx, slot.episode, event, event.fault, result)

    async def _through_catalogue(
        self, ctx: ServerRequestContext[Any], episode: Episode, name: str, params: dict[str, Any]
    ) -> ServerRequestContext[Any] | dict[str, Any]:
        """The call as the server's own tools take it, or the answer that refuses it."""
        state = episode.protocol
        raw = params.get("arguments")
        arguments: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
        target = state.resolve(name)
        if target is None:
            await self._refuse_call(episode, name, arguments, "UNKNOWN_TOOL", f"Unknown tool: {name}")
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")
        change = state.schemas.get(target)
        if change is not None:
            problem = change.problem(arguments)
            if problem is not None:
                message = f"invalid arguments for {name}: {problem}"
                await self._refuse_call(episode, name, arguments, "INVALID_INPUT", message)
                return self._shaped(
                    ctx,
                    {
                        "content": [{"type": "text", "text": f"Error INVALID_INPUT: {message}"}],
                        "isError": True,
                    },
                )
            arguments = change.strip(arguments)
        if target != name:
            await self._record(episode, "renamed_call", "tools/call", called=name, tool=target)
        if target == name and change is None:
            return ctx
        return dataclasses.replace(ctx, params={**params, "name": target, "arguments": arguments})

    async def _refuse_call(
        self, episode: Episode, tool: str, arguments: Mapping[str, Any], code: str, message: str
    ) -> None:
        async with episode.lock:
            event = ToolCallEvent(
                episode=episode.id,
                seq=episode.next_seq(),
                tool=tool,
                arguments=dict(arguments),
                is_error=True,
                error_code=code,
                result={"code": code, "message": message},
            )
            self.pipeline.recorder.record(episode, event)

    async def _apply(
        self,
        ctx: ServerRequestContext[Any],
        episode: Episode,
        event: ToolCallEvent,
        fault: ProtocolFault,
        result: HandlerResult,
    ) -> HandlerResult:
        """What the fault that fired on this call does on the wire."""
        state = episode.protocol
        tool = event.tool
        if isinstance(
            fault, StaleListing | NotificationDropped | DiscoverChanged | HandleExpired | InputRequired
        ):
            return await self._apply_modern(ctx, episode, tool, fault, result)
        if isinstance(fault, ToolRemoved | ToolRenamed):
            if isinstance(fault, ToolRenamed):
                state.renamed[fault.renamed(tool)] = tool
            else:
                state.removed.add(tool)
            await self._list_changed(ctx, episode)
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {tool}")
        if isinstance(fault, ToolAdded):
            state.added[fault.added(tool)] = tool
            await self._list_changed(ctx, episode)
            return result
        if isinstance(fault, SchemaChanged):
            spec = self.pipeline.specs.get(tool)
            state.schemas[tool] = schema_change(fault, spec.input_schema if spec else {})
            await self._list_changed(ctx, episode)
            return result
        if isinstance(fault, SessionExpired | ServerRestart):
            reason = REASON_RESTARTED if isinstance(fault, ServerRestart) else REASON_EXPIRED
            if isinstance(fault, ServerRestart) and not fault.keep_state:
                episode.tool_state.clear()
                episode.state_ready = False
            state.expired = reason
            session = _session_id(ctx)
            if session is not None:
                self.http.expired[session] = reason
            if isinstance(fault, ServerRestart):
                raise MCPError(
                    types.CONNECTION_CLOSED,
                    "Connection closed: the server restarted",
                    data={"reason": REASON_RESTARTED, "keep_state": fault.keep_state},
                )
            raise _expired(reason)
        if isinstance(fault, Unauthorized):
            state.revoked = _authorization(ctx) or ""
            session = _session_id(ctx)
            if session is not None:
                self.http.revoked[session] = state.revoked
            raise _unauthorized()
        spec = self.pipeline.specs.get(tool)
        read_only = spec is not None and spec.access == "read"
        return await self._deliver(ctx, episode, fault, result, read_only)

    async def _deliver(
        self,
        ctx: ServerRequestContext[Any],
        episode: Episode,
        fault: ProtocolFault,
        result: HandlerResult,
        read_only: bool,
    ) -> HandlerResult:
        """Transport and pressure faults: the tool ran; change how its answer reaches the client."""
        instant = self.pipeline.time_scale == 0

        async def delivered(**detail: Any) -> None:
            await self._record(episode, "delivered", "tools/call", read_only=read_only, **detail)

        if isinstance(fault, ResponseDelayed):
            # The pipeline waited delay_seconds (scaled). Unscaled, the wait is the client's timeout.
            await delivered(as_="timeout" if instant else "late")
            if instant:
                raise _timeout("the response was delayed past the client's timeout")
            return result
        if isinstance(fault, ResponseDropped | StreamStalled):
            sent = 0
            if isinstance(fault, StreamStalled):
                sent = await self._progress(ctx, fault.notifications, total=None)
            await delivered(progress=sent, as_="timeout" if instant else "hold")
            if not instant:
                with anyio.move_on_after(HOLD_SECONDS * self.pipeline.time_scale):
                    await anyio.sleep_forever()
            raise _timeout("no response was sent")
        if isinstance(fault, ResponseDuplicated | TransportReset):
            action = "duplicate" if isinstance(fault, ResponseDuplicated) else "reset"
            wire = self._mark(ctx, action)
            await delivered(action=action, wire=wire)
            if wire == "memory" and action == "reset":
                raise MCPError(types.CONNECTION_CLOSED, "Connection closed: the connection was reset")
            return result
        if isinstance(fault, OversizedResult):
            padded = _dump(result)
            extra = {"type": "text", "text": _filler(fault.megabytes)}
            padded["content"] = [*padded.get("content", []), extra]
            await delivered(megabytes=fault.megabytes)
            return self._shaped(ctx, padded)
        if isinstance(fault, ProgressFlood | LogFlood):
            flood = isinstance(fault, ProgressFlood)
            sent = await self._progress(ctx, fault.count, total=fault.count) if flood else 0
            logged = 0 if sent else await self._logs(ctx, fault.count)
            await delivered(progress=sent, logs=logged)
            return result
        if isinstance(fault, ElicitationRequest | SamplingRequest):
            return await self._ask(ctx, episode, fault, result)
        return result

    def _mark(self, ctx: ServerRequestContext[Any], action: str) -> str:
        """Leave ``action`` for the transport writing this request's response; returns which wire."""
        scope = getattr(ctx.request, "scope", None)
        if isinstance(scope, dict) and ctx.request_id is not None:
            scope.setdefault(WIRE_ACTIONS, {})[ctx.request_id] = action
            return "http"
        if self.stdio is not None and ctx.request_id is not None:
            self.stdio.actions[ctx.request_id] = action
            return "stdio"
        return "memory"  # in process there is no wire: nothing to duplicate, a reset is an error

    async def _list_changed(self, ctx: ServerRequestContext[Any], episode: Episode, copies: int = 1) -> None:
        """Tell the client its tool list changed, ``copies`` times (0: the notice is lost).

        2026-07-28: on the client's ``subscriptions/listen`` streams, else (it listens on none) on the
        request's own stream; the handshake era: on the session.
        """
        # The episode rides along in _meta so a client multiplexing episodes knows whose list changed.
        notification = types.ToolListChangedNotification(
            params=types.NotificationParams(_meta={"mcp-resili/episode": episode.id})
        )
        listened = 0
        sent = False
        for _ in range(copies):
            if self._publish is not None and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                listened = await self._publish(ctx)
                if listened:
                    sent = True
                    continue
            try:
                await ctx.session.send_notification(notification, related_request_id=ctx.request_id)
                sent = True
            except Exception as exc:  # a client that went away still meets the changed catalogue
                logger.debug("could not send tools/list_changed: %r", exc)
        await self._record(
            episode,
            "notified",
            "notifications/tools/list_changed",
            sent=sent,
            copies=copies,
            listeners=listened,
        )

    async def _progress(self, ctx: ServerRequestContext[Any], count: int, total: float | None) -> int:
        # On 2026-07-28 in process the callback travels without a token; report_progress knows.
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        if progress_token_from_params(ctx.params) is None and not modern:
            return 0
        for n in range(1, count + 1):
            await ctx.session.report_progress(n, total, f"step {n}")
        return count

    async def _logs(self, ctx: ServerRequestContext[Any], count: int) -> int:
        for n in range(1, count + 1):
            await ctx.session.send_notification(
                types.LoggingMessageNotification(
                    params=types.LoggingMessageNotificationParams(
                        level="info", logger="mcp-resili", data=f"log message {n} of {count}"
                    )
                ),
                related_request_id=ctx.request_id,
            )
        return count

    # --- elicitation and sampling -----------------------------------------------------------------

    def _input_request(
        self, fault: ElicitationRequest | SamplingRequest
    ) -> types.ElicitRequest | types.CreateMessageRequest:
        if isinstance(fault, ElicitationRequest):
            return types.ElicitRequest(
                params=types.ElicitRequestFormParams(
                    message=fault.message,
                    requested_schema={
                        "type": "object",
                        "properties": {"confirm": {"type": "boolean", "description": "Continue?"}},
                        "required": ["confirm"],
                    },
                )
            )
        return types.CreateMessageRequest(
            params=types.CreateMessageRequestParams(
                messages=[
                    types.SamplingMessage(
                        role="user", content=types.TextContent(type="text", text=fault.message)
                    )
                ],
                max_tokens=200,
            )
        )

    async def _ask(
        self,
        ctx: ServerRequestContext[Any],
        episode: Episode,
        fault: ElicitationRequest | SamplingRequest,
        result: HandlerResult,
    ) -> HandlerResult:
        kind = "elicitation" if isinstance(fault, ElicitationRequest) else "sampling"
        needed = types.ClientCapabilities(
            elicitation=types.ElicitationCapability() if kind == "elicitation" else None,
            sampling=types.SamplingCapability() if kind == "sampling" else None,
        )
        if not ctx.session.check_client_capability(needed):
            # The spec forbids asking a client that declared no such capability.
            await self._record(episode, "answered", kind, answer="not_supported")
            return result
        request = self._input_request(fault)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # 2026-07-28 has no server-to-client requests: the answer comes with the client's retry.
            key = secrets.token_hex(8)
            episode.protocol.pending[key] = {"kind": kind, "result": _dump(result)}
            return types.InputRequiredResult(input_requests={kind: request}, request_state=key)
        answer: str
        try:
            with anyio.fail_after(ANSWER_SECONDS):
                if isinstance(request, types.ElicitRequest):
                    elicited = await ctx.session.send_request(
                        request, types.ElicitResult, metadata=_related(ctx)
                    )
                    answer = elicited.action
                else:
                    await ctx.session.send_request(request, types.CreateMessageResult, metadata=_related(ctx))
                    answer = "answered"
        except MCPError as exc:
            answer = f"error {exc.code}"
        except TimeoutError:
            answer = "no_answer"
        except Exception as exc:  # an answer that breaks the schema is still the client's answer
            answer = f"invalid: {type(exc).__name__}"
        await self._record(episode, "answered", kind, answer=answer)
        return result

    async def _answered(
        self, ctx: ServerRequestContext[Any], episode: Episode, key: str, params: Mapping[str, Any]
    ) -> HandlerResult:
        held = episode.protocol.pending.pop(key)
        responses = params.get("inputResponses")
        response = responses.get(held["kind"]) if isinstance(responses, dict) else None
        if isinstance(response, dict) and "action" in response:
            answer = str(response["action"])
        elif isinstance(response, dict):
            answer = "answered"
        else:
            answer = "no_answer"
        await self._record(episode, "answered", held["kind"], answer=answer)
        return self._shaped(ctx, dict(held["result"]))

    # --- the 2026-07-28 faults (each with its handshake-era equivalent) ----------------------------------

    async def _apply_modern(
        self,
        ctx: ServerRequestContext[Any],
        episode: Episode,
        tool: str,
        fault: StaleListing | NotificationDropped | DiscoverChanged | HandleExpired | InputRequired,
        result: HandlerResult,
    ) -> HandlerResult:
        """What a fault of the modern family does, in the client's era."""
        state = episode.protocol
        if isinstance(fault, StaleListing):
            # Silent: a client that trusts its cached list until ttlMs runs out calls a stale name.
            if fault.change == "renamed":
                state.renamed[fault.renamed(tool)] = tool
            else:
                state.removed.add(tool)
            await self._record(
                episode, "silent_change", "tools/list", change=fault.change, ttl_ms=self.ttl_ms
            )
            return result
        if isinstance(fault, NotificationDropped):
            state.added[fault.added(tool)] = tool
            await self._list_changed(
                ctx, episode, copies=2 if isinstance(fault, NotificationDuplicated) else 0
            )
            return result
        if isinstance(fault, DiscoverChanged):
            state.discover = fault.change
            await self._record(episode, "discover_changed", "server/discover", change=fault.change)
            return result
        if isinstance(fault, HandleExpired):
            if self._revoke_handle is not None and self._revoke_handle(episode, fault.unknown):
                await self._record(episode, "handle_revoked", "tools/call", unknown=fault.unknown)
                return result  # the refusal the pipeline recorded: an isError naming start_episode
            # Not in handle mode: the session expires, this era's equivalent.
            state.expired = REASON_EXPIRED
            session = _session_id(ctx)
            if session is not None:
                self.http.expired[session] = REASON_EXPIRED
            raise _expired(REASON_EXPIRED)
        return await self._input_rounds(ctx, episode, fault, result)

    def _changed_discovery(
        self, ctx: ServerRequestContext[Any], result: HandlerResult, change: str
    ) -> HandlerResult:
        """A discovery answer (``server/discover``, or ``initialize``) as `DiscoverChanged` changed it."""
        answer = _dump(result)
        if change == "capabilities":
            capabilities = {
                k: v for k, v in (answer.get("capabilities") or {}).items() if k not in _DROPPED_CAPABILITIES
            }
            if "tools" in capabilities:
                capabilities["tools"] = {"listChanged": False}
            answer["capabilities"] = capabilities
        elif ctx.method == "server/discover":
            versions = [v for v in answer.get("supportedVersions") or [] if v != NEWER_VERSION]
            answer["supportedVersions"] = [NEWER_VERSION, *versions]
        else:
            # The handshake era's equivalent: the new initialize negotiates another (older) version.
            asked = answer.get("protocolVersion")
            answer["protocolVersion"] = next(v for v in HANDSHAKE_PROTOCOL_VERSIONS if v != asked)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return self._shaped(ctx, answer)
        return answer

    async def _input_rounds(
        self, ctx: ServerRequestContext[Any], episode: Episode, fault: InputRequired, result: HandlerResult
    ) -> HandlerResult:
        """`InputRequired`: ask the client ``rounds`` times before the answer."""
        if not ctx.session.check_client_capability(
            types.ClientCapabilities(elicitation=types.ElicitationCapability())
        ):
            await self._record(episode, "answered", "input_required", answer="not_supported")
            return result
        request = _confirm_request(fault.message)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            held: dict[str, Any] = {"fault": "input_required", "kind": "elicitation", "result": _dump(result)}
            held |= {"left": fault.rounds, "late": fault.late, "asked": 1, "cap": 3 * fault.rounds}
            held["message"] = fault.message
            return await self._ask_round(episode, held, request)
        good = asked = 0
        while good < fault.rounds and asked < 3 * fault.rounds:
            asked += 1
            answer = await self._elicit_once(ctx, request)
            await self._record(episode, "answered", "input_required", answer=answer, round=asked)
            if answer == "accept":
                good += 1
            elif answer in ("decline", "cancel") or answer.startswith(("error", "no_answer")):
                break
        final = _rounds_ended(fault.rounds - good, answer)
        await self._record(episode, "answered", "input_required", answer=final, rounds=good)
        return result

    async def _ask_round(
        self, episode: Episode, held: dict[str, Any], request: types.ElicitRequest
    ) -> types.InputRequiredResult:
        key = secrets.token_hex(8)
        episode.protocol.pending[key] = held
        await self._record(episode, "asked", "input_required", round=held["asked"])
        return types.InputRequiredResult(input_requests={"elicitation": request}, request_state=key)

    async def _elicit_once(self, ctx: ServerRequestContext[Any], request: types.ElicitRequest) -> str:
        """One handshake-era elicitation round: ``accept`` (well-formed), ``malformed``, or what came."""
        try:
            with anyio.fail_after(ANSWER_SECONDS):
                elicited = await ctx.session.send_request(request, types.ElicitResult, metadata=_related(ctx))
        except MCPError as exc:
            return f"error {exc.code}"
        except TimeoutError:
            return "no_answer"
        except Exception as exc:  # an answer that breaks the schema is still the client's answer
            return f"malformed: {type(exc).__name__}"
        return _round_answer(elicited.model_dump(mode="json", by_alias=True))

    async def _round_answered(
        self, ctx: ServerRequestContext[Any], episode: Episode, key: str, params: Mapping[str, Any]
    ) -> HandlerResult:
        """A 2026-07-28 retry answering an `InputRequired` round."""
        held = episode.protocol.pending.pop(key)
        responses = params.get("inputResponses")
        response = responses.get("elicitation") if isinstance(responses, dict) else None
        if held["late"]:
            held["late"] = False  # the first answer comes after its request state expired
            answer = "late"
        else:
            answer = _round_answer(response)
        await self._record(episode, "answered", "input_required", answer=answer, round=held["asked"])
        if answer == "accept":
            held["left"] -= 1
        if answer in ("decline", "cancel") or held["left"] == 0 or held["asked"] >= held["cap"]:
            final = _rounds_ended(held["left"], answer)
            await self._record(episode, "answered", "input_required", answer=final, asked=held["asked"])
            return self._shaped(ctx, dict(held["result"]))
        held["asked"] += 1
        asking = await self._ask_round(episode, held, _confirm_request(held["message"]))
        return self._shaped(ctx, _dump(asking))


def _related(ctx: ServerRequestContext[Any]) -> Any:
    from mcp.shared.message import ServerMessageMetadata

    return ServerMessageMetadata(related_request_id=ctx.request_id)


def _expired(reason: str) -> MCPError:
    what = "the server restarted" if reason == REASON_RESTARTED else "the session expired"
    return MCPError(
        types.INVALID_REQUEST,
        f"Session not found: {what}; initialize a new session",
        data={"reason": reason, "status": 404},
    )


def _unauthorized() -> MCPError:
    return MCPError(
        types.INVALID_REQUEST,
        "Unauthorized: the access token expired; refresh it (or initialize again) and retry",
        data={"reason": REASON_UNAUTHORIZED, "status": 401},
    )


def _timeout(why: str) -> MCPError:
    # What a client library raises when its read timeout passes (-32001), given at once under time scale 0.
    return MCPError(types.REQUEST_TIMEOUT, f"Request timed out: {why}", data={"reason": "timeout"})


def session_error_body(reason: str) -> bytes:
    """The JSON-RPC error body of an HTTP 404 or 401 answered by `ProtocolGuard`."""
    error = _unauthorized() if reason == REASON_UNAUTHORIZED else _expired(reason)
    body = {"jsonrpc": "2.0", "id": None, "error": error.error.model_dump(mode="json", exclude_none=True)}
    return json.dumps(body).encode()


def _confirm_request(message: str = "Please confirm that the operation may continue.") -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=CONFIRM_SCHEMA)
    )


def _rounds_ended(left: int, last: str) -> str:
    """How `InputRequired` rounds ended: ``complete``, ``declined`` (a clean refusal), or ``incomplete``."""
    if left == 0:
        return "complete"
    return "declined" if last in ("decline", "cancel") else "incomplete"


def _round_answer(response: object) -> str:
    """An elicitation answer: ``accept`` when it fits `CONFIRM_SCHEMA`, else ``malformed`` or its action."""
    if not isinstance(response, dict):
        return "malformed"
    action = response.get("action")
    if action in ("decline", "cancel"):
        return str(action)
    content = response.get("content")
    if action == "accept" and isinstance(content, dict) and isinstance(content.get("confirm"), bool):
        return "accept"
    return "malformed"


def _promised_ttl(plan: Mapping[str, Any] | Any) -> int | None:
    """The ``ttl_ms`` of the first `StaleListing` in a plan's JSON form, if it holds one."""
    if isinstance(plan, Mapping):
        if plan.get("type") == "stale_listing":
            ttl = plan.get("ttl_ms")
            default: int = StaleListing.model_fields["ttl_ms"].default
            return int(ttl) if isinstance(ttl, int) else default
        for value in plan.values():
            found = _promised_ttl(value)
            if found is not None:
                return found
    elif isinstance(plan, list | tuple):
        for value in plan:
            found = _promised_ttl(value)
            if found is not None:
                return found
    return None
