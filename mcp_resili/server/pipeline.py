"""The one call pipeline: validate → dependency check → decide fault → run tool → apply fault → record.

It knows nothing of MCP: it turns (episode, tool name, arguments) into a `ToolCallEvent`, which the
MCP layer renders as a ``CallToolResult`` and the recorder writes to the trace.
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
from jsonschema.exceptions import best_match

from mcp_resili.faults import (
    BasePlan,
    CallContext,
    CallOutcome,
    FaultDecision,
    FaultInjector,
    ProtocolState,
    ToolOutcome,
)
from mcp_resili.registry import ToolSpec
from mcp_resili.registry.validator import argument_problems, compiled, shorten
from mcp_resili.server.backend import SimulatedBackend, ToolBackend
from mcp_resili.server.numbers import MAX_NUMBER, non_finite_number, unusable_number
from mcp_resili.server.wire import result_json_text
from mcp_resili.tasks.model import Task
from mcp_resili.trace import FinishEvent, ToolCallEvent, TraceEvent, TraceHeader, dump_event
from mcp_resili.trace.codes import (
    CALL_CANCELLED,
    CANCELLED_MESSAGE,
    DEPENDENCY_NOT_MET,
    INVALID_ARGUMENTS,
    RESPONSE_SCHEMA_MISMATCH,
    TOOL_CRASHED,
    TOOL_TIMEOUT,
    UNKNOWN_TOOL,
    UPSTREAM_CLOSED,
)
from mcp_resili.trace.model import one_line, trace_stem

logger = logging.getLogger(__name__)

#: A suite's dependency gate (`Suite.dependency_gate`): (task, tool, the episode's events so far) →
#: None to go on, or (prerequisites not met, message) to refuse the call before any fault draw.
DependencyGate = Callable[[Task | None, str, Sequence[TraceEvent]], tuple[tuple[str, ...], str] | None]

#: The pipeline's own error codes live with the trace vocabulary; imported here for the server's use.
__all__ = [
    "CALL_CANCELLED",
    "CANCELLED_MESSAGE",
    "DEPENDENCY_NOT_MET",
    "INVALID_ARGUMENTS",
    "RESPONSE_SCHEMA_MISMATCH",
    "TOOL_TIMEOUT",
    "UNKNOWN_TOOL",
    "UPSTREAM_CLOSED",
    "CallPipeline",
    "Episode",
    "TraceRecorder",
    "result_text",
]


class EpisodeLock:
    """A first-come, first-served lock for the calls of one episode, cheap when nobody waits.

    An episode's calls almost never overlap (an agent awaits each answer), so the uncontended
    acquire is two attribute tests: no yield to the event loop, no cancellation checkpoint, no task
    lookup (`anyio.Lock` does all three, a visible share of a call's server cost in memory). A
    waiter is handed the lock by its releaser; one cancelled while waiting passes it on or leaves
    the queue, so a cancelled call never leaves the episode locked.
    """

    __slots__ = ("_held", "_waiters")

    def __init__(self) -> None:
        self._held = False
        self._waiters: collections.deque[anyio.Event] = collections.deque()

    def locked(self) -> bool:
        """Whether a call holds the lock."""
        return self._held

    async def __aenter__(self) -> None:
        if not self._held:
            self._held = True
            return
        handed = anyio.Event()
        self._waiters.append(handed)
        try:
            await handed.wait()
        except BaseException:
            if handed.is_set():  # handed over just as the wait was cancelled: pass it on
                self._release()
            else:
                self._waiters.remove(handed)
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()  # the lock stays held, now by that waiter
        else:
            self._held = False


@dataclass
class Episode:
    """Per-episode server state. Episodes never share any of it."""

    id: str
    task: Task | None
    fault_key: str
    seed: int
    #: The trial this episode plays (part of its fault key), when known.
    trial: int | None = None
    tool_state: dict[str, Any] = field(default_factory=dict)
    ordinals: collections.Counter[str] = field(default_factory=collections.Counter)
    history: list[CallOutcome] = field(default_factory=list)
    seq: int = 0
    #: Calls of one episode are serialised so ordinals and history never depend on scheduling.
    lock: EpisodeLock = field(default_factory=EpisodeLock)
    #: Private scratch space of the fault plan (armed groups, cascades...), per episode.
    fault_state: dict[str, Any] = field(default_factory=dict)
    #: The trace file this episode created (`TraceRecorder`): None until its first event is written.
    trace_path: Path | None = None
    #: Whether ``tool_state`` was seeded from the suite's initial state (on the first call).
    state_ready: bool = False
    #: Every recorded event, in order (what the runner reads back instead of anything on the wire).
    events: list[TraceEvent] = field(default_factory=list)
    #: How many of ``events`` the in-process runner has already taken (`TraceRecorder.take`).
    taken: int = 0
    #: ``time.monotonic()`` of the last call: idle episodes expire (`EpisodeTable`).
    last_used: float = field(default_factory=time.monotonic)
    #: What protocol faults changed for this episode (its catalogue, its session; `server.protocol`).
    protocol: ProtocolState = field(default_factory=ProtocolState)

    def next_seq(self) -> int:
        """The sequence number of the next recorded event."""
        self.seq += 1
        return self.seq


class TraceRecorder:
    """Keeps every episode's events, and writes one JSONL file per episode under ``directory`` (if set).

    An episode's file is created for it (``STEM.jsonl``, see `trace_stem`) and holds its trace alone: a
    name already in the directory (another episode's, or left by another server) is never appended
    to, the episode takes the next free ``STEM-N.jsonl`` (N = 2, 3, ...) instead.
    """

    def __init__(self, directory: Path | None, header: Callable[[Episode], TraceHeader]) -> None:
        self.directory = directory
        self._header = header
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def path(self, episode: Episode) -> Path | None:
        """Where the episode's trace is: the file it created, else the name it will try first."""
        if self.directory is None:
            return None
        return episode.trace_path or self.directory / f"{trace_stem(episode.id)}.jsonl"

    def record(self, episode: Episode, event: TraceEvent) -> None:
        """Append ``event`` (creating the episode's file, header first, for its first event)."""
        episode.events.append(event)
        if self.directory is None:
            return
        line = dump_event(event) + "\n"
        if episode.trace_path is not None:
            with episode.trace_path.open("a", encoding="utf-8") as out:
                out.write(line)
            return
        header = one_line(self._header(episode).model_dump_json()) + "\n"
        episode.trace_path, created = self._create(self.directory, episode.id)
        with created:
            created.write(header + line)

    @staticmethod
    def _create(directory: Path, episode_id: str) -> tuple[Path, IO[str]]:
        """A new trace file for ``episode_id``, opened for writing: its `trace_stem` name if still free."""
        stem = trace_stem(episode_id)
        path, attempt = directory / f"{stem}.jsonl", 1
        while True:
            try:
                out = path.open("x", encoding="utf-8")  # exclusive: never a file anyone else wrote
            except FileExistsError:
                attempt += 1
                path = directory / f"{stem}-{attempt}.jsonl"
                continue
            if attempt > 1:
                logger.warning(
                    "trace file %s.jsonl already exists: episode %r is written to %s", stem, episode_id, path
                )
            return path, out

    @staticmethod
    def take(episode: Episode) -> list[TraceEvent]:
        """The events recorded for ``episode`` since the previous `take`."""
        new = episode.events[episode.taken :]
        episode.taken = len(episode.events)
        return new


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
            episode, tool, arguments, {"code": INVALID_ARGUMENTS, "message": message}, error=True
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
                    INVALID_ARGUMENTS,
                    f"invalid arguments for {tool}: {unusable}: numbers must be finite and within "
                    f"±{MAX_NUMBER}",
                )
        problems = None if validator is None else argument_problems(validator, arguments)
        if problems is not None:
            return rejected(INVALID_ARGUMENTS, f"invalid arguments for {tool}: {problems}")
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
        if isinstance(self.backend, SimulatedBackend):
            # A quick simulator runs to its end without awaiting: no timer to arm for it.
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
