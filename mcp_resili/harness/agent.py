"""``run --agent-cmd``: each planned episode played by an agent program the runner starts.

`AgentSession` is an executor's session (the face of `mcp_resili.client.session.EpisodeSession`): it
hosts the run's MCP servers (in process, one per fault configuration, each behind a front of
per-episode URLs: `mcp_front`) and the model API (`model_api`: the fault gateway before the model
server or a real API), then plays each episode by starting the program (`process`) with the contract's
environment (`contract`), and scores it from what the servers recorded: the MCP server's events and
the gateway's ledger, joined in the order they happened into one trace.

How an episode ends (`verdict`): the program's own ``finish`` call decides when there is one; else it
exited 0 (``agent_stopped``, or ``completed`` when its last words say so), crashed (``harness_failure``,
the agent's failure), ran out of time (``time_limit``) or of tokens (``max_tokens``). A model-API
failure nobody injected that ended the episode, or a tool that crashed, is an infrastructure error
(never scored); a fault the gateway injected never is.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup

from mcp_resili.agents.model import Reflection
from mcp_resili.client.limits import UNLIMITED, Allowance
from mcp_resili.client.plan import PlannedEpisode, RunPlan, agent_argv, episode_id
from mcp_resili.client.pricing import PriceTable, load_price_table
from mcp_resili.client.session import EpisodeResult, StackedResources
from mcp_resili.constants import COMPLETION_PHRASES
from mcp_resili.harness.contract import EpisodeEndpoints, agent_environment, redact, secrets_in
from mcp_resili.harness.mcp_front import PREFIX, McpFront, new_token
from mcp_resili.harness.model_api import EpisodeLink, ModelApiHost, model_name
from mcp_resili.harness.process import ProgramExit, run_program
from mcp_resili.modelapi.hosting import bind, serve_app
from mcp_resili.scoring.coping import score_episode
from mcp_resili.scoring.model_coping import ended_by_upstream, model_events
from mcp_resili.server.app import ResiliServer
from mcp_resili.store import EpisodeRow
from mcp_resili.trace import EpisodeEndEvent, FinishEvent, ToolCallEvent, Trace, TraceEvent, TraceHeader
from mcp_resili.trace.codes import TOOL_CRASHED

#: The architecture stored with an agent program's episodes (the summary's column says so).
ARCHITECTURE = "agent-cmd"
#: The module that relays stdio to an episode's URL (`MCP_RESILI_MCP_COMMAND`).
BRIDGE_MODULE = "mcp_resili.harness.bridge"


@dataclass(frozen=True)
class _McpSide:
    server: ResiliServer
    front: McpFront
    #: ``http://HOST:PORT`` the front listens on.
    base: str


@dataclass(frozen=True)
class Verdict:
    """How an agent program's episode ended, in the trace's terms."""

    termination: str
    detail: str


def _exit_words(exit: ProgramExit) -> str:
    if exit.start_error is not None:
        return f"could not be started ({exit.start_error})"
    status = exit.status
    if status is not None and status < 0:
        return f"was killed by signal {-status}"
    return f"exited with status {status}"


def verdict(
    exit: ProgramExit,
    events: Sequence[TraceEvent],
    *,
    time_limit: float | None,
    tokens: int,
    max_tokens: int | None,
) -> Verdict:
    """How the episode ended (see the module docstring); pure, from the program's exit and the events."""
    finish = next((e for e in events if isinstance(e, FinishEvent)), None)
    last = exit.last_line()
    said = f"; its last line: {last}" if last else ""
    crashed_tool = next(
        (
            e
            for e in events
            if isinstance(e, ToolCallEvent) and e.error_code == TOOL_CRASHED and e.fault is None
        ),
        None,
    )
    if crashed_tool is not None:
        return Verdict("infrastructure_error", f"tool {crashed_tool.tool} crashed (a bug in the tool)")
    if exit.ended_by == "max_tokens" and finish is None:
        return Verdict("max_tokens", f"{tokens} tokens spent, limit {max_tokens}")
    if finish is not None:
        how = (
            "did not exit and was ended at the time limit"
            if exit.ended_by == "time_limit"
            else _exit_words(exit)
        )
        return Verdict(finish.status, f"the agent program called finish, then {how}{said}")
    upstream = ended_by_upstream(events)
    if upstream is not None:
        return Verdict(
            "infrastructure_error",
            f"the model API failed with nobody injecting it (call {upstream.ordinal}: status "
            f"{upstream.status}, {upstream.detail or 'upstream ' + str(upstream.upstream_status)}); "
            f"then the agent program {_exit_words(exit) if exit.ended_by is None else 'ran out of time'}",
        )
    if exit.ended_by == "time_limit":
        calls = model_events(events)
        hanging = calls[-1] if calls else None
        if hanging is not None and hanging.status is None and not hanging.decision.fired:
            return Verdict(
                "infrastructure_error",
                f"the model API had not answered call {hanging.ordinal} when the time limit of "
                f"{time_limit}s ran out (nobody injected a delay)",
            )
        return Verdict("time_limit", f"the agent program was still running after {time_limit}s{said}")
    if exit.crashed:
        return Verdict("harness_failure", f"the agent program {_exit_words(exit)}{said}")
    if any(phrase in exit.stdout.lower() for phrase in COMPLETION_PHRASES):
        return Verdict("completed", "the agent program exited 0 and said it completed the task")
    return Verdict("agent_stopped", f"the agent program exited 0 without calling finish{said}")


async def _serve(group: TaskGroup, front: McpFront) -> str:
    """Serve ``front`` on a free loopback port (in ``group``); its ``http://HOST:PORT``."""
    sock = bind("127.0.0.1", 0)
    started = anyio.Event()
    urls: list[str] = []

    def on_started(url: str) -> None:
        urls.append(url)
        started.set()

    group.start_soon(functools.partial(serve_app, front, sock, on_started=on_started))
    with anyio.fail_after(30):
        await started.wait()
    return urls[0]


class AgentSession(StackedResources):
    """Servers, model API and agent programs for the episodes of one run (enter with ``async with``).

    Takes `EpisodeSession`'s arguments (``model_factory`` and ``model_options`` are unused: the
    program brings its own model client).
    """

    def __init__(
        self,
        plan: RunPlan,
        run_id: str,
        *,
        allowance: Allowance = UNLIMITED,
        limited: bool = False,
        model_factory: Any = None,
        model_options: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        del model_factory, model_options
        assert plan.config.agent_cmd is not None
        self.plan = plan
        self.config = plan.config
        self.run_id = run_id
        self.allowance = allowance
        self.limited = limited
        self.prices: PriceTable = load_price_table(plan.config.prices)
        self.argv = agent_argv(plan.config.agent_cmd)
        self._environ = dict(os.environ if environ is None else environ)
        self._secrets = secrets_in(self._environ)
        self._mcp: dict[str, _McpSide] = {}
        self.model_api: ModelApiHost | None = None

    async def _open(self) -> None:
        plan, config = self.plan, self.config
        group = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(group.cancel_scope.cancel)
        environment = (
            await self._stack.enter_async_context(plan.suite.environment())
            if plan.suite.environment is not None
            else None
        )
        for spec in plan.fault_specs:
            server = ResiliServer(
                plan.suite,
                plan.fault_plans[spec],
                seed=config.seed,
                time_scale=config.time_scale,
                environment=environment,
            )
            front = McpFront(server)
            self._mcp[spec] = _McpSide(server, front, await _serve(group, front))
        self.model_api = await self._stack.enter_async_context(
            ModelApiHost(
                plan,
                front=True,
                allowance=self.allowance,
                limited=self.limited,
                prices=self.prices,
                env=self._environ,
            )
        )

    async def play(self, planned: PlannedEpisode, memory: tuple[Reflection, ...] = ()) -> EpisodeResult:
        """Play one planned episode with the agent program; budget-stopped when the cost cap stopped it."""
        del memory  # no Reflexion for agent programs (refused when the run is resolved)
        if self.limited and not await self.allowance.is_open():
            return EpisodeResult(planned, "not_started")
        assert self.model_api is not None
        plan, config = self.plan, self.config
        task = plan.suite.task(planned.task_id)
        episode = episode_id(self.run_id, planned)
        fault_key = f"{task.id}/{planned.trial}"
        named = {
            "id": episode,
            "task": task.id,
            "trial": planned.trial,
            "seed": config.seed,
            "fault_key": fault_key,
        }
        side = self._mcp[planned.faults]
        token = new_token()
        side.front.bind(token, named)
        link = self.model_api.link(
            episode,
            named,
            planned.model,
            token=token,
            pull_mcp=lambda: side.server.take_events(episode),
            max_tokens=config.max_tokens,
        )
        time_limit = config.time_limit if config.time_limit is not None else task.constraints.timeout
        max_turns = config.max_turns or task.constraints.max_turns
        url = f"{side.base}{PREFIX}{token}/mcp"
        endpoints = EpisodeEndpoints(
            mcp_url=url,
            mcp_command=shlex.join([sys.executable, "-m", BRIDGE_MODULE, url]),
            model_base=self.model_api.base_url(link),
        )
        prompt = plan.suite.prompt(task, planned.variant)
        env = agent_environment(
            self._environ,
            endpoints,
            prompt=prompt,
            model=model_name(planned.model),
            episode=episode,
            time_limit=time_limit,
            max_turns=max_turns,
            offline=self.model_api.offline,
        )
        try:
            exit = await run_program(
                self.argv,
                prompt,
                env,
                time_limit=time_limit,
                stop=link.stopped,
                why=lambda: link.stop_reason or "stopped",
            )
        finally:
            with anyio.CancelScope(shield=True):
                await side.front.unbind(token, side.base.removeprefix("http://"))
                await link.settled()
                link.events.extend(side.server.take_events(episode))
                link.events.extend(await side.server.end_episode(episode))
                self.model_api.unlink(link)
        if link.stop_reason == "budget_stopped":
            return EpisodeResult(planned, "budget_stopped")
        return EpisodeResult(planned, "played", self._row(planned, task.id, episode, fault_key, link, exit))

    def _row(
        self,
        planned: PlannedEpisode,
        task_id: str,
        episode: str,
        fault_key: str,
        link: EpisodeLink,
        exit: ProgramExit,
    ) -> EpisodeRow:
        plan, config = self.plan, self.config
        task = plan.suite.task(task_id)
        tokens = link.input_tokens + link.output_tokens
        ended = verdict(
            exit,
            link.events,
            time_limit=config.time_limit if config.time_limit is not None else task.constraints.timeout,
            tokens=tokens,
            max_tokens=config.max_tokens,
        )
        end = EpisodeEndEvent(
            episode=episode,
            termination=ended.termination,  # type: ignore[arg-type]
            turns=len(model_events(link.events)),
            detail=redact(ended.detail, self._secrets),
            stop_rules="none",
        )
        header = TraceHeader(
            suite=plan.suite.name,
            task=task_id,
            episode=episode,
            seed=config.seed,
            fault_plan=plan.fault_plans[planned.faults].to_dict(),
            fault_key=fault_key,
            model=planned.model,
            variant=planned.variant,
            trial=planned.trial,
            max_turns=config.max_turns,
            architecture=ARCHITECTURE,
            model_fault_plan=plan.model_fault_plan.model_dump(mode="json")
            if plan.model_fault_plan is not None
            else None,
        )
        trace = Trace(header=header, events=(*link.events, end))
        score = (
            None if ended.termination == "infrastructure_error" else score_episode(plan.suite, task, trace)
        )
        return EpisodeRow(
            run_id=self.run_id,
            episode_id=episode,
            model=planned.model,
            faults=planned.faults,
            variant=planned.variant,
            task_id=task_id,
            trial=planned.trial,
            termination=ended.termination,
            label=None if score is None else score.label,
            value=None if score is None else score.value,
            score=None if score is None else score.model_dump(mode="json"),
            trace=trace.to_jsonl(),
            input_tokens=link.input_tokens,
            output_tokens=link.output_tokens,
            cost_usd=self.prices.cost(planned.model, link.input_tokens, link.output_tokens),
            architecture=ARCHITECTURE,
            stop_rule=None,
        )
