"""The MCP server: a suite's tools behind the call pipeline, over stdio, Streamable HTTP or in memory."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types import methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field, ValidationError

from mcp_resili.constants import (
    DISCOVERY_TOOLS,
    FINISH_TOOL,
    HANDLE_ARGUMENT,
    META_EVENT,
    START_TOOL,
    TRACE_METHOD,
    VERSION,
)
from mcp_resili.errors import plain_validation_error
from mcp_resili.faults import BasePlan, has_protocol_faults
from mcp_resili.faults.rules import NoFaults
from mcp_resili.registry.environment import EpisodeEnvironment
from mcp_resili.registry.suites import Suite, UnknownTaskError
from mcp_resili.server.backend import SimulatedBackend
from mcp_resili.server.budget import MemoryBudget
from mcp_resili.server.discovery import INFO_SPEC, SEARCH_SPEC, Discovery, DiscoveryError
from mcp_resili.server.episode import Episode
from mcp_resili.server.episodes import (
    ClientIdentity,
    EpisodeRefusedError,
    EpisodeRequest,
    EpisodeTable,
    NoEpisodeError,
    client_identity,
    episode_request,
    looks_like_handle,
    named_episode,
)
from mcp_resili.server.handles import (
    handle_tools,
    no_handle_text,
    split_handle,
    start_tool,
    started_text,
)
from mcp_resili.server.listen import ListenStreams
from mcp_resili.server.logs import EpisodeLog
from mcp_resili.server.pipeline import CallPipeline, result_text
from mcp_resili.server.protocol import ProtocolLayer, note_call
from mcp_resili.server.recorder import TraceRecorder
from mcp_resili.server.resources import TaskResources
from mcp_resili.server.strings import SCOPE_KEY, lone_surrogate_problem
from mcp_resili.server.wire import modern_tool_result, tool_result
from mcp_resili.tasks.model import Task
from mcp_resili.tools import ToolSpec
from mcp_resili.tools.validator import argument_problems, compiled
from mcp_resili.trace import EndStateEvent, TraceEvent, TraceHeader, event_to_dict, event_to_meta
from mcp_resili.trace.codes import (
    DEPENDENCY_NOT_MET,
    INVALID_INPUT,
    RESPONSE_SCHEMA_MISMATCH,
    TOOL_CRASHED,
    TOOL_TIMEOUT,
)

logger = logging.getLogger(__name__)

PROMPT_PAGE_SIZE = 100
#: Seconds a tool call may run before it is answered `TOOL_TIMEOUT` (simulators take microseconds;
#: this bounds a runaway call, it is no part of any fault).
DEFAULT_CALL_TIME_LIMIT = 10.0


class EpisodeTraceParams(types.RequestParams):
    """Params of `TRACE_METHOD`: the episode to close (default: the request's own episode)."""

    episode: str | None = None


class EpisodeTraceResult(types.Result):
    """Result of `TRACE_METHOD`: the closed episode's trace header and events (JSON, as in a trace file).

    ``header`` is None (and ``events`` empty) for an episode that never made a call.
    """

    episode: str
    header: dict[str, Any] | None = None
    events: list[dict[str, Any]] = Field(default_factory=list)


_FINISH_SPEC = types.Tool(
    name=FINISH_TOOL,
    description=(
        "Call this exactly once when you are done: status 'completed' when the task is done, "
        "'aborted' when it cannot be done. Give a one-paragraph summary of the result or of what failed."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "status": {"enum": ["completed", "aborted"]},
            "summary": {"type": "string"},
        },
        "required": ["status", "summary"],
        "additionalProperties": False,
    },
    annotations=types.ToolAnnotations(read_only_hint=True),
    _meta={"mcp-resili/errors": [INVALID_INPUT]},
)


#: The published schema of ``finish``, which its arguments must meet like any tool's.
_FINISH_CHECK = compiled(_FINISH_SPEC.input_schema)


def _lone_surrogate_of(ctx: ServerRequestContext[Any]) -> str | None:
    """Where `LoneSurrogateGuard` found a lone surrogate in this HTTP call's arguments, if it did."""
    scope = getattr(ctx.request, "scope", None)
    found = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, str) else None


class ResiliServer:
    """Serves one suite; every ``tools/call`` goes through one `CallPipeline`.

    Results carry no fault decision (``expose_faults`` adds the recorded event to each result's
    ``_meta``, for debugging only: a model that reads it is told which calls were faulted). The
    recorded events reach our runner through the server object (in process) or `TRACE_METHOD`.
    """

    def __init__(
        self,
        suite: Suite,
        plan: BasePlan,
        *,
        seed: int = 0,
        task: str | None = None,
        trace_dir: Path | None = None,
        time_scale: float = 1.0,
        episode: str | None = None,
        trial: int | None = None,
        expose_faults: bool = False,
        call_time_limit: float | None = DEFAULT_CALL_TIME_LIMIT,
        environment: EpisodeEnvironment | None = None,
        max_turns: int | None = None,
        warn_default_trial: bool = False,
        hand_over_events: bool = True,
        memory: MemoryBudget | None = None,
        client_seeds: bool = True,
    ) -> None:
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        if (environment is None) != (suite.environment is None):
            raise ValueError(
                f"suite {suite.name!r}: give the server the suite's entered environment, and only it"
            )
        self.suite = suite
        #: The suite's real servers and per-episode state (entered by the caller), or None.
        self.environment = environment
        self.seed = seed
        self.default_task = suite.task(task) if task is not None else None
        #: The episode id of a stdio or in-memory connection that names none (``serve --episode``).
        self.connection_episode = episode
        self.expose_faults = expose_faults
        #: The call budget written into every trace header (``serve --max-turns``; None: the task's).
        self.max_turns = max_turns
        #: Say once on stderr when a faulted episode plays trial 0 only because nothing named a trial.
        self._warn_default_trial = warn_default_trial and not isinstance(plan, NoFaults)
        # In process the runner takes each call's events (`take_events`); a served episode's go to its
        # trace file as they happen, read back by `TRACE_METHOD` (`serve`: ``hand_over_events=False``).
        self.recorder = TraceRecorder(
            trace_dir, self._header, hand_over=hand_over_events, spool=not hand_over_events, budget=memory
        )
        self.pipeline = CallPipeline(
            environment if environment is not None else SimulatedBackend(suite.library),
            plan,
            enforce_dependencies=suite.enforce_dependencies,
            recorder=self.recorder,
            time_scale=time_scale,
            initial_state=suite.initial_state,
            call_time_limit=call_time_limit,
            dependency_gate=suite.dependency_gate,
        )
        self.episodes = EpisodeTable(default_seed=seed, trial=trial, client_seeds=client_seeds)
        self.recorder.account.attach(self.episodes)
        specs = environment.specs if environment is not None else list(suite.library)
        clashing = [s.name for s in specs if HANDLE_ARGUMENT in (s.input_schema.get("properties") or {})]
        if clashing:
            raise ValueError(
                f"suite {suite.name!r}: tools {clashing} take an argument named {HANDLE_ARGUMENT!r}, "
                "which stateless clients use for their episode handle"
            )
        self._tool_by_name = {spec.name: self._tool(spec) for spec in specs}
        self._tools = [*self._tool_by_name.values(), _FINISH_SPEC]
        self.discovery = Discovery(suite.library) if suite.discovery else None
        if self.discovery is not None:
            self._tools += [SEARCH_SPEC, INFO_SPEC]
        #: ``start_episode``, offered to clients that name no episode (handle mode).
        self._start_tool = start_tool(
            suite=suite.name,
            fixed_task=self.default_task.id if self.default_task is not None else None,
            variants=suite.variants,
            client_seeds=client_seeds,
        )
        #: Episodes started by ``start_episode`` that named no task: the next task offered.
        self._next_task = 0
        self.mcp: Server[Any] = Server(
            "mcp-resili",
            version=VERSION,
            # Nothing about faults or alternatives: whether the agent is told is the prompt variant's
            # choice (e.g. ToolMaze's hint), and an agent that reads instructions would always be told.
            instructions=f"mcp-resili: the tools of the {suite.name!r} benchmark suite.",
            on_list_tools=self._list_tools,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
            on_completion=self._complete,
            on_subscriptions_listen=self._listen,
        )
        #: ``subscriptions/listen`` streams (2026-07-28): a change in one client's episode is announced
        #: to that client only.
        self.listening = ListenStreams(self.episodes.max_episodes)
        #: Each task's prompt and public task file as read-only resources; completion of their names.
        self.resources = TaskResources(suite, self.default_task)
        #: Log messages for the clients that ask (``logging/setLevel``, or 2026's per-request opt-in).
        self.log = EpisodeLog()
        self.mcp.add_request_handler("logging/setLevel", types.SetLevelRequestParams, self.log.set_level)
        self.mcp.add_request_handler("tools/call", types.CallToolRequestParams, self._call_tool)
        self.mcp.add_request_handler(TRACE_METHOD, EpisodeTraceParams, self._episode_trace)
        #: The MCP layer of protocol faults, installed only when the plan holds any (`server.protocol`).
        self.protocol: ProtocolLayer | None = None
        if has_protocol_faults(self.pipeline.plan_dict):
            self.protocol = ProtocolLayer(
                self.pipeline,
                self.episodes,
                server_info=self.mcp.server_info_stamp,
                connection_episode=lambda: self.connection_episode,
                resolve=self.peek_episode,
                publish=self.listening.tools_changed,
                revoke_handle=lambda episode, unknown: self.episodes.revoke_handle(episode.id, unknown),
            )
            self.mcp.middleware.append(self.protocol.middleware)
        self._server_info = self.mcp.server_info_stamp
        self.mcp.middleware.append(self.answer_tools_call)  # innermost: the protocol layer wraps it

    # --- episodes --------------------------------------------------------------------------------

    def _header(self, episode: Episode) -> TraceHeader:
        return TraceHeader(
            suite=self.suite.name,
            task=episode.task.id if episode.task else None,
            episode=episode.id,
            seed=episode.seed,
            fault_plan=self.pipeline.plan_dict,
            fault_key=episode.fault_key,
            trial=episode.trial,
            max_turns=self.max_turns,
        )

    def episode(self, request: EpisodeRequest, owner: ClientIdentity | None = None) -> Episode:
        """The state of the episode ``request`` names, created on first use (belonging to ``owner``).

        `EpisodeRefusedError` when ``owner`` may not use it (another client's, a bad handle).
        """
        try:
            episode = self.episodes.get(
                request,
                lambda: self.suite.task(request.task) if request.task else self.default_task,
                owner=owner,
            )
        except UnknownTaskError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        defaulted = request.trial is None and request.fault_key is None and self.episodes.trial is None
        if self._warn_default_trial and defaulted and episode.trial == 0:
            self._warn_default_trial = False  # one line per process
            print(
                f"mcp-resili: warning: episode {episode.id!r} plays trial 0 (fault key "
                f"{episode.fault_key}) because no --trial was given: every fresh server meets the "
                "same fault draws for it; pass --trial K, or name the trial (the episode's _meta, or "
                "start_episode's trial)",
                file=sys.stderr,
            )
        return episode

    def route(self, ctx: ServerRequestContext[Any]) -> tuple[EpisodeRequest, ClientIdentity | None] | None:
        """The episode a request belongs to and who must own it; None in handle mode.

        Handle mode: a stateless HTTP request that names no episode on a server that pins none. The
        pinned or connection episode (``serve --episode``) is everyone's who reaches it: no owner.
        """
        try:
            request = episode_request(ctx, self.connection_episode, pinned=True)
        except NoEpisodeError:
            return None
        pinned = self.connection_episode is not None and request.id == self.connection_episode
        if pinned and named_episode(ctx) is None:
            return request, None
        return request, client_identity(ctx)

    def peek_episode(self, ctx: ServerRequestContext[Any]) -> Episode | None:
        """The live episode of a request if its client may use it; never creates one.

        In handle mode a call's episode is its handle's; any other request's is the one its client
        (told apart by its cookie) started last.
        """
        try:
            routed = self.route(ctx)
        except MCPError:
            return None  # a malformed episode: the handler answers it
        if routed is not None:
            return self.episodes.owned(*routed)
        identity = client_identity(ctx)
        if ctx.method == "tools/call":
            arguments = (ctx.params or {}).get("arguments")
            handle = arguments.get(HANDLE_ARGUMENT) if isinstance(arguments, dict) else None
            if not looks_like_handle(handle):
                return None
            return self.episodes.owned(EpisodeRequest(id=str(handle)), identity)
        return self.episodes.latest(identity)

    def take_events(self, episode_id: str) -> list[TraceEvent]:
        """Events recorded for a live episode since the previous call (the in-process runner's view)."""
        live = self.episodes.peek(episode_id)
        return [] if live is None else self.recorder.take(live)

    def close_episode(self, episode_id: str) -> Episode | None:
        """Close an episode: later calls naming it are refused. Returns it, or None if it never started."""
        episode = self.episodes.close(episode_id)
        if episode is not None:
            self.recorder.account.forget(episode)
        return episode

    async def _episode_trace(
        self, ctx: ServerRequestContext[Any], params: EpisodeTraceParams
    ) -> EpisodeTraceResult:
        """`TRACE_METHOD`: close the episode, then hand over its header and events.

        Only its owner may: it names the episode by id (or handle) as any request does.
        """
        if params.episode is not None:
            request: EpisodeRequest | None = EpisodeRequest(id=params.episode)
            owner: ClientIdentity | None = client_identity(ctx)
        else:
            routed = self.route(ctx)
            if routed is None:
                raise NoEpisodeError
            request, owner = routed
        assert request is not None
        live = self.episodes.owned(request, owner)
        if live is None and self.episodes.peek(request.id) is not None:
            raise EpisodeRefusedError("NOT_YOUR_EPISODE", f"episode {request.id!r} belongs to another client")
        episode_id = live.id if live is not None else request.id
        episode = self.close_episode(episode_id)
        if episode is None:
            # Closed already (evicted, expired): its trace file, if it was written, still tells it.
            written = None if self.recorder.hand_over else self.recorder.written(episode_id)
            if written is None:
                return EpisodeTraceResult(episode=episode_id)
            return EpisodeTraceResult(episode=episode_id, header=written[0], events=written[1])
        async with episode.lock:  # a call still running finishes (and is recorded) first
            if self.environment is not None:
                self._observed(episode, await self.environment.end_episode(episode))
            if not self.recorder.hand_over:  # read back from its trace file, never held in memory
                written = self.recorder.written(episode_id, episode)
                header = self._header(episode).model_dump(mode="json")
                return EpisodeTraceResult(
                    episode=episode_id,
                    header=header if written is None else written[0],
                    events=[] if written is None else written[1],
                )
            return EpisodeTraceResult(
                episode=episode_id,
                header=self._header(episode).model_dump(mode="json"),
                events=[event_to_dict(e) for e in self.recorder.take(episode)],
            )

    # --- MCP handlers ----------------------------------------------------------------------------

    def _declared_errors(self, spec: ToolSpec) -> list[str]:
        """The tool's own error codes plus those the pipeline may answer with for it."""
        codes = [*spec.error_codes]
        pipeline_codes = [INVALID_INPUT, TOOL_CRASHED]
        if self.pipeline.call_time_limit is not None:
            pipeline_codes.append(TOOL_TIMEOUT)
        if spec.output_schema is not None:
            pipeline_codes.append(RESPONSE_SCHEMA_MISMATCH)
        if self.suite.enforce_dependencies and (spec.dependencies or self.suite.dependency_gate):
            pipeline_codes.append(DEPENDENCY_NOT_MET)
        codes.extend(code for code in pipeline_codes if code not in codes)
        return codes

    def _meta(self, event: TraceEvent) -> dict[str, Any] | None:
        """A result's ``_meta``: the recorded event with ``expose_faults``, else nothing."""
        return {META_EVENT: event_to_meta(event)} if self.expose_faults else None

    def _tool(self, spec: ToolSpec) -> types.Tool:
        return types.Tool(
            name=spec.name,
            description=spec.description,
            input_schema=spec.input_schema,
            output_schema=spec.output_schema,
            annotations=types.ToolAnnotations(read_only_hint=spec.access == "read"),
            _meta={
                "mcp-resili/errors": self._declared_errors(spec),
                "mcp-resili/dependencies": list(spec.dependencies),
            },
        )

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        routed = self.route(ctx)
        if routed is None:  # a stateless client naming no episode: handle mode
            return types.ListToolsResult(tools=handle_tools(self._tools, self._start_tool))
        if self.environment is None:
            return types.ListToolsResult(tools=self._tools)
        # Real servers: an episode of a task is offered its own servers' tools (and so sets them up).
        try:
            episode = self.episode(*routed)
        except EpisodeRefusedError:
            return types.ListToolsResult(tools=self._tools)
        if episode.task is None:
            return types.ListToolsResult(tools=self._tools)
        await self.environment.open_episode(episode)
        own = [self._tool_by_name[spec.name] for spec in self.environment.episode_tools(episode.task)]
        return types.ListToolsResult(tools=[*own, _FINISH_SPEC])

    async def end_episode(self, episode_id: str) -> list[TraceEvent]:
        """Close an episode; with real servers, first observe its end state (recorded and returned)."""
        episode = self.close_episode(episode_id)
        if episode is None or self.environment is None:
            return []
        async with episode.lock:  # a call still running finishes (and is recorded) first
            return self._observed(episode, await self.environment.end_episode(episode))

    def _observed(self, episode: Episode, observations: dict[str, Any] | None) -> list[TraceEvent]:
        if observations is None:
            return []
        event = EndStateEvent(episode=episode.id, seq=episode.next_seq(), observations=observations)
        self.recorder.record(episode, event)
        return [event]

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        """``tools/call`` by the SDK's handler path, which shapes the result for the connection's version."""
        return {**await self._tool_result(ctx, params.name, params.arguments), "resultType": "complete"}

    async def answer_tools_call(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        """Answer a 2026-era ``tools/call`` with its wire form directly (the innermost middleware).

        Our results are built in wire form already; the handler path would validate them against the
        protocol surface and dump them again. The request is still checked against the surface first
        (a bad one, of any version, gets ``-32602`` naming the field), and the answer is exactly the
        one that path gives (`tests/test_wire_form.py`): same keys, same order, the ``serverInfo``
        stamp. Other versions and methods take the SDK's path.
        """
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params
        try:
            methods.validate_client_request(ctx.method, ctx.protocol_version, params)
        except ValidationError as exc:
            # The SDK's own answer says only "Invalid request parameters": name what is wrong.
            raise MCPError(
                types.INVALID_PARAMS, f"Invalid request parameters: {plain_validation_error(exc)}"
            ) from None
        except (KeyError, ValueError):  # a version the surface does not know: the SDK answers
            return await call_next(ctx)
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return await call_next(ctx)
        return await self.answer_checked_call(ctx)

    async def answer_checked_call(
        self, ctx: ServerRequestContext[Any], *, in_process: bool = False
    ) -> dict[str, Any]:
        """`answer_tools_call` past its checks: a 2026-era ``tools/call`` whose request passes the surface.

        ``in_process``: our own client built the request in this process (`CallPipeline.call_with_outcome`).
        """
        params = ctx.params
        assert params is not None  # the surface requires a name
        result = await self._tool_result(ctx, params["name"], params.get("arguments"), in_process=in_process)
        return modern_tool_result(result, self._server_info)

    async def _tool_result(
        self,
        ctx: ServerRequestContext[Any],
        name: str,
        arguments: dict[str, Any] | None,
        *,
        in_process: bool = False,
    ) -> dict[str, Any]:
        """A call's result in wire form (``content``, ``isError``, ``structuredContent``, ``_meta``).

        Logged (for clients that asked) as the client sees it: the tool, and ok or error.
        """
        result = await self._answer(ctx, name, arguments, in_process=in_process)
        await self.log.log(
            ctx,
            "info" if name in (START_TOOL, FINISH_TOOL) else "debug",
            {"tool": name, "outcome": "error" if result.get("isError") else "ok"},
        )
        return result

    async def _answer(
        self,
        ctx: ServerRequestContext[Any],
        name: str,
        arguments: dict[str, Any] | None,
        *,
        in_process: bool = False,
    ) -> dict[str, Any]:
        """A call's result in wire form, for its episode (handle mode included)."""
        routed = self.route(ctx)
        try:
            if routed is None:
                if name == START_TOOL:
                    return await self._start_episode(ctx, arguments or {})
                handle, arguments = split_handle(arguments)
                if not isinstance(handle, str) or not handle:
                    return tool_result(no_handle_text(name), True)
                episode = self.episode(EpisodeRequest(id=handle), client_identity(ctx))
            else:
                episode = self.episode(*routed)
        except EpisodeRefusedError as exc:
            return tool_result(f"Error {exc.reason}: {exc.error.message}", True)
        if name == FINISH_TOOL or (self.discovery is not None and name in DISCOVERY_TOOLS):
            refused = await self.pipeline.refusal(episode, name, arguments or {})
            if refused is not None:  # over a memory budget (`server.budget`)
                return tool_result(result_text(refused), True, None, self._meta(refused))
        if name == FINISH_TOOL:
            return await self._finish(episode, arguments or {})
        if self.discovery is not None and name in DISCOVERY_TOOLS:
            return await self._discover(episode, name, dict(arguments or {}))
        surrogate = _lone_surrogate_of(ctx)
        if surrogate is not None:  # over HTTP (`LoneSurrogateGuard`): recorded and refused
            refused = await self.pipeline.reject(
                episode, name, arguments or {}, lone_surrogate_problem(name, surrogate)
            )
            return tool_result(result_text(refused), True, None, self._meta(refused))
        if self.environment is not None:
            await self.environment.open_episode(episode)
        event, outcome = await self.pipeline.call_with_outcome(
            episode, name, arguments, in_process=in_process
        )
        note_call(episode, event)
        text = (
            self.environment.result_text(event, outcome)
            if self.environment is not None
            else result_text(event, outcome)
        )
        return tool_result(
            text,
            event.is_error,
            None if event.is_error else event.result,
            self._meta(event),
        )

    async def _listen(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """``subscriptions/listen``: the client's stream of list changes (its episodes' catalogues)."""
        return await self.listening.listen(ctx, params)

    async def _start_episode(
        self, ctx: ServerRequestContext[Any], arguments: dict[str, Any]
    ) -> dict[str, Any]:
        """``start_episode``: open an episode under a fresh handle and give its task (never recorded)."""
        task_id = arguments.get("task")
        trial = arguments.get("trial")
        seed = arguments.get("seed")
        variant = arguments.get("variant") or "baseline"
        problem = self._start_problem(task_id, trial, seed, variant, arguments)
        if problem is not None:
            return tool_result(f"Error INVALID_INPUT: {problem}", True)
        try:
            task = self._task_to_start(task_id)
            prompt = self.suite.prompt(task, variant) if task is not None else None
        except (UnknownTaskError, ValueError) as exc:
            return tool_result(f"Error INVALID_INPUT: {exc}", True)
        identity = client_identity(ctx)
        prefix = task.id if task is not None else "untasked"
        request = EpisodeRequest(
            id=f"{prefix}-{self.episodes.mint.mint('episode', '')[:12]}",
            task=task.id if task is not None else None,
            trial=trial,
            seed=seed,
        )
        try:
            handle, episode = self.episodes.start(request, task, identity)
        except EpisodeRefusedError as exc:
            return tool_result(f"Error {exc.reason}: {exc.error.message}", True)
        if episode.seq > 0 and self.protocol is not None:
            # A fault had revoked this episode's handle: the client started again and continues it.
            await self.protocol.resumed(episode)
        text = started_text(handle, episode.task.id if episode.task else None, episode.trial or 0, prompt)
        structured = {
            HANDLE_ARGUMENT: handle,
            "task": episode.task.id if episode.task else None,
            "trial": episode.trial,
            "prompt": prompt,
        }
        return tool_result(text, False, structured)

    def _start_problem(
        self, task_id: object, trial: object, seed: object, variant: object, arguments: dict[str, Any]
    ) -> str | None:
        """What is wrong with ``start_episode``'s arguments, or None."""
        known = set(self._start_tool.input_schema.get("properties") or {})
        unknown = sorted(set(arguments) - known - {HANDLE_ARGUMENT})
        if "seed" in unknown:
            return "this server decides seeds itself: leave 'seed' out"
        if unknown:
            return f"start_episode takes {', '.join(sorted(known)) or 'no arguments'}; got {unknown}"
        if task_id is not None and not isinstance(task_id, str):
            return f"'task' must be a task id (a string), got {task_id!r:.60}"
        if trial is not None and (isinstance(trial, bool) or not isinstance(trial, int) or trial < 0):
            return f"'trial' must be a non-negative integer, got {trial!r:.60}"
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            return f"'seed' must be an integer, got {seed!r:.60}"
        if not isinstance(variant, str):
            return f"'variant' must be a string, got {variant!r:.60}"
        return None

    def _task_to_start(self, task_id: str | None) -> Task | None:
        """The task a new handle-mode episode plays: the one named, the server's, else the next one."""
        if self.default_task is not None:
            if task_id is not None and task_id != self.default_task.id:
                raise ValueError(f"this server plays task {self.default_task.id} only; leave 'task' out")
            return self.default_task
        if task_id is not None:
            return self.suite.task(task_id)
        tasks = self.suite.default_tasks or self.suite.tasks
        if not tasks:
            return None
        task = tasks[self._next_task % len(tasks)]
        self._next_task += 1
        return task

    async def _discover(self, episode: Episode, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A discovery call, answered and recorded (it costs no call of the budget, but it happened)."""
        assert self.discovery is not None
        try:
            text, found = self.discovery.call(name, arguments)
        except DiscoveryError as exc:
            refused = await self.pipeline.reject(episode, name, arguments, str(exc))
            return tool_result(result_text(refused), True, None, self._meta(refused))
        event = await self.pipeline.record_outside(episode, name, arguments, found)
        return tool_result(text, False, found, self._meta(event))

    async def _finish(self, episode: Episode, arguments: dict[str, Any]) -> dict[str, Any]:
        problem = argument_problems(_FINISH_CHECK, arguments)
        if problem is not None:
            message = f"finish needs status 'completed' or 'aborted' and a string summary ({problem})"
            rejected = await self.pipeline.reject(episode, FINISH_TOOL, arguments, message)
            return tool_result(result_text(rejected), True, None, self._meta(rejected))
        status = arguments["status"]
        event = await self.pipeline.finish(episode, status, arguments["summary"])
        return tool_result(f"Recorded: episode {status}.", False, None, self._meta(event))

    def _prompt(self, task: Task) -> types.Prompt:
        """A task as an MCP prompt (its id is the prompt's name)."""
        return types.Prompt(
            name=task.id,
            title=f"{task.task_type} ({task.complexity})",
            description=task.description,
            arguments=[
                types.PromptArgument(
                    name="variant",
                    description=f"One of: {', '.join(self.suite.variants)}"
                    + (" (flawed:TYPE[:SEVERITY[:METHOD]])" if "flawed" in self.suite.variants else ""),
                    required=False,
                )
            ],
        )

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        """The suite's tasks as prompts, paginated; a server bound to a task offers that task only."""
        if self.default_task is not None:
            # `serve --task T`: picking any other prompt would bind the episode to another task.
            return types.ListPromptsResult(prompts=[self._prompt(self.default_task)])
        tasks = self.suite.tasks
        try:
            start = int(params.cursor) if params and params.cursor else 0
        except ValueError:
            raise MCPError(
                types.INVALID_PARAMS, f"invalid cursor {params.cursor if params else None!r}"
            ) from None
        page = tasks[start : start + PROMPT_PAGE_SIZE]
        end = start + len(page)
        prompts = [self._prompt(t) for t in page]
        return types.ListPromptsResult(prompts=prompts, next_cursor=str(end) if end < len(tasks) else None)

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        try:
            task = self.suite.task(params.name)
            text = self.suite.prompt(task, (params.arguments or {}).get("variant") or "baseline")
        except (UnknownTaskError, ValueError) as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        # A person picking a task in their client binds their (not yet started) episode to it. A
        # stateless request belongs to no episode: it just reads the prompt.
        routed = self.route(ctx)
        if routed is not None:
            self.episodes.bind_task(self.episode(*routed), task)
        return types.GetPromptResult(
            description=task.description,
            messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))],
        )

    # --- resources and completion ---------------------------------------------------------------

    def _episode_task(self, ctx: ServerRequestContext[Any]) -> Task | None:
        """The task of the request's live episode, if it has one (nothing is created or bound)."""
        episode = self.peek_episode(ctx)
        return episode.task if episode is not None else None

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        """The episode's task's resources; with no task, every task's, paginated."""
        return self.resources.listing(self._episode_task(ctx), params.cursor if params else None)

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return self.resources.templates()

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        """A task resource; reading changes nothing (no call, no draw, no task bound)."""
        try:
            return self.resources.read(str(params.uri))
        except (ValueError, UnknownTaskError) as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None

    async def _complete(
        self, ctx: ServerRequestContext[Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        """Completion of a prompt's ``variant`` and of a task resource template's ``task``."""
        return self.resources.complete(params)
