"""The one call pipeline: validate → dependency check → decide fault → run tool → apply fault → record.

It knows nothing of MCP: it turns (episode, tool name, arguments) into a `ToolCallEvent`, which the
MCP layer renders as a ``CallToolResult`` and the recorder writes to the trace.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
from jsonschema.exceptions import best_match

from mcp_resili.faults import (
    BasePlan,
    CallContext,
    CallOutcome,
    FaultDecision,
    FaultInjector,
    ToolOutcome,
)
from mcp_resili.server.backend import ToolBackend
from mcp_resili.server.episode import Episode
from mcp_resili.server.numbers import MAX_NUMBER, non_finite_number, unusable_number
from mcp_resili.server.recorder import TraceRecorder
from mcp_resili.server.wire import result_json_text
from mcp_resili.tasks.model import Task
from mcp_resili.tools import ToolSpec
from mcp_resili.tools.validator import argument_problems, compiled, shorten
from mcp_resili.trace import FinishEvent, ToolCallEvent, TraceEvent
from mcp_resili.trace.codes import (
    CALL_CANCELLED,
    CANCELLED_MESSAGE,
    DEPENDENCY_NOT_MET,
    INVALID_INPUT,
    RESPONSE_SCHEMA_MISMATCH,
    TOOL_CRASHED,
    TOOL_TIMEOUT,
    UNKNOWN_TOOL,
)

logger = logging.getLogger(__name__)

#: A suite's dependency gate (`Suite.dependency_gate`): (task, tool, the episode's events so far) →
#: None to go on, or (prerequisites not met, message) to refuse the call before any fault draw.
DependencyGate = Callable[[Task | None, str, Sequence[TraceEvent]], tuple[tuple[str, ...], str] | None]


class CallPipeline:
    """Runs every tool call of every episode through the same steps."""

    def __init__(
        self,
        backend: ToolBackend,
        plan: BasePlan,
        *,
        enforce_dependencies: bool,
        recorder: TraceRecorder,
        time_scale: float = 1.0,
        validate_arguments: bool = True,
        initial_state: Callable[[Task | None], dict[str, Any]] | None = None,
        call_time_limit: float | None = None,
        dependency_gate: DependencyGate | None = None,
    ) -> None:
        self.backend = backend
        self.specs = {spec.name: spec for spec in backend.specs}
        #: The tool state an episode starts from (seeded lazily: the task may be bound after creation).
        self.initial_state = initial_state
        self.plan = plan
        self.plan_dict = plan.to_dict()
        self.enforce_dependencies = enforce_dependencies
        #: The suite's own gate (`Suite.dependency_gate`), checked after the declared dependencies.
        self.dependency_gate = dependency_gate
        self.recorder = recorder
        if time_scale < 0:
            raise ValueError(f"time_scale must be >= 0, got {time_scale}")
        #: Multiplies every injected delay; 0 makes latency faults instant (tests, dry runs).
        self.time_scale = time_scale
        if call_time_limit is not None and call_time_limit <= 0:
            raise ValueError(f"call_time_limit must be positive, got {call_time_limit}")
        #: Seconds a tool may run before the call is answered `TOOL_TIMEOUT` (None: no limit).
        self.call_time_limit = call_time_limit
        # A proxy leaves validation to the upstream so that its own errors pass through unchanged.
        self._validators = (
            {name: compiled(spec.input_schema) for name, spec in self.specs.items()}
            if validate_arguments
            else {}
        )
        self._output_validators = {
            name: compiled(spec.output_schema)
            for name, spec in self.specs.items()
            if spec.output_schema is not None
        }

    async def call(self, episode: Episode, tool: str, arguments: Mapping[str, Any] | None) -> ToolCallEvent:
        """Handle one ``tools/call`` and return the recorded event."""
        event, _ = await self.call_with_outcome(episode, tool, arguments)
        return event

    async def call_with_outcome(
        self,
        episode: Episode,
        tool: str,
        arguments: Mapping[str, Any] | None,
        meta: Mapping[str, Any] | None = None,
    ) -> tuple[ToolCallEvent, ToolOutcome | None]:
        """Like `call`, also returning the outcome the agent sees (None if the call was rejected)."""
        async with episode.lock:
            event, outcome = await self._call(episode, tool, dict(arguments or {}), meta)
            try:
                delay = event.fault.delay_seconds if event.fault is not None else 0.0
                if delay > 0 and self.time_scale > 0:
                    await anyio.sleep(delay * self.time_scale)
            finally:
                # Recorded even when the client gives up during an injected delay: the call took its
                # ordinal and its decision, and a replay must meet the same draws in the same order.
                self.recorder.record(episode, event)
            return event, outcome

    async def reject(
        self, episode: Episode, tool: str, arguments: dict[str, Any], message: str
    ) -> ToolCallEvent:
        """Record a call refused for invalid arguments outside the pipeline's tools (e.g. ``finish``)."""
        return await self.record_outside(
            episode, tool, arguments, {"code": INVALID_INPUT, "message": message}, error=True
        )

    async def record_outside(
        self,
        episode: Episode,
        tool: str,
        arguments: dict[str, Any],
        result: dict[str, Any],
        *,
        error: bool = False,
    ) -> ToolCallEvent:
        """Record a call answered outside the pipeline (``finish`` refused, the discovery tools).

        No fault decision and no ordinal: such calls are no part of any failure model.
        """
        async with episode.lock:
            event = ToolCallEvent(
                episode=episode.id,
                seq=episode.next_seq(),
                tool=tool,
                arguments=arguments,
                is_error=error,
                error_code=result["code"] if error else None,
                result=result,
            )
            self.recorder.record(episode, event)
            return event

    async def finish(self, episode: Episode, status: str, summary: str) -> FinishEvent:
        """Record the agent's explicit completion signal."""
        async with episode.lock:
            event = FinishEvent(
                episode=episode.id,
                seq=episode.next_seq(),
                status=status,  # type: ignore[arg-type]
                summary=summary,
            )
            self.recorder.record(episode, event)
            return event

    async def _call(
        self, episode: Episode, tool: str, arguments: dict[str, Any], meta: Mapping[str, Any] | None
    ) -> tuple[ToolCallEvent, ToolOutcome | None]:
        def rejected(code: str, message: str, **extra: Any) -> tuple[ToolCallEvent, None]:
            return ToolCallEvent(
                episode=episode.id,
                seq=episode.next_seq(),
                tool=tool,
                arguments=arguments,
                is_error=True,
                error_code=code,
                result={"code": code, "message": message},
                **extra,
            ), None

        if not episode.state_ready:
            if self.initial_state is not None:
                try:
                    initial = self.initial_state(episode.task)
                except Exception as exc:  # a bug in the suite: this call fails, the server does not
                    # Never played on an empty state instead (a world-less episode scores wrongly);
                    # every call fails alike, which the runner counts as an infrastructure error.
                    logger.exception("the initial tool state of episode %r could not be built", episode.id)
                    return rejected(
                        TOOL_CRASHED,
                        f"the suite could not set up this episode's tool state ({type(exc).__name__}); "
                        "the suite is at fault, not the call",
                    )
                episode.tool_state.update(initial)
            episode.state_ready = True
        # 1. validate
        spec = self.specs.get(tool)
        if spec is None:
            known = ", ".join(sorted(self.specs))
            return rejected(UNKNOWN_TOOL, f"unknown tool {tool!r}; available tools: {known}")
        validator = self._validators.get(tool)
        if validator is not None:
            # Checked before the schema, whose messages would quote a 400-digit number in full.
            unusable = unusable_number(arguments)
            if unusable is not None:
                return rejected(
                    INVALID_INPUT,
                    f"invalid arguments for {tool}: {unusable}: numbers must be finite and within "
                    f"±{MAX_NUMBER}",
                )
        problems = None if validator is None else argument_problems(validator, arguments)
        if problems is not None:
            return rejected(INVALID_INPUT, f"invalid arguments for {tool}: {problems}")
        # 2. dependency check
        unmet: tuple[str, ...] = ()
        if spec.dependencies:
            succeeded = {h.tool for h in episode.history if h.ok}
            unmet = tuple(d for d in spec.dependencies if d not in succeeded)
        if unmet and self.enforce_dependencies:
            return rejected(
                DEPENDENCY_NOT_MET,
                f"{tool} needs {', '.join(unmet)} to have run successfully first",
                unmet_dependencies=unmet,
            )
        if self.enforce_dependencies and self.dependency_gate is not None:
            refusal = self.dependency_gate(episode.task, tool, episode.events)
            if refusal is not None:
                return rejected(DEPENDENCY_NOT_MET, refusal[1], unmet_dependencies=refusal[0])
        # 3. decide fault
        ordinal = episode.ordinals[tool]
        episode.ordinals[tool] += 1
        injector = FaultInjector(self.plan, episode.seed)
        context = CallContext(
            episode.fault_key,
            spec,
            ordinal,
            tuple(episode.history),
            task=episode.task,
            state=episode.fault_state,
        )
        decision = injector.decide(context)
        # 4. run tool (unless a request-side fault stops it)
        outcome: ToolOutcome | None = None
        if injector.runs_tool(decision.fault):
            try:
                outcome = await self._run(spec, arguments, episode, meta)
            except anyio.get_cancelled_exc_class():
                # The client went away while the tool ran. The call took its ordinal and decision:
                # record it (synchronously, as a cancelled call) so the trace still replays.
                gone = ToolOutcome(structured=None, error_code=CALL_CANCELLED, message=CANCELLED_MESSAGE)
                event = self._event(episode, tool, arguments, decision, unmet, gone)
                self.recorder.record(episode, event)
                raise
        # 5. apply fault
        final = injector.apply(decision.fault, outcome, context)
        if decision.fault is not None:
            final = self._conform(tool, final)
        # 6. record
        return self._event(episode, tool, arguments, decision, unmet, final), final

    def _event(
        self,
        episode: Episode,
        tool: str,
        arguments: dict[str, Any],
        decision: FaultDecision,
        unmet: tuple[str, ...],
        final: ToolOutcome,
    ) -> ToolCallEvent:
        """The recorded event of a decided call, its outcome added to the episode's history."""
        episode.history.append(CallOutcome(tool, not final.is_error))
        return ToolCallEvent(
            episode=episode.id,
            seq=episode.next_seq(),
            tool=tool,
            arguments=arguments,
            fault=decision.fault,
            decision=decision,
            unmet_dependencies=unmet,
            is_error=final.is_error,
            error_code=final.error_code,
            result=final.structured
            if not final.is_error
            else {"code": final.error_code, "message": final.message, **final.details},
        )

    async def _run(
        self, spec: ToolSpec, arguments: dict[str, Any], episode: Episode, meta: Mapping[str, Any] | None
    ) -> ToolOutcome:
        """The backend's outcome, or `TOOL_TIMEOUT` once the call outlasts the time limit."""
        # A quick tool runs to its end without awaiting: no timer to arm for it.
        quick = self.backend.run_inline(spec, arguments, episode.tool_state)
        if quick is not None:
            return quick
        limit = self.call_time_limit if self.call_time_limit is not None else math.inf
        with anyio.move_on_after(limit):
            return await self.backend.run(spec, arguments, episode.tool_state, meta)
        return ToolOutcome(
            structured=None,
            error_code=TOOL_TIMEOUT,
            message=f"{spec.name} did not finish within {limit:g} s",
        )

    def _conform(self, tool: str, outcome: ToolOutcome) -> ToolOutcome:
        """A faulted success that breaks the output schema becomes `RESPONSE_SCHEMA_MISMATCH`.

        The rule: structured content always satisfies the tool's declared output schema (MCP requires
        it, and clients reject anything else). When a response-side fault reshaped the result so it no
        longer does, the fault still reaches the agent, the way a validating server would show it: an
        error naming the mismatch, with the reshaped payload in its text.
        """
        validator = self._output_validators.get(tool)
        if outcome.is_error or outcome.structured is None or validator is None:
            return outcome
        problem = non_finite_number(outcome.structured)
        if problem is None:
            error = best_match(validator.iter_errors(outcome.structured))
            if error is None:
                return outcome
            where = "/".join(map(str, error.absolute_path)) or "(result)"
            problem = f"{where}: {shorten(error.message)}"
        return ToolOutcome(
            structured=None,
            error_code=RESPONSE_SCHEMA_MISMATCH,
            message=f"the response of {tool} does not match its declared output schema ({problem})",
            details={"response": outcome.structured},
        )


def result_text(event: ToolCallEvent, outcome: ToolOutcome | None = None) -> str:
    """The text an agent reads for a call: the JSON result, or the error line.

    ``outcome`` is the call's (`CallPipeline.call_with_outcome`): a text the backend already made for
    its result is taken when no fault touched the call.
    """
    if event.is_error and event.result is not None:
        details = {k: v for k, v in event.result.items() if k not in ("code", "message")}
        suffix = f" {result_json_text(details)}" if details else ""
        return f"Error {event.error_code}: {event.result['message']}{suffix}"
    if outcome is not None and outcome.text is not None and event.fault is None:
        return outcome.text
    return result_json_text(event.result)
