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
from mcp_resili.server.budget import (
    CALL_BASE_BYTES,
    STATE_MEASURE_BYTES,
    Refusal,
    json_size,
    larger_than,
    plain_json,
    result_too_large,
)
from mcp_resili.server.episode import Episode
from mcp_resili.server.numbers import MAX_NUMBER, non_finite_number, unusable_number, unusable_number_in
from mcp_resili.server.recorder import TraceRecorder
from mcp_resili.server.strings import lone_surrogate, lone_surrogate_problem
from mcp_resili.server.wire import result_json_text
from mcp_resili.tasks.model import Task
from mcp_resili.tools import ToolSpec
from mcp_resili.tools.validator import argument_problems, compiled, shorten
from mcp_resili.trace import FinishEvent, ToolCallEvent, TraceEvent
from mcp_resili.trace.codes import (
    CALL_CANCELLED,
    CANCELLED_MESSAGE,
    DEPENDENCY_NOT_MET,
    EPISODE_BUSY,
    INVALID_INPUT,
    RESPONSE_SCHEMA_MISMATCH,
    RESULT_TOO_LARGE,
    TOOL_CRASHED,
    TOOL_TIMEOUT,
    UNKNOWN_TOOL,
)

logger = logging.getLogger(__name__)

#: A suite's dependency gate (`Suite.dependency_gate`): (task, tool, the episode's successful tool
#: calls so far) → None to go on, or (prerequisites not met, message) to refuse the call before any
#: fault draw.
DependencyGate = Callable[[Task | None, str, Sequence[TraceEvent]], tuple[tuple[str, ...], str] | None]

#: Arguments larger than this (bytes of JSON) are checked in a worker thread, not on the event loop:
#: jsonschema over megabytes (worse, explaining every problem of an invalid call) takes seconds, and
#: every other session's calls would wait for it.
OFF_LOOP_BYTES = 64 * 1024
#: Calls of one episode that may wait for the one running; more are refused (`EPISODE_BUSY`).
MAX_WAITING_CALLS = 16
#: ``ToolCallEvent(**fields)`` without `BaseModel.__init__`'s Python frame and keyword packing: the
#: same validation, the same event, a quarter less of its cost on every call.
_new_tool_call_event = ToolCallEvent.__pydantic_validator__.validate_python
#: A refused call's arguments are recorded only up to this size (else left out, their size noted).
REFUSED_ARGUMENT_BYTES = 4096


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
        if hasattr(backend, "result_limit"):  # a backend that can stop a result before encoding it
            backend.result_limit = recorder.account.budget.result_bytes
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
        self._task_tools: dict[str, frozenset[str]] = {}
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
        *,
        in_process: bool = False,
    ) -> tuple[ToolCallEvent, ToolOutcome | None]:
        """Like `call`, also returning the outcome the agent sees (None if the call was rejected).

        ``in_process``: our own client built the arguments in this process (`server.direct`), so no
        remote peer can have made them large to hold the event loop: they are measured by encoding
        them at once, without first walking them to learn whether they are small.
        """
        if episode.lock.waiting >= MAX_WAITING_CALLS:
            # Refused before it waits (and holds its arguments) at all; it takes no ordinal, so it
            # is recorded at once, without the lock the calls that decide faults hold.
            busy = Refusal(
                EPISODE_BUSY,
                f"this episode already has {episode.lock.waiting} calls waiting for the one running "
                "(its calls run one at a time): the call was not run; wait for answers before sending more",
            )
            return self._refused(episode, tool, dict(arguments or {}), 0, busy), None
        async with episode.lock:
            arguments = dict(arguments or {})
            #: The arguments as JSON when small and plain: measured, and checked later, from one encoding.
            encoded: bytes | None = None
            if not in_process and larger_than(arguments, OFF_LOOP_BYTES):  # measured in a worker thread
                incoming = await anyio.to_thread.run_sync(json_size, arguments)
            else:
                encoded = plain_json(arguments)
                incoming = len(encoded) if encoded is not None else json_size(arguments)
            refusal = self.recorder.account.admit(episode, incoming)
            if refusal is not None:
                return self._refused(episode, tool, arguments, incoming, refusal), None
            event, outcome = await self._call(episode, tool, arguments, meta, incoming, encoded)
            try:
                delay = event.fault.delay_seconds if event.fault is not None else 0.0
                if delay > 0 and self.time_scale > 0:
                    await anyio.sleep(delay * self.time_scale)
            finally:
                # Recorded even when the client gives up during an injected delay: the call took its
                # ordinal and its decision, and a replay must meet the same draws in the same order.
                self._record_call(episode, event, outcome, incoming)
            return event, outcome

    def _record_call(
        self, episode: Episode, event: ToolCallEvent, outcome: ToolOutcome | None, incoming: int
    ) -> None:
        """Record a decided call, keep it for the gate if it succeeded, and measure a written state."""
        if outcome is not None and outcome.text is not None and event.fault is None:
            result_bytes = len(outcome.text)
        else:
            result_bytes = json_size(event.result)
        nbytes = incoming + result_bytes + CALL_BASE_BYTES
        self.recorder.record(episode, event, nbytes)
        if event.is_error:
            return
        gated = self.dependency_gate is not None and self.enforce_dependencies and episode.task is not None
        if gated and event.tool in self._workflow_tools(episode.task):  # type: ignore[arg-type]
            self.recorder.keep(episode, event, nbytes)  # what the gate can need: the task's steps
        spec = self.specs.get(event.tool)
        if spec is not None and spec.access == "write" and episode.tool_state:
            usage = episode.usage
            if usage.state_bytes + nbytes <= STATE_MEASURE_BYTES:
                usage.state_bytes = json_size(episode.tool_state)
            else:  # a big state is not walked on every write: it grew by at most what came in and out
                usage.state_bytes += nbytes
            self.recorder.account.grew(episode)

    def _workflow_tools(self, task: Task) -> frozenset[str]:
        """The tools of ``task``'s ground-truth steps (cached per task id)."""
        tools = self._task_tools.get(task.id)
        if tools is None:
            tools = frozenset(step.tool for step in task.workflow.steps)
            if len(self._task_tools) >= 100_000:
                self._task_tools.clear()
            self._task_tools[task.id] = tools
        return tools

    def _refused(
        self, episode: Episode, tool: str, arguments: dict[str, Any], incoming: int, refusal: Refusal
    ) -> ToolCallEvent:
        """Record a call refused before it ran (no ordinal, no fault draw).

        ``incoming``: the arguments' size if measured (0: not yet). Large arguments are left out of the
        trace, their size noted (an unmeasured size as "more than" `REFUSED_ARGUMENT_BYTES`).
        """
        large = incoming > REFUSED_ARGUMENT_BYTES or (
            not incoming and larger_than(arguments, REFUSED_ARGUMENT_BYTES)
        )
        kept = {} if large else arguments
        result: dict[str, Any] = {"code": refusal.code, "message": refusal.message}
        if large:  # the arguments themselves are left out of the trace
            result["argument_bytes"] = incoming or f"more than {REFUSED_ARGUMENT_BYTES}"
        event = ToolCallEvent(
            episode=episode.id,
            seq=episode.next_seq(),
            tool=tool,
            arguments=kept,
            is_error=True,
            error_code=refusal.code,
            result=result,
        )
        self.recorder.record(episode, event)
        return event

    async def refusal(
        self, episode: Episode, tool: str, arguments: Mapping[str, Any]
    ) -> ToolCallEvent | None:
        """The recorded refusal of a call answered outside the pipeline, if over a memory budget.

        For ``finish`` and the discovery tools; None lets the call go on.
        """
        async with episode.lock:
            arguments = dict(arguments)
            if larger_than(arguments, OFF_LOOP_BYTES):
                incoming = await anyio.to_thread.run_sync(json_size, arguments)
            else:
                incoming = json_size(arguments)
            refusal = self.recorder.account.admit(episode, incoming)
            if refusal is None:
                return None
            return self._refused(episode, tool, arguments, incoming, refusal)

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
            self.recorder.account.finished(episode)
            return event

    async def _call(
        self,
        episode: Episode,
        tool: str,
        arguments: dict[str, Any],
        meta: Mapping[str, Any] | None,
        incoming: int,
        encoded: bytes | None = None,
    ) -> tuple[ToolCallEvent, ToolOutcome | None]:
        """Steps 1 to 5 of one call (``encoded``: its arguments' `plain_json`, if known)."""

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
            if incoming > OFF_LOOP_BYTES:
                problem = await anyio.to_thread.run_sync(
                    _argument_problem, validator, tool, arguments, encoded
                )
            else:
                problem = _argument_problem(validator, tool, arguments, encoded)
            if problem is not None:
                return rejected(INVALID_INPUT, problem)
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
            refusal = self.dependency_gate(episode.task, tool, episode.kept)
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
                json_bytes = len(encoded) if encoded is not None else None
                outcome = await self._run(spec, arguments, episode, meta, json_bytes)
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
        final = self._within_result_limit(tool, final)
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
        event: ToolCallEvent = _new_tool_call_event(
            {
                "episode": episode.id,
                "seq": episode.next_seq(),
                "tool": tool,
                "arguments": arguments,
                "fault": decision.fault,
                "decision": decision,
                "unmet_dependencies": unmet,
                "is_error": final.is_error,
                "error_code": final.error_code,
                "result": final.structured
                if not final.is_error
                else {"code": final.error_code, "message": final.message, **final.details},
            }
        )
        return event

    async def _run(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        episode: Episode,
        meta: Mapping[str, Any] | None,
        json_bytes: int | None = None,
    ) -> ToolOutcome:
        """The backend's outcome, or `TOOL_TIMEOUT` once the call outlasts the time limit.

        ``json_bytes``: the arguments' length as compact JSON, when they were encoded (`plain_json`).
        """
        # A quick tool runs to its end without awaiting: no timer to arm for it.
        quick = self.backend.run_inline(spec, arguments, episode.tool_state, json_bytes)
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

    def _within_result_limit(self, tool: str, outcome: ToolOutcome) -> ToolOutcome:
        """A result over the server's limit for one result becomes `RESULT_TOO_LARGE` (the tool ran)."""
        limit = self.recorder.account.budget.result_bytes
        if limit is None or outcome.is_error or outcome.structured is None:
            return outcome
        size = len(outcome.text) if outcome.text is not None else None
        if size is not None and size <= limit:
            return outcome
        if size is None and not larger_than(outcome.structured, limit):  # looks at no more than that
            return outcome
        return ToolOutcome(
            structured=None, error_code=RESULT_TOO_LARGE, message=result_too_large(tool, size, limit)
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


def _argument_problem(
    validator: Any, tool: str, arguments: dict[str, Any], encoded: bytes | None = None
) -> str | None:
    """Why ``arguments`` are no valid call of ``tool`` (one line), or None.

    ``encoded``: the arguments' `plain_json`, if made (then numbers are looked for in it first, and
    no string holds a lone surrogate).
    """
    # Numbers first: the schema's messages would quote a 400-digit number in full.
    unusable = unusable_number(arguments) if encoded is None else unusable_number_in(arguments, encoded)
    if unusable is not None:
        return f"invalid arguments for {tool}: {unusable}: numbers must be finite and within ±{MAX_NUMBER}"
    broken = lone_surrogate(arguments) if encoded is None else None
    if broken is not None:
        return lone_surrogate_problem(tool, broken)
    problems = argument_problems(validator, arguments)
    return None if problems is None else f"invalid arguments for {tool}: {problems}"


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
