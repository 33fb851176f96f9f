"""A fault-injecting MCP proxy: the upstream exactly as it is, with our pipeline on ``tools/call``.

Every request but ``initialize`` and ``ping`` is forwarded as raw JSON-RPC and its result returned
unchanged (completion, subscriptions, logging levels, tasks, methods we do not know); the handshake
answers with the upstream's own capabilities, server info and instructions. Only ``tools/call`` passes
our `CallPipeline` (fault decision, trace); an untouched call returns the upstream's result as sent,
``_meta`` included, and the proxy adds its trace event to ``_meta`` only with ``expose_faults``.
Notifications and server-to-client requests travel through `ClientRelay`.

``finish``, the benchmark's signal that an episode is over, is never faulted: a call to it goes to the
upstream untouched and is recorded without a fault decision (as our own server treats it), and a plan
with a rule naming it is refused (`check_plan`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types import methods as protocol
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcp_resili.constants import FINISH_TOOL, META_EVENT, VERSION
from mcp_resili.errors import plain_validation_error
from mcp_resili.faults import BasePlan, FaultSpecError, ProtocolFault, ToolOutcome, has_protocol_faults
from mcp_resili.proxy.relay import ClientRelay
from mcp_resili.proxy.sessions import UpstreamSessions
from mcp_resili.proxy.upstream import (
    FORWARDED_CALL,
    ForwardedCall,
    UpstreamBackend,
    UpstreamError,
    forward,
    spec_of,
    upstream_params,
)
from mcp_resili.server.episode import Episode
from mcp_resili.server.episodes import (
    EpisodeRefusedError,
    EpisodeRequest,
    EpisodeTable,
    NoEpisodeError,
    client_identity,
    episode_request,
)
from mcp_resili.server.pipeline import CallPipeline, result_text
from mcp_resili.server.protocol import ProtocolLayer, note_call
from mcp_resili.server.recorder import TraceRecorder
from mcp_resili.trace import ToolCallEvent, TraceHeader, event_to_dict

PROXY_SUITE = "proxy"
#: Requests the proxy answers itself (everything else goes upstream as it came).
_LOCAL = frozenset({"initialize", "server/discover", "ping"})
#: Pages of ``tools/list`` read at start to learn the upstream's tools (more are learnt as listed).
_MAX_START_PAGES = 100
#: Why the proxy gave up waiting for the upstream's answer (`ProxyServer.stop_waiting`).
INPUT_ENDED = "the client closed its input before the upstream answered"
SHUTTING_DOWN = "the proxy is shutting down (SIGTERM)"


def check_plan(plan: BasePlan) -> None:
    """Refuse (`FaultSpecError`, one line) a plan with a rule naming the tool ``finish``.

    ``finish`` is the agent's signal that its episode is over, and the proxy never faults it: a
    wildcard rule (``tool = "*"``, ``"fin*"``) skips it. A rule naming it outright asks for what will
    not happen; it is refused rather than silently ignored, so that the fault file says what it does.
    """
    if _names_finish(plan.to_dict()):
        raise FaultSpecError(
            f"a fault rule names the tool {FINISH_TOOL!r}: the proxy never faults it (it ends the "
            "episode; wildcard rules skip it), remove that rule"
        )


def _names_finish(node: object) -> bool:
    if isinstance(node, Mapping):
        if node.get("tool") == FINISH_TOOL and "fault" in node:
            return True
        return any(_names_finish(value) for value in node.values())
    if isinstance(node, list | tuple):
        return any(_names_finish(value) for value in node)
    return False


class ProxyServer:
    """Serves an upstream server's surface unchanged; every ``tools/call`` passes our `CallPipeline`.

    ``client`` is connected to the upstream; give it ``relay.client_options()`` so that its
    notifications and requests reach the client behind the proxy. Arguments are not validated
    here (the upstream's own errors pass through), and no ``finish`` tool is added; the upstream's
    own ``finish`` is never faulted (`check_plan` refuses a plan naming it).
    """

    def __init__(
        self,
        client: Client,
        plan: BasePlan,
        *,
        upstream: str,
        relay: ClientRelay | None = None,
        seed: int = 0,
        trace_dir: Path | None = None,
        time_scale: float = 1.0,
        expose_faults: bool = False,
        sessions: UpstreamSessions | None = None,
        call_timeout: float | None = None,
    ) -> None:
        check_plan(plan)
        #: The upstream connection: every client's (shared), or the start-up probe's (with ``sessions``).
        self.client = client
        self.upstream = upstream
        self.relay = relay or ClientRelay()
        #: One upstream session per client behind the proxy; None: all share ``client``.
        self.sessions = sessions
        #: Seconds any forwarded request may wait for the upstream (None: as long as its client does).
        self.call_timeout = call_timeout
        self.expose_faults = expose_faults
        self._episodes = EpisodeTable(default_seed=seed)
        #: Why the requests are no longer waited for (`stop_waiting`); the scopes of those in flight.
        self._stopped: str | None = None
        self._in_flight: set[anyio.CancelScope] = set()
        self.backend = UpstreamBackend(
            client if sessions is None else None, target=upstream, call_timeout=call_timeout
        )
        self.recorder = TraceRecorder(trace_dir, self._header)
        self.pipeline = CallPipeline(
            self.backend,
            plan,
            enforce_dependencies=False,
            recorder=self.recorder,
            time_scale=time_scale,
            validate_arguments=False,
        )
        info = client.server_info
        #: What the upstream said about itself at start (answers before a client's own session is up).
        self._capabilities = client.server_capabilities
        self._instructions = client.instructions
        initialized = client.session.initialize_result
        self._server_info = initialized.server_info if initialized is not None else None
        self.mcp: Server[Any] = Server(
            info.name if info else "mcp-resili-proxy",
            version=info.version if info else VERSION,
            instructions=client.instructions,
            get_tool_input_schema=self._input_schema,
        )
        #: Protocol faults: the same MCP layer as our own server's, outside the relay (`server.protocol`).
        self.protocol: ProtocolLayer | None = None
        if has_protocol_faults(self.pipeline.plan_dict):
            self.protocol = ProtocolLayer(
                self.pipeline, self._episodes, server_info=self.mcp.server_info_stamp
            )
            self.mcp.middleware.append(self.protocol.middleware)
        self.mcp.middleware.append(self._middleware)

    @classmethod
    async def create(cls, client: Client, plan: BasePlan, *, upstream: str, **options: Any) -> ProxyServer:
        """Build the proxy and learn the upstream's tools (all pages) before serving."""
        proxy = cls(client, plan, upstream=upstream, **options)
        if client.server_capabilities.tools is not None:
            cursor: str | None = None
            for _ in range(_MAX_START_PAGES):
                try:
                    page = await forward(client, "tools/list", {"cursor": cursor} if cursor else None)
                except ValidationError as exc:
                    raise UpstreamError(
                        f"{upstream}: its tools/list result breaks the MCP schema: "
                        f"{plain_validation_error(exc)}"
                    ) from None
                proxy.learn_tools(page)
                cursor = page.get("nextCursor") if isinstance(page.get("nextCursor"), str) else None
                if not cursor:
                    break
        return proxy

    @property
    def tools(self) -> list[str]:
        """Names of the upstream tools the proxy knows of."""
        return sorted(self.pipeline.specs)

    def learn_tools(self, listing: Mapping[str, Any]) -> None:
        """Register the tools of a ``tools/list`` result (raw JSON) with the pipeline."""
        tools = listing.get("tools")
        for tool in tools if isinstance(tools, list) else []:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                self.pipeline.specs[tool["name"]] = spec_of(tool)

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        spec = self.pipeline.specs.get(name)
        return spec.input_schema if spec is not None else None

    def _header(self, episode: Episode) -> TraceHeader:
        return TraceHeader(
            suite=PROXY_SUITE,
            task=None,
            episode=episode.id,
            seed=episode.seed,
            fault_plan={**self.pipeline.plan_dict, "upstream": self.upstream},
            fault_key=episode.fault_key,
            trial=episode.trial,
        )

    @property
    def handshake_only(self) -> bool:
        """Whether the proxy serves the handshake era only, as its upstream does (`serve_stdio` reads it)."""
        return not self.upstream_modern

    @property
    def upstream_modern(self) -> bool:
        """Whether the upstream speaks the 2026-07-28 era (a handshake-only one is met in that era)."""
        return self.sessions is None or self.sessions.upstream_modern

    async def _upstream_of(self, ctx: ServerRequestContext[Any]) -> tuple[Client, ClientRelay]:
        """The upstream connection serving the client of ``ctx``, and the relay back to that client."""
        if self.sessions is None:
            return self.client, self.relay
        session = await self.sessions.for_request(ctx)
        return session.client, session.relay

    async def _middleware(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        if ctx.request_id is None:  # a notification from the client
            await call_next(ctx)
            if self.sessions is not None:
                await self._notified(ctx)
                return None
            self.relay.seen(ctx)
            if ctx.method == "notifications/roots/list_changed" or (
                # The upstream asked for roots before this client was there: let it ask again.
                ctx.method == "notifications/initialized" and self.relay.client_has_roots(ctx)
            ):
                await self.client.session.send_notification(types.RootsListChangedNotification())
            return None
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and not self.upstream_modern:
            # The upstream speaks the handshake era only: answer as it would (the client falls back).
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found")
        if ctx.method in _LOCAL:
            result = await call_next(ctx)
            if ctx.method == "ping":
                return result
            if self.sessions is not None and ctx.method == "server/discover":
                # Answered from what the upstream said at start: a client's discovery probe is short,
                # and starting its upstream session may take longer. The session opens meanwhile.
                self.sessions.prepare(ctx)
                return self._handshake(ctx.method, result, self.client)
            client = (await self._upstream_of(ctx))[0] if self.sessions is not None else self.client
            return self._handshake(ctx.method, result, client)
        client, relay = await self._upstream_of(ctx)
        # What the upstream sends while it handles a request belongs to that request (its stream, over
        # HTTP); the request is given up once the client or the proxy leaves (`stop_waiting`).
        with relay.handling(ctx), self._given_up_when_stopped():
            if ctx.method == "tools/call":
                answer = await self._call_tool(ctx, client, relay)
            else:
                answer = await self._forward(ctx, client, relay)
            await relay.settle()
        if ctx.method == "tools/list":
            self.learn_tools(answer)
        elif ctx.method in ("resources/subscribe", "resources/unsubscribe"):
            uri = (ctx.params or {}).get("uri")
            if isinstance(uri, str):
                relay.subscribed(ctx, uri, subscribe=ctx.method == "resources/subscribe")
        return _for_client(ctx, answer)

    async def _notified(self, ctx: ServerRequestContext[Any]) -> None:
        """A client's notification, with one upstream session per client: passed on to its session."""
        if ctx.method in ("notifications/initialized", "notifications/cancelled"):
            # The session's own client handles both on its side of the connection (and cancels the
            # forwarded request when its caller is cancelled).
            if ctx.method == "notifications/initialized":
                session = await self.sessions.for_request(ctx) if self.sessions is not None else None
                if session is not None:
                    session.relay.seen(ctx)
            return
        if self.sessions is None:
            return
        session = await self.sessions.for_request(ctx)
        session.relay.seen(ctx)
        if ctx.method == "notifications/roots/list_changed":
            await session.client.session.send_notification(types.RootsListChangedNotification())

    async def _forward(
        self, ctx: ServerRequestContext[Any], client: Client, relay: ClientRelay
    ) -> dict[str, Any]:
        """A request other than ``tools/call``, sent upstream as it came; the upstream's raw result."""
        progress = relay.progress_relay(ctx)
        try:
            return await forward(
                client,
                ctx.method,
                upstream_params(ctx.params),
                on_progress=progress,
                timeout=self.call_timeout,
            )
        except ValidationError as exc:  # not the client's params: the upstream's answer is bad
            problem = f"the upstream's {ctx.method} result breaks the MCP schema"
            raise MCPError(types.INTERNAL_ERROR, f"{problem}: {plain_validation_error(exc)}") from None
        except MCPError as exc:
            if exc.code == types.REQUEST_TIMEOUT and self.call_timeout is not None:
                raise MCPError(
                    types.REQUEST_TIMEOUT,
                    f"the upstream did not answer {ctx.method} within {self.call_timeout:g} s "
                    "(the proxy's --call-timeout)",
                ) from None
            raise

    def stop_waiting(self, reason: str) -> None:
        """Give up the requests waiting on the upstream, now and from now on: nobody will wait for them.

        For when the client's input has ended (stdio: it closed our stdin; `INPUT_ENDED`) or the proxy
        is stopping (`SHUTTING_DOWN`). Each is cancelled upstream and answered with a
        ``CONNECTION_CLOSED`` error saying ``reason`` (a tool call is recorded as cancelled): a hung
        upstream must not hold the proxy up, and a client still reading gets a proper answer.
        """
        self._stopped = reason
        for scope in self._in_flight:
            scope.cancel()

    def input_ended(self) -> None:
        """`serve_stdio`'s hook: the client closed our stdin, so nobody waits for a hung upstream."""
        self.stop_waiting(INPUT_ENDED)

    @contextmanager
    def _given_up_when_stopped(self) -> Iterator[None]:
        if self._stopped is not None:
            raise MCPError(types.CONNECTION_CLOSED, f"{self._stopped}; the request was not sent")
        scope = anyio.CancelScope()
        self._in_flight.add(scope)
        try:
            with scope:
                yield
        finally:
            self._in_flight.discard(scope)
        if scope.cancelled_caught and self._stopped is not None:
            raise MCPError(types.CONNECTION_CLOSED, f"{self._stopped}; the request was cancelled")

    def _handshake(self, method: str, result: HandlerResult, client: Client) -> HandlerResult:
        """Our ``initialize``/``server/discover`` answer with the upstream's capabilities and identity."""
        if not isinstance(result, dict):
            return result
        if client is self.client:  # what the connection made at start said (it may be closed by now)
            capabilities, instructions, server_info = (
                self._capabilities,
                self._instructions,
                self._server_info,
            )
        else:
            capabilities, instructions = client.server_capabilities, client.instructions
            initialized = client.session.initialize_result
            server_info = initialized.server_info if initialized is not None else None
        answer = {
            **result,
            "capabilities": capabilities.model_dump(by_alias=True, mode="json", exclude_none=True),
        }
        if instructions is not None:
            answer["instructions"] = instructions
        if method == "initialize" and server_info is not None:
            answer["serverInfo"] = server_info.model_dump(by_alias=True, mode="json", exclude_none=True)
        return answer

    def _episode_of(self, ctx: ServerRequestContext[Any]) -> Episode:
        """The episode of a call: the one it names, its session or connection, else its client's own.

        A stateless client that names none plays one episode per client (its cookie; clients that
        keep no cookie cannot be told apart and share one), keyed ``untasked/K`` in arrival order.
        """
        identity = client_identity(ctx)
        try:
            request = episode_request(ctx)
        except NoEpisodeError:
            request = EpisodeRequest(id=f"client-{identity.channel or 'anonymous'}")
        return self._episodes.get(request, owner=identity)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], client: Client, relay: ClientRelay
    ) -> dict[str, Any]:
        params = dict(ctx.params or {})
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str):
            raise MCPError(types.INVALID_PARAMS, "tools/call needs a string 'name'")
        if arguments is not None and not isinstance(arguments, dict):
            raise MCPError(types.INVALID_PARAMS, "tools/call 'arguments' must be an object")
        if name not in self.pipeline.specs:  # not listed (yet): still faulted and recorded
            self.pipeline.specs[name] = spec_of({"name": name})
        try:
            episode = self._episode_of(ctx)
        except EpisodeRefusedError as exc:
            return {
                "content": [{"type": "text", "text": f"Error {exc.reason}: {exc.error.message}"}],
                "isError": True,
            }
        forwarded = upstream_params(ctx.params) or {}
        token = FORWARDED_CALL.set(ForwardedCall(forwarded, relay.progress_relay(ctx), client))
        try:
            if name == FINISH_TOOL:
                event, finished = await self._finish(episode, arguments or {}, ctx.meta)
                outcome: ToolOutcome | None = finished
            else:
                event, outcome = await self.pipeline.call_with_outcome(episode, name, arguments, ctx.meta)
        finally:
            FORWARDED_CALL.reset(token)
        note_call(episode, event)
        return render(event, outcome, expose_faults=self.expose_faults)

    async def _finish(
        self, episode: Episode, arguments: dict[str, Any], meta: Mapping[str, Any] | None
    ) -> tuple[ToolCallEvent, ToolOutcome]:
        """``finish`` goes to the upstream untouched: no fault decision, no call ordinal, recorded."""
        spec = self.pipeline.specs[FINISH_TOOL]
        async with episode.lock:  # after the episode's calls in flight, as every call is
            outcome = await self.backend.run(spec, arguments, episode.tool_state, meta)
        if outcome.is_error:
            result = {"code": outcome.error_code, "message": outcome.message, **outcome.details}
        else:
            result = dict(outcome.structured or {})
        event = await self.pipeline.record_outside(
            episode, FINISH_TOOL, arguments, result, error=outcome.is_error
        )
        return event, outcome


#: What a 2026-07-28 result must carry that a handshake-era upstream never sends (never cached: the
#: upstream's answers may change at any time). The version's own model drops what does not apply.
_MODERN_DEFAULTS = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}


def _for_client(ctx: ServerRequestContext[Any], result: dict[str, Any]) -> dict[str, Any]:
    """The upstream's (handshake-era) result as the client's protocol version has it."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return result
    try:
        shaped = protocol.serialize_server_result(
            ctx.method, ctx.protocol_version, {**_MODERN_DEFAULTS, **result}
        )
    except KeyError:  # not a core method: the upstream's own shape
        shaped = dict(result)
    except ValidationError as exc:
        raise MCPError(
            types.INTERNAL_ERROR,
            f"the upstream's {ctx.method} result does not fit {ctx.protocol_version}: {exc}",
        ) from None
    shaped.setdefault("resultType", "complete")
    return shaped


def _keeps_result(fault: object) -> bool:
    """A protocol fault that changes only how the upstream's answer travels (not the answer itself)."""
    return isinstance(fault, ProtocolFault) and type(fault).apply is ProtocolFault.apply


def render(
    event: ToolCallEvent, outcome: ToolOutcome | None, *, expose_faults: bool = False
) -> dict[str, Any]:
    """The raw result the agent sees: the upstream's own while untouched, else our rendering.

    With ``expose_faults`` the proxy's trace event (fault decision included) is added to ``_meta``.
    """
    upstream = outcome.upstream if outcome is not None else None
    # A fault that left the outcome as the upstream gave it (``high_latency``: the same result, late)
    # keeps the upstream's own result: rebuilt, it would differ and tell the agent a fault fired.
    untouched = event.fault is None or _keeps_result(event.fault) or upstream is not None
    if untouched and isinstance(upstream, MCPError):
        raise upstream  # the upstream's JSON-RPC error, as it sent it (recorded in the trace)
    if untouched and isinstance(upstream, dict):
        result = dict(upstream)
    elif event.is_error:
        result = {"content": [{"type": "text", "text": result_text(event)}], "isError": True}
    else:
        structured = event.result or {}
        result = {
            "content": [{"type": "text", "text": json.dumps(structured, sort_keys=True)}],
            "structuredContent": structured,
        }
    if expose_faults:
        upstream_meta = result.get("_meta")
        kept = upstream_meta if isinstance(upstream_meta, dict) else {}
        result["_meta"] = {**kept, META_EVENT: event_to_dict(event)}
    return result
