"""The trace: a JSONL header line, then one event per line (format version 1)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from mcp_resili.errors import UserError, plain_validation_error
from mcp_resili.faults.base import Fault, FaultDecision
from mcp_resili.faults.model_api import ModelFaultDecision
from mcp_resili.trace.encode import model_json

TRACE_FORMAT_VERSION = 1


class TraceHeader(BaseModel):
    """First line of every trace: enough to reproduce and score the episode."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    event: Literal["header"] = "header"
    format_version: Literal[1] = 1
    suite: str
    task: str | None
    episode: str
    seed: int
    fault_plan: dict[str, Any]
    fault_key: str
    model: str | None = None
    variant: str | None = None
    trial: int | None = None
    #: The episode's turn budget when the runner overrode the task's (``run --max-turns``).
    max_turns: int | None = None
    #: The agent architecture (``react``, ``reflexion``) when the runner played the episode; ``agent-cmd``
    #: for an agent program the runner started (``run --agent-cmd``).
    architecture: str | None = None
    #: The model-API fault plan its model calls met (``run --llm-faults``), as ``model_fault`` events
    #: record each decision; None when no gateway stood between the agent and its model.
    model_fault_plan: dict[str, Any] | None = None


class ToolCallEvent(BaseModel):
    """One ``tools/call`` as the server's pipeline handled it, with its fault decision."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    event: Literal["tool_call"] = "tool_call"
    episode: str
    seq: int
    tool: str
    arguments: dict[str, Any]
    fault: Fault | None = None
    decision: FaultDecision | None = None
    unmet_dependencies: tuple[str, ...] = ()
    is_error: bool
    error_code: str | None = None
    result: dict[str, Any] | None = None


class FinishEvent(BaseModel):
    """The agent's explicit completion signal (the ``finish`` tool, or a completion phrase)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    event: Literal["finish"] = "finish"
    episode: str
    seq: int
    status: Literal["completed", "aborted"]
    summary: str = ""


class ModelTurnEvent(BaseModel):
    """One model response, as the runner saw it (runner traces only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    event: Literal["model_turn"] = "model_turn"
    episode: str
    turn: int
    text: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0


class EpisodeEndEvent(BaseModel):
    """Why the runner stopped the episode (runner traces only).

    ``harness_failure``: the agent program crashed (``run --agent-cmd``), or it (or the runner's own
    loop) gave up after a model-API failure the gateway injected; the agent's failure, scored.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    event: Literal["episode_end"] = "episode_end"
    episode: str
    termination: Literal[
        "completed",
        "aborted",
        "agent_stopped",
        "max_turns",
        "max_tokens",
        "time_limit",
        "too_many_errors",
        "loop",
        "context_exceeded",
        "infrastructure_error",
        "harness_failure",
    ]
    turns: int
    detail: str = ""
    #: The stop rules in force (a suite's rule set, e.g. ``resilibench``; ``none``).
    stop_rules: str | None = None
    #: The stop rule that ended the episode (``too_many_calls``...), None when none did.
    stop_rule: str | None = None


class ReflectionEvent(BaseModel):
    """Reflexion's episodic memory (runner traces only).

    ``memory``: a reflection the trial started with, written after an earlier failed trial of the
    same task (``from_trial``). ``written``: the reflection the model wrote after this trial failed,
    kept for the next trials; ``error`` says why there is none when the model call failed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    event: Literal["reflection"] = "reflection"
    episode: str
    role: Literal["memory", "written"]
    from_trial: int
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    error: str = ""


class ProtocolEvent(BaseModel):
    """What happened at the protocol layer of an episode (recorded only while protocol faults are on).

    ``kind``: ``initialize`` (the client initialized or discovered again), ``list_tools`` (it listed
    the tools), ``refused`` (a request met an expired session or a revoked token), ``notified``
    (the server sent ``notifications/tools/list_changed``), ``renamed_call`` (a call used a renamed
    tool's new name), ``delivered`` (how a transport or pressure fault reached the client),
    ``answered`` (the client's answer to an elicitation or sampling request).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    event: Literal["protocol"] = "protocol"
    episode: str
    seq: int
    kind: str
    method: str = ""
    detail: dict[str, Any] = Field(default_factory=dict)


class EndStateEvent(BaseModel):
    """What an episode left behind, observed when it ended (suites on real servers, e.g. task files).

    ``observations`` maps each end-state verifier (by its index) to what it needs: a file's content,
    a query's rows, a repository's log... so that scoring reads the trace alone.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    event: Literal["end_state"] = "end_state"
    episode: str
    seq: int
    observations: dict[str, Any] = Field(default_factory=dict)


class ModelFaultEvent(BaseModel):
    """One model-API call as a fault gateway (``llm-proxy``) handled it, with its fault decision.

    ``ordinal`` counts the episode's model calls from 0 (retries included: each HTTP request is a
    call). ``status`` is what the client got (None: no answer at all, e.g. a reset or a hang it gave
    up on); ``upstream_status`` what the upstream answered (None: not called, or unreachable).
    ``detail`` says how the fault was delivered, or what failed that nobody injected.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    event: Literal["model_fault"] = "model_fault"
    episode: str
    ordinal: int
    api: Literal["openai", "anthropic"]
    stream: bool
    model: str | None = None
    decision: ModelFaultDecision
    status: int | None = None
    upstream_status: int | None = None
    detail: str = ""


TraceEvent = Annotated[
    ToolCallEvent
    | FinishEvent
    | ModelTurnEvent
    | EpisodeEndEvent
    | ReflectionEvent
    | ProtocolEvent
    | EndStateEvent
    | ModelFaultEvent,
    Field(discriminator="event"),
]
_EVENT_ADAPTER: TypeAdapter[TraceEvent] = TypeAdapter(TraceEvent)


class TraceError(UserError):
    """A trace file that cannot be read; the message names the file and line."""


class Trace(BaseModel):
    """A whole episode: header plus events in order."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    header: TraceHeader
    events: tuple[TraceEvent, ...] = ()

    @property
    def tool_calls(self) -> list[ToolCallEvent]:
        """The tool-call events, in order."""
        return [e for e in self.events if isinstance(e, ToolCallEvent)]

    @property
    def finish(self) -> FinishEvent | None:
        """The first explicit completion signal, if any."""
        return next((e for e in self.events if isinstance(e, FinishEvent)), None)

    @property
    def end_state(self) -> EndStateEvent | None:
        """The episode's observed end state, when its suite records one."""
        return next((e for e in self.events if isinstance(e, EndStateEvent)), None)

    @property
    def end(self) -> EpisodeEndEvent | None:
        """The runner's termination record, if the trace came from our runner."""
        return next((e for e in self.events if isinstance(e, EpisodeEndEvent)), None)

    def to_jsonl(self) -> str:
        """Serialise as JSONL: header line, then one line per event."""
        lines = [one_line(model_json(self.header))]
        lines.extend(dump_event(e) for e in self.events)
        return "\n".join(lines) + "\n"

    @classmethod
    def from_lines(cls, lines: Iterable[str], *, origin: str = "<trace>") -> Trace:
        """Parse JSONL lines; blank lines are skipped, anything else malformed raises `TraceError`."""
        numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
        if not numbered:
            raise TraceError(f"{origin}: empty trace")
        try:
            header = TraceHeader.model_validate_json(numbered[0][1])
        except ValidationError as exc:
            raise TraceError(
                f"{origin}:{numbered[0][0]}: not a trace header: {plain_validation_error(exc)}"
            ) from None
        events = []
        for n, line in numbered[1:]:
            try:
                events.append(_EVENT_ADAPTER.validate_json(line))
            except ValidationError as exc:
                raise TraceError(f"{origin}:{n}: invalid event: {plain_validation_error(exc)}") from None
        return cls(header=header, events=tuple(events))

    @classmethod
    def read(cls, path: Path) -> Trace:
        """Read a JSONL trace file."""
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TraceError(f"cannot read trace {path}: {exc}") from None
        return cls.from_lines(trace_lines(text), origin=str(path))


#: Longest trace file name stem in UTF-8 bytes (an episode id may be longer; see `trace_stem`).
MAX_FILE_STEM = 160
#: Hex digits of the id digest in a trace file name (`trace_stem`).
STEM_DIGEST_HEX = 8


def trace_stem(episode_id: str) -> str:
    """The preferred file name stem of an episode's trace: the id itself when it is a safe file name.

    Any character but a letter, a digit, ``-``, ``_`` and ``.`` becomes ``_``. An id that this changed,
    a long one (cut to `MAX_FILE_STEM` bytes) or one of dots only also gets ``-`` and a digest of the
    whole id: ``c/d`` and ``c:d`` get names of their own, and neither takes ``c_d``'s.
    """
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in episode_id)
    if safe == episode_id and len(safe.encode()) <= MAX_FILE_STEM and safe.strip(".") != "":
        return safe
    raw = episode_id.encode("utf-8", errors="surrogatepass")
    digest = hashlib.blake2b(raw, digest_size=STEM_DIGEST_HEX // 2).hexdigest()
    kept = safe.encode()[: MAX_FILE_STEM - len(digest) - 1].decode("utf-8", errors="ignore")
    return f"{kept}-{digest}"


#: Characters JSON leaves unescaped in strings that `str.splitlines` (and other readers) take for line
#: breaks; escaped in trace lines so that one event is always one line.
_LINE_BREAKS_IN_STRINGS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def one_line(json_text: str) -> str:
    """``json_text`` with the line breaks JSON allows inside strings escaped (the same JSON value)."""
    if "\u2028" in json_text or "\u2029" in json_text or "\x85" in json_text:
        return json_text.translate(_LINE_BREAKS_IN_STRINGS)
    return json_text


def trace_lines(text: str) -> list[str]:
    """A JSONL trace's lines, split at newlines only.

    `str.splitlines` also splits at U+2028 and the like, which a trace stored before they were escaped
    (`one_line`) may hold inside a string.
    """
    return text.split("\n")


def dump_event(event: TraceEvent) -> str:
    """One event as a JSON line (no newline)."""
    # The event's own serializer writes exactly what the union's would, without picking the member
    # (`model_json` writes that serializer's text).
    return one_line(model_json(event))


def event_to_dict(event: TraceEvent) -> dict[str, Any]:
    """JSON-ready dict of an event (the whole event, as in a trace file)."""
    return event.model_dump(mode="json")


def event_to_meta(event: TraceEvent) -> dict[str, Any]:
    """The event as sent back in a result's ``_meta``: without what the caller already has.

    The caller knows its arguments and receives a successful call's result as structured content, so
    both are left out (they can be kilobytes, serialised again by MCP on both sides); `event_from_meta`
    puts them back.
    """
    value = event_to_dict(event)
    if isinstance(event, ToolCallEvent):
        del value["arguments"]
        if not event.is_error:
            del value["result"]
    return value


def event_from_dict(raw: Any) -> TraceEvent:
    """Validate an event received as a dict."""
    return _EVENT_ADAPTER.validate_python(raw)


def event_from_meta(raw: Any, arguments: dict[str, Any], structured: dict[str, Any] | None) -> TraceEvent:
    """The full event from a result's ``_meta`` (see `event_to_meta`) plus the call's own data."""
    if isinstance(raw, dict) and raw.get("event") == "tool_call":
        raw = {"arguments": arguments, "result": structured, **raw}
    return event_from_dict(raw)
