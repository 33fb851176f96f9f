"""Everything one process needs to play a run's episodes: MCP clients, tool lists, models.

An `EpisodeSession` is what an executor holds: in this process (`LocalExecutor`) or in each Ray worker.
It connects once per fault configuration, lists the tools once, builds each model once, and then
plays any planned episode of the run, returning its stored row. Playing an episode depends only on
the run's configuration and the planned cell (faults come from (seed, task, trial, tool, ordinal)), so
every executor gives the same rows for the same plan.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal, Self

import jsonschema
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.server import Server
from mcp.server._otel import OpenTelemetryMiddleware

from mcp_resili.agents.model import Model, Reflection
from mcp_resili.client.episode import EpisodeSpec
from mcp_resili.client.inprocess import InProcessClient
from mcp_resili.client.limits import UNLIMITED, Allowance, BudgetExhaustedError, LimitedModel
from mcp_resili.client.loop import _relist, play_episode
from mcp_resili.client.notices import ProtocolNotices
from mcp_resili.client.plan import PlannedEpisode, RunConfigError, RunPlan, episode_id
from mcp_resili.client.pricing import PriceTable, load_price_table
from mcp_resili.client.providers import ClosableModel, create_model, provider_of
from mcp_resili.client.recorded import RecordedEvents, fetch_episode_trace
from mcp_resili.client.reflexion import reflect
from mcp_resili.constants import AUTH_TOKEN_ENV
from mcp_resili.proxy.upstream import entered, guarded_http_transport
from mcp_resili.scoring.coping import score_episode
from mcp_resili.server.app import ResiliServer
from mcp_resili.server.direct import direct_on_request
from mcp_resili.store import EpisodeRow
from mcp_resili.tools.validator import compiled, schema_error
from mcp_resili.trace import ModelTurnEvent, ReflectionEvent, Trace, TraceEvent, TraceHeader

#: Builds a model from its spec and `ProviderOptions` fields (tests substitute their own).
ModelFactory = Callable[..., Model]


@asynccontextmanager
async def connect(plan: RunPlan, fault_spec: str) -> AsyncIterator[Client]:
    """An MCP client for one fault configuration: in-process, a stdio subprocess, or a URL."""
    async with connect_recorded(plan, fault_spec) as (client, _):
        yield client


@asynccontextmanager
async def connect_recorded(plan: RunPlan, fault_spec: str) -> AsyncIterator[tuple[Client, RecordedEvents]]:
    """`connect`, plus where the loop reads the server's recorded events (no result carries them).

    In process: the server object's own recorder, call by call. Over ``--server``: our server hands
    them over once the episode is closed (`fetch_episode_trace`); another server keeps none.
    """
    config = plan.config
    if config.server is None:
        async with AsyncExitStack() as stack:
            # A suite on real servers: they start (and install on first use) before the first episode.
            environment = (
                await stack.enter_async_context(plan.suite.environment())
                if plan.suite.environment is not None
                else None
            )
            server = ResiliServer(
                plan.suite,
                plan.fault_plans[fault_spec],
                seed=config.seed,
                time_scale=config.time_scale,
                environment=environment,
            )
            without_idle_tracing(server.mcp)

            async def close(episode_id: str) -> list[TraceEvent]:
                # Frees its state; its events were taken call by call, but for its observed end state.
                return await server.end_episode(episode_id)

            notices = ProtocolNotices()
            answer = functools.partial(direct_on_request, server)
            async with InProcessClient(server.mcp, on_request=answer, **notices.client_options()) as client:
                yield client, RecordedEvents(after_call=server.take_events, at_end=close, notices=notices)
        return
    notices = ProtocolNotices()
    guard = None
    if config.server.startswith(("http://", "https://")):
        # A server behind a token (`serve --auth-token`) gets it from the environment, never the URL.
        token = os.environ.get(AUTH_TOKEN_ENV)
        http, guard = guarded_http_transport(
            config.server, {"Authorization": f"Bearer {token}"} if token else None
        )
        remote = entered(Client(http, read_timeout_seconds=60, **notices.client_options()), config.server)
    else:
        argv = shlex.split(config.server)
        if not argv:
            raise RunConfigError("--server is empty")
        params = StdioServerParameters(command=argv[0], args=argv[1:])
        transport = stdio_client(params, errlog=sys.stderr)  # stderr as it is now, not at import
        remote = entered(
            Client(transport, read_timeout_seconds=60, **notices.client_options()), config.server
        )
    async with remote as client:
        if guard is not None:
            guard.armed = True  # connected: from now on a lost connection fails only its request
        plans: dict[str, dict[str, Any]] = {}
        yield (
            client,
            RecordedEvents(
                at_end=functools.partial(fetch_episode_trace, client, server_plans=plans),
                notices=notices,
                server_plans=plans,
            ),
        )


def without_idle_tracing(server: Server[Any]) -> None:
    """Drop the SDK's OpenTelemetry middleware from an in-process server when nothing records spans.

    Without an OpenTelemetry SDK configured, every span is a no-op, yet opening and closing one per
    request was ~8% of a tool call's CPU. A process that configures tracing keeps the middleware.
    """
    from opentelemetry import trace

    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        server.middleware[:] = [m for m in server.middleware if not isinstance(m, OpenTelemetryMiddleware)]


def compile_output_checks(client: Client, tools: Sequence[types.Tool]) -> None:
    """Give the MCP client compiled validators for the tools' output schemas.

    The client checks every structured result against its tool's output schema with ``jsonschema``
    (a fifth of an episode's CPU). It keeps compiled validators in a per-tool cache; filling that cache
    with `CompiledSchema` (a fast path for valid results, ``jsonschema``'s own errors otherwise) keeps
    its behaviour and drops the cost. Schemas the client would reject (invalid, or of another draft)
    are left to it; an SDK without that cache is left alone.
    """
    cache = getattr(client.session, "_tool_output_validators", None)
    if not isinstance(cache, dict):
        return
    draft = jsonschema.Draft202012Validator.META_SCHEMA["$id"]
    for tool in tools:
        schema = tool.output_schema
        if schema is None or schema.get("$schema", draft) != draft:
            continue
        if schema_error(schema) is not None:
            continue
        cache[tool.name] = compiled(schema)


Outcome = Literal["played", "budget_stopped", "not_started"]


@dataclass(frozen=True)
class EpisodeResult:
    """What became of one planned episode; only ``played`` ones have a row to store."""

    planned: PlannedEpisode
    outcome: Outcome
    row: EpisodeRow | None = None
    #: Reflexion: what the episode wrote for the next trials of its task.
    reflection: Reflection | None = None


class StackedResources:
    """An async context whose resources an exit stack holds: `_open` enters them, leaving closes them.

    A failure while opening closes what was already opened before it propagates.
    """

    _stack: AsyncExitStack

    async def __aenter__(self) -> Self:
        self._stack = AsyncExitStack()
        await self._stack.__aenter__()
        try:
            await self._open()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _open(self) -> None:
        raise NotImplementedError


class EpisodeSession(StackedResources):
    """Clients, tools and models for playing the episodes of one run (enter with ``async with``)."""

    def __init__(
        self,
        plan: RunPlan,
        run_id: str,
        *,
        allowance: Allowance = UNLIMITED,
        limited: bool = False,
        model_factory: ModelFactory = create_model,
        model_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.plan = plan
        self.config = plan.config
        self.run_id = run_id
        self.allowance = allowance
        #: Whether model calls go through ``allowance`` (a cost cap or rate limits are set).
        self.limited = limited
        self.prices: PriceTable = load_price_table(plan.config.prices)
        self._model_factory = model_factory
        self._model_options = dict(model_options or {})
        self.clients: dict[str, Client] = {}
        #: Per fault configuration, where the loop reads the server's own record of each call.
        self.recorded: dict[str, RecordedEvents] = {}
        self.tools: dict[str, list[types.Tool]] = {}
        self.plans: dict[str, dict[str, Any]] = {}
        self.models: dict[str, Model] = {}

    async def _open(self) -> None:
        config = self.config
        for spec in self.plan.fault_specs:
            client, recorded = await self._stack.enter_async_context(connect_recorded(self.plan, spec))
            self.clients[spec] = client
            self.recorded[spec] = recorded
            self.tools[spec] = list((await client.list_tools()).tools)
            compile_output_checks(client, self.tools[spec])
            self.plans[spec] = (
                {"kind": "external", "server": config.server}
                if config.server
                else self.plan.fault_plans[spec].to_dict()
            )
        for spec in config.models:
            model = self._model_factory(
                spec, agents=self.plan.agents, base_url=config.base_url, **self._model_options
            )
            if isinstance(model, ClosableModel):
                self._stack.push_async_callback(model.aclose)
            if self.limited and provider_of(spec) != "scripted":
                model = LimitedModel(model, spec, self.allowance, self.prices)
            self.models[spec] = model

    async def play(self, planned: PlannedEpisode, memory: tuple[Reflection, ...] = ()) -> EpisodeResult:
        """Play one planned episode; budget-stopped when the run's cost cap stops one of its calls."""
        if self.limited and not await self.allowance.is_open():
            return EpisodeResult(planned, "not_started")
        try:
            row, reflection = await play_planned(
                self.plan,
                self.run_id,
                planned,
                self.clients[planned.faults],
                self.tools[planned.faults],
                self.plans[planned.faults],
                self.models[planned.model],
                memory,
                self.recorded.get(planned.faults),
            )
        except BudgetExhaustedError:
            return EpisodeResult(planned, "budget_stopped")
        cost = self.prices.cost(planned.model, row.input_tokens, row.output_tokens)
        return EpisodeResult(planned, "played", replace(row, cost_usd=cost), reflection)


async def play_planned(
    plan: RunPlan,
    run_id: str,
    planned: PlannedEpisode,
    client: Client,
    tools: Sequence[Any],
    fault_plan: dict[str, Any],
    model: Model,
    memory: tuple[Reflection, ...] = (),
    recorded: RecordedEvents | None = None,
) -> tuple[EpisodeRow, Reflection | None]:
    """Play and score one episode; under Reflexion a failed trial ends with the model's reflection."""
    config, suite = plan.config, plan.suite
    task = suite.task(planned.task_id)
    fault_key = f"{task.id}/{planned.trial}"
    spec = EpisodeSpec(
        id=episode_id(run_id, planned),
        fault_key=fault_key,
        seed=config.seed,
        task=task,
        prompt=suite.prompt(task, planned.variant),
        max_turns=config.max_turns or task.constraints.max_turns,
        architecture=config.architecture,
        stop_rules=plan.stop_rules,
        memory=memory,
        max_tokens=config.max_tokens,
        time_limit=config.time_limit if config.time_limit is not None else task.constraints.timeout,
        trial=planned.trial,
    )
    if suite.environment is not None:
        # Real servers: the episode is offered its own servers' tools, listed as it sees them.
        tools = await _relist(client, spec, recorded, []) or []
    outcome = await play_episode(client, model, spec, tools, recorded)
    server_plan = recorded.server_plans.pop(spec.id, None) if recorded is not None else None
    if server_plan is not None:  # over --server, the plan our server played (e.g. ToolMaze's mode)
        fault_plan = {**fault_plan, "plan": server_plan}
    header = TraceHeader(
        suite=suite.name,
        task=task.id,
        episode=spec.id,
        seed=config.seed,
        fault_plan=fault_plan,
        fault_key=fault_key,
        model=planned.model,
        variant=planned.variant,
        trial=planned.trial,
        max_turns=config.max_turns,
        architecture=config.architecture,
    )
    # The loop's events are trace event models already: checking each against the union again was
    # a hundredth of an episode.
    trace = Trace.model_construct(header=header, events=outcome.events)
    score = None if outcome.termination == "infrastructure_error" else score_episode(suite, task, trace)
    reflection = None
    if config.architecture == "reflexion" and score is not None and score.label != "full":
        written = await reflect(model, spec, outcome, planned.trial)
        trace = Trace(header=header, events=(*outcome.events, written))
        reflection = Reflection(planned.trial, written.text) if written.text else None
    # The events that count tokens: a model's turns and reflections (a missing attribute of a pydantic
    # model is an exception, costly on every other event).
    spending = [e for e in trace.events if isinstance(e, ModelTurnEvent | ReflectionEvent)]
    tokens_in = sum(e.input_tokens for e in spending)
    tokens_out = sum(e.output_tokens for e in spending)
    row = EpisodeRow(
        run_id=run_id,
        episode_id=spec.id,
        model=planned.model,
        faults=planned.faults,
        variant=planned.variant,
        task_id=task.id,
        trial=planned.trial,
        termination=outcome.termination,
        label=None if score is None else score.label,
        value=None if score is None else score.value,
        score=None if score is None else score.model_dump(mode="json"),
        trace=trace.to_jsonl(),
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        architecture=config.architecture,
        stop_rule=outcome.stop_rule,
    )
    return row, reflection
