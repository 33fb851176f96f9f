"""``run --llm-faults`` with the built-in loop: the runner's own model calls through the fault gateway.

`GatewaySession` is an `EpisodeSession` whose models reach their upstream through a gateway in this
process (`model_api.ModelApiHost`): hosted models their API (or ``--base-url``), scripted agents the
model server (played as ``openai:scripted:NAME``, through the real ``openai`` SDK). Each call names its
episode in the ``x-mcp-resili-episode`` header (`REQUEST_HEADERS`), so its faults are drawn from
(seed, task/trial, call ordinal) as for an agent program.

The gateway's ledger is joined into the episode's trace: the entries of each model turn before that
turn's ``model_turn`` event (`join_ledger`). Here the runner's loop is the harness: a model call that
failed after the loop's retries ended the episode as an infrastructure error; when the call that
ended it was a fault the gateway injected, that is the loop's failure (``harness_failure``, scored).
"""

from __future__ import annotations

import contextvars
import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import anyio

from mcp_resili.agents.model import Model, ModelRequest, ModelResponse, Reflection
from mcp_resili.client.limits import UNLIMITED, Allowance
from mcp_resili.client.plan import PlannedEpisode, RunPlan, episode_id
from mcp_resili.client.pricing import load_price_table
from mcp_resili.client.providers import create_model, provider_of
from mcp_resili.client.providers.options import REQUEST_HEADERS
from mcp_resili.client.session import EpisodeResult, EpisodeSession, ModelFactory
from mcp_resili.constants import EPISODE_HEADER
from mcp_resili.harness.model_api import EpisodeLink, ModelApiHost
from mcp_resili.scoring.coping import score_episode
from mcp_resili.trace import (
    EpisodeEndEvent,
    ModelFaultEvent,
    ModelTurnEvent,
    ReflectionEvent,
    Trace,
    TraceEvent,
    trace_lines,
)


@dataclass(frozen=True)
class TurnCalls:
    """The ledger entries of one model turn (``events[start:end]`` of its episode's link)."""

    purpose: str
    start: int
    end: int
    #: The turn's model call raised (its answer never became a turn).
    raised: bool


@dataclass
class _Turns:
    link: EpisodeLink
    turns: list[TurnCalls]


#: The episode whose model turns are being played in this task (set by `GatewaySession.play`).
_TURNS: contextvars.ContextVar[_Turns | None] = contextvars.ContextVar("mcp_resili_turns", default=None)


class JoiningModel:
    """A model whose every turn notes which of its episode's ledger entries it made."""

    def __init__(self, model: Model) -> None:
        self._model = model

    @property
    def name(self) -> str:
        """The wrapped model's name."""
        return self._model.name

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The wrapped model's turn; its ledger entries are noted once every call of it is recorded."""
        turns = _TURNS.get()
        start = len(turns.link.events) if turns is not None else 0
        raised = True
        try:
            response = await self._model.generate(request)
            raised = False
            return response
        finally:
            if turns is not None:
                if not raised:  # the last call's entry may land just after its answer was read
                    with anyio.CancelScope(shield=True):
                        await turns.link.settled()
                turns.turns.append(TurnCalls(request.purpose, start, len(turns.link.events), raised))

    async def aclose(self) -> None:
        """Close the wrapped model if it holds connections."""
        close = getattr(self._model, "aclose", None)
        if close is not None:
            await close()


def routed_spec(spec: str) -> str:
    """The spec a model is built with behind the gateway: a scripted agent is the model server's."""
    if spec.startswith("text:"):
        return f"text:{routed_spec(spec[5:])}"
    return f"openai:{spec}" if provider_of(spec) == "scripted" else spec


def join_ledger(
    events: Sequence[TraceEvent], link_events: Sequence[TraceEvent], turns: Sequence[TurnCalls]
) -> list[TraceEvent]:
    """The episode's events with each turn's ledger entries placed before what that turn produced.

    A turn that answered comes before its ``model_turn`` event; a turn that raised (the loop ended on
    it) before the ``episode_end``; a reflection's before its ``reflection`` event.
    """
    pending = deque(turns)
    out: list[TraceEvent] = []

    def emit_until(done: Callable[[TurnCalls], bool]) -> None:
        while pending:
            turn = pending.popleft()
            out.extend(e for e in link_events[turn.start : turn.end] if isinstance(e, ModelFaultEvent))
            if done(turn):
                return

    for event in events:
        if isinstance(event, ModelTurnEvent):
            emit_until(lambda t: t.purpose != "reflect" and not t.raised)
        elif isinstance(event, EpisodeEndEvent):
            while pending and pending[0].purpose != "reflect":
                emit_until(lambda t: True)
        elif isinstance(event, ReflectionEvent) and event.role == "written":
            emit_until(lambda t: t.purpose == "reflect")
        out.append(event)
    emit_until(lambda t: False)
    return out


def loop_gave_up_on_injected(
    turns: Sequence[TurnCalls], link_events: Sequence[TraceEvent]
) -> ModelFaultEvent | None:
    """The injected fault whose call ended the episode, when the loop's last turn raised on one."""
    acting = [t for t in turns if t.purpose != "reflect"]
    if not acting or not acting[-1].raised:
        return None
    calls = [e for e in link_events[acting[-1].start : acting[-1].end] if isinstance(e, ModelFaultEvent)]
    return calls[-1] if calls and calls[-1].decision.fired else None


class GatewaySession:
    """`EpisodeSession` with every model call through the fault gateway (see the module docstring)."""

    def __init__(
        self,
        plan: RunPlan,
        run_id: str,
        *,
        allowance: Allowance = UNLIMITED,
        limited: bool = False,
        model_factory: ModelFactory = create_model,
        model_options: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.plan = plan
        self.run_id = run_id
        self._allowance = allowance
        self._limited = limited
        self._model_factory = model_factory
        self._model_options = model_options
        self._environ = dict(os.environ if environ is None else environ)
        self.host = ModelApiHost(
            plan,
            front=False,
            allowance=allowance,
            limited=limited,
            prices=load_price_table(plan.config.prices),
            env=self._environ,
        )
        self._inner: EpisodeSession | None = None

    def _routed(self, spec: str, **options: Any) -> Model:
        upstream = self.host.upstreams[spec]
        url = self.host.gateway_urls[upstream]
        routed = routed_spec(spec)
        # The OpenAI SDK posts to BASE/chat/completions, Anthropic's to BASE/v1/messages: either way
        # the gateway sees /v1/... and forwards it to its upstream (a base ending in /v1 takes it once).
        speaks_openai = provider_of(routed.removeprefix("text:")) == "openai"
        options["base_url"] = f"{url}/v1" if speaks_openai else url
        return JoiningModel(self._model_factory(routed, **options))

    async def __aenter__(self) -> GatewaySession:
        await self.host.__aenter__()
        try:
            self._inner = EpisodeSession(
                self.plan,
                self.run_id,
                allowance=self._allowance,
                limited=self._limited,
                model_factory=self._routed,
                model_options=self._model_options,
            )
            await self._inner.__aenter__()
        except BaseException:
            await self.host.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self._inner is not None:
                await self._inner.__aexit__(*exc)
        finally:
            await self.host.__aexit__(*exc)

    async def play(self, planned: PlannedEpisode, memory: tuple[Reflection, ...] = ()) -> EpisodeResult:
        """Play one episode with the built-in loop; then join the gateway's ledger into its trace."""
        assert self._inner is not None
        config = self.plan.config
        task = self.plan.suite.task(planned.task_id)
        episode = episode_id(self.run_id, planned)
        named = {
            "id": episode,
            "task": task.id,
            "trial": planned.trial,
            "seed": config.seed,
            "fault_key": f"{task.id}/{planned.trial}",
        }
        link = self.host.link(episode, named, planned.model)
        turns = _Turns(link, [])
        headers = REQUEST_HEADERS.set({EPISODE_HEADER: link.header})
        noted = _TURNS.set(turns)
        try:
            result = await self._inner.play(planned, memory)
        finally:
            REQUEST_HEADERS.reset(headers)
            _TURNS.reset(noted)
            with anyio.CancelScope(shield=True):
                await link.settled()
            self.host.unlink(link)
        if result.row is None:
            return result
        return replace(result, row=self._joined(result.row, link, turns.turns))

    def _joined(self, row: Any, link: EpisodeLink, turns: list[TurnCalls]) -> Any:
        plan = self.plan
        trace = Trace.from_lines(trace_lines(row.trace), origin=row.episode_id)
        if turns and turns[-1].raised:  # entries that landed after the raising turn was noted
            turns[-1] = replace(turns[-1], end=len(link.events))
        events = join_ledger(trace.events, link.events, turns)
        termination = row.termination
        given_up = (
            loop_gave_up_on_injected(turns, link.events) if termination == "infrastructure_error" else None
        )
        if given_up is not None and given_up.decision.fault is not None:
            termination = "harness_failure"
            why = f"an injected {given_up.decision.fault.type} (model call {given_up.ordinal})"
            events = [
                e.model_copy(
                    update={
                        "termination": termination,
                        "detail": f"the runner's loop gave up after {why}: {e.detail}",
                    }
                )
                if isinstance(e, EpisodeEndEvent)
                else e
                for e in events
            ]
        fault_plan = (
            plan.model_fault_plan.model_dump(mode="json") if plan.model_fault_plan is not None else None
        )
        header = trace.header.model_copy(update={"model_fault_plan": fault_plan})
        joined = Trace(header=header, events=tuple(events))
        score = row.score
        label, value = row.label, row.value
        if termination != "infrastructure_error":
            scored = score_episode(plan.suite, plan.suite.task(row.task_id), joined)
            score, label, value = scored.model_dump(mode="json"), scored.label, scored.value
        return replace(
            row, termination=termination, trace=joined.to_jsonl(), score=score, label=label, value=value
        )
