"""The MCP server: a suite's tools behind the call pipeline, over stdio, Streamable HTTP or in memory."""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

import mcp_resili
from mcp_resili import DISCOVERY_TOOLS, META_EPISODE, META_EVENT
from mcp_resili.faults import FaultPlan
from mcp_resili.server.discovery import INFO_SPEC, SEARCH_SPEC, Discovery
from mcp_resili.server.pipeline import CallPipeline, Episode, TraceRecorder, result_text
from mcp_resili.suites import Suite, UnknownTaskError
from mcp_resili.trace import TraceHeader, event_to_dict

logger = logging.getLogger(__name__)

FINISH_TOOL = "finish"
#: Header an HTTP client may send to name its episode (when it cannot set ``_meta``).
EPISODE_HEADER = "x-mcp-resili-episode"
PROMPT_PAGE_SIZE = 100
#: Episodes kept in memory at once; the oldest is dropped first (its trace file is complete).
MAX_EPISODES = 10_000

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
)


@dataclass(frozen=True)
class EpisodeRequest:
    """What a client said (or we inferred) about the episode a call belongs to."""

    id: str
    task: str | None = None
    fault_key: str | None = None
    seed: int | None = None


class ResiliServer:
    """Serves one suite; every ``tools/call`` goes through one `CallPipeline`."""

    def __init__(
        self,
        suite: Suite,
        plan: FaultPlan,
        *,
        seed: int = 0,
        task: str | None = None,
        trace_dir: Path | None = None,
        time_scale: float = 1.0,
    ) -> None:
        self.suite = suite
        self.seed = seed
        self.default_task = suite.task(task) if task is not None else None
        self.recorder = TraceRecorder(trace_dir, self._header)
        self.pipeline = CallPipeline(
            suite.library,
            plan,
            enforce_dependencies=suite.enforce_dependencies,
            recorder=self.recorder,
            time_scale=time_scale,
        )
        self._episodes: OrderedDict[str, Episode] = OrderedDict()
        self._tools = [self._tool(spec.name) for spec in suite.library] + [_FINISH_SPEC]
        self.discovery = Discovery(suite.library) if suite.discovery else None
        if self.discovery is not None:
            self._tools += [SEARCH_SPEC, INFO_SPEC]
        self.mcp: Server[Any] = Server(
            "mcp-resili",
            version=mcp_resili.__version__,
            instructions=(
                f"mcp-resili suite {suite.name!r}: {suite.description} Some tool calls fail on purpose."
            ),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
        )

    # --- episodes --------------------------------------------------------------------------------

    def _header(self, episode: Episode) -> TraceHeader:
        return TraceHeader(
            suite=self.suite.name,
            task=episode.task.id if episode.task else None,
            episode=episode.id,
            seed=episode.seed,
            fault_plan=self.pipeline.plan_dict,
            fault_key=episode.fault_key,
        )

    def episode(self, request: EpisodeRequest) -> Episode:
        """The state of the episode ``request`` names, created on first use."""
        episode = self._episodes.get(request.id)
        if episode is None:
            task = self.suite.task(request.task) if request.task else self.default_task
            episode = Episode(
                id=request.id,
                task=task,
                fault_key=request.fault_key or request.id,
                seed=self.seed if request.seed is None else request.seed,
            )
            self._episodes[request.id] = episode
            while len(self._episodes) > MAX_EPISODES:
                self._episodes.popitem(last=False)
        return episode

    @staticmethod
    def _episode_request(ctx: ServerRequestContext[Any]) -> EpisodeRequest:
        raw = (ctx.meta or {}).get(META_EPISODE)
        if isinstance(raw, str) and raw:
            return EpisodeRequest(id=raw)
        if isinstance(raw, dict) and isinstance(raw.get("id"), str):
            seed = raw.get("seed")
            if seed is not None and not isinstance(seed, int):
                raise MCPError(types.INVALID_PARAMS, f"{META_EPISODE}.seed must be an integer, got {seed!r}")
            return EpisodeRequest(
                id=raw["id"], task=raw.get("task"), fault_key=raw.get("fault_key"), seed=seed
            )
        if raw is not None:
            raise MCPError(types.INVALID_PARAMS, f"{META_EPISODE} must be a string or an object with an 'id'")
        request = ctx.request
        headers = getattr(request, "headers", None)
        if headers is not None:
            for name in (EPISODE_HEADER, "mcp-session-id"):
                if headers.get(name):
                    return EpisodeRequest(id=str(headers[name]))
            return EpisodeRequest(id="http-default")
        # stdio and in-memory: one lifespan context per connection, so one episode per connection.
        lifespan = ctx.lifespan_context
        if isinstance(lifespan, dict):
            return EpisodeRequest(
                id=lifespan.setdefault("mcp-resili/connection", f"conn-{uuid.uuid4().hex[:12]}")
            )
        return EpisodeRequest(id="default")

    # --- MCP handlers ----------------------------------------------------------------------------

    def _tool(self, name: str) -> types.Tool:
        spec = self.suite.library.spec(name)
        return types.Tool(
            name=spec.name,
            description=spec.description,
            input_schema=spec.input_schema,
            output_schema=spec.output_schema,
            annotations=types.ToolAnnotations(read_only_hint=spec.access == "read"),
            _meta={
                "mcp-resili/errors": list(spec.error_codes),
                "mcp-resili/dependencies": list(spec.dependencies),
            },
        )

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            episode = self.episode(self._episode_request(ctx))
        except UnknownTaskError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        if params.name == FINISH_TOOL:
            return await self._finish(episode, params.arguments or {})
        if self.discovery is not None and params.name in DISCOVERY_TOOLS:
            return self.discovery.call(params.name, dict(params.arguments or {}))
        event = await self.pipeline.call(episode, params.name, params.arguments)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result_text(event))],
            structured_content=None if event.is_error else event.result,
            is_error=event.is_error,
            _meta={META_EVENT: event_to_dict(event)},
        )

    async def _finish(self, episode: Episode, arguments: dict[str, Any]) -> types.CallToolResult:
        status, summary = arguments.get("status"), arguments.get("summary", "")
        if status not in ("completed", "aborted") or not isinstance(summary, str):
            return types.CallToolResult(
                content=[
                    types.TextContent(
                        type="text",
                        text="Error INVALID_INPUT: finish needs status 'completed' or 'aborted' "
                        "and a string summary",
                    )
                ],
                is_error=True,
            )
        event = await self.pipeline.finish(episode, status, summary)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"Recorded: episode {status}.")],
            _meta={META_EVENT: event_to_dict(event)},
        )

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        tasks = self.suite.tasks
        try:
            start = int(params.cursor) if params and params.cursor else 0
        except ValueError:
            raise MCPError(
                types.INVALID_PARAMS, f"invalid cursor {params.cursor if params else None!r}"
            ) from None
        page = tasks[start : start + PROMPT_PAGE_SIZE]
        end = start + len(page)
        prompts = [
            types.Prompt(
                name=t.id,
                title=f"{t.task_type} ({t.complexity})",
                description=t.description,
                arguments=[
                    types.PromptArgument(
                        name="variant",
                        description=f"One of: {', '.join(self.suite.variants)}"
                        + (" (flawed:TYPE[:SEVERITY[:METHOD]])" if "flawed" in self.suite.variants else ""),
                        required=False,
                    )
                ],
            )
            for t in page
        ]
        return types.ListPromptsResult(prompts=prompts, next_cursor=str(end) if end < len(tasks) else None)

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        try:
            task = self.suite.task(params.name)
            text = self.suite.prompt(task, (params.arguments or {}).get("variant") or "baseline")
        except (UnknownTaskError, ValueError) as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        # A person picking a task in their client binds their (not yet started) episode to it.
        episode = self.episode(self._episode_request(ctx))
        if episode.seq == 0:
            episode.task = task
        return types.GetPromptResult(
            description=task.description,
            messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))],
        )
