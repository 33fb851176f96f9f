"""Protocol faults: chaos one layer below tool results, as data in the same registry as every fault.

A protocol fault is decided like any fault (one injector, one RNG per (seed, fault key, tool, call
ordinal), one ledger entry on the ``tools/call`` it fires on); what it *does* happens in the MCP layer
(`mcp_resili.server.protocol`), the same code for our server and the proxy:

* **catalogue**: ``tool_removed``, ``tool_renamed``, ``tool_added``, ``schema_changed`` — the episode's
  tool list changes and ``notifications/tools/list_changed`` is sent; calls to the old form get the
  error a real server gives (``-32602 Unknown tool``, or an ``isError`` input-validation result);
* **session**: ``session_expired`` (HTTP 404 on the session, the client must initialize again),
  ``unauthorized`` (401 until a refreshed token or a new initialization), ``server_restart`` (the same
  episode continues after re-initialization, its tool state kept or lost);
* **transport**: ``response_delayed``, ``response_dropped``, ``response_duplicated``, ``stream_stalled``,
  ``oversized_result``, ``transport_reset``;
* **pressure**: ``progress_flood``, ``log_flood``, ``elicitation_request``, ``sampling_request``;
* **modern** (what is new and fragile in 2026-07-28, each with its handshake-era equivalent, so one
  profile serves both eras): ``stale_listing`` (a ``ttlMs`` promise broken by a silent catalogue
  change), ``handle_expired`` (the episode's handle expires or comes back unknown mid-task),
  ``input_required`` (rounds the client must answer by retrying; malformed or late answers are asked
  again), ``notification_dropped`` / ``notification_duplicated`` (a catalogue change whose notice on
  the ``subscriptions/listen`` stream, or the session, is lost or doubled), ``discover_changed``
  (``server/discover``, or a new ``initialize``, answers with other capabilities or versions).

`ProtocolFaults` schedules them (probability, nth call of a tool, the episode's nth call — its clock —,
right after a tool, at most once per episode) and may carry a base plan (a suite's result faults) that
decides every call no protocol fault took. `protocol_profile` builds the documented ``light``,
``medium`` and ``heavy`` mixes (``--faults protocol:medium``).
"""

from __future__ import annotations

import copy
import fnmatch
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from mcp_resili.faults.base import (
    BaseFault,
    BasePlan,
    CallContext,
    Fault,
    FaultDecision,
    ToolOutcome,
    parse_plan,
)

#: Error codes the tool-level record of a protocol fault carries (what the ledger says the agent met).
UNKNOWN_TOOL = "UNKNOWN_TOOL"
INVALID_INPUT = "INVALID_INPUT"
SESSION_EXPIRED = "SESSION_EXPIRED"
UNAUTHORIZED = "UNAUTHORIZED"
SERVER_RESTARTED = "SERVER_RESTARTED"
NO_RESPONSE = "NO_RESPONSE"
CONNECTION_RESET = "CONNECTION_RESET"

#: Error codes of the modern family's refusals.
HANDLE_EXPIRED = "EPISODE_EXPIRED"
HANDLE_UNKNOWN = "INVALID_HANDLE"

#: The five families, in the order docs and reports list them.
FAMILIES = ("catalogue", "session", "transport", "pressure", "modern")


class ProtocolFault(BaseFault):
    """A fault applied by the MCP layer. ``apply`` gives the tool-level record the ledger keeps."""

    family: ClassVar[str] = ""

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """Response-side faults keep what the tool did (the MCP layer changes how it is delivered)."""
        if outcome is None:
            raise ValueError(f"{type(self).__name__} is response-side: it needs the tool's outcome")
        return outcome


class TransportFault(ProtocolFault):
    """A fault in how a response is delivered: the tool runs (its side effect happens) first."""

    family: ClassVar[str] = "transport"
    side: Literal["request", "response"] = "response"


class PressureFault(ProtocolFault):
    """Server-initiated traffic around a call: the tool runs, the client must cope with the rest."""

    family: ClassVar[str] = "pressure"
    side: Literal["request", "response"] = "response"


def _refused(code: str, message: str, **details: Any) -> ToolOutcome:
    return ToolOutcome(structured=None, error_code=code, message=message, details=details)


# --- catalogue ------------------------------------------------------------------------------------


class ToolRemoved(ProtocolFault):
    """The called tool disappears from the episode's catalogue (this call included)."""

    type: Literal["tool_removed"] = "tool_removed"
    family: ClassVar[str] = "catalogue"

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """The call meets the removal: unknown tool."""
        return _refused(UNKNOWN_TOOL, f"Unknown tool: {call.tool.name}")


class ToolRenamed(ProtocolFault):
    """The called tool is renamed (``{tool}`` stands for its old name); the old name is unknown."""

    type: Literal["tool_renamed"] = "tool_renamed"
    family: ClassVar[str] = "catalogue"
    new_name: str = Field("{tool}_v2", pattern=r"^[A-Za-z0-9._{}-]{1,100}$")

    def renamed(self, tool: str) -> str:
        """The tool's new name."""
        return self.new_name.replace("{tool}", tool)

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """The call used the old name: unknown tool."""
        new = self.renamed(call.tool.name)
        return _refused(UNKNOWN_TOOL, f"Unknown tool: {call.tool.name}", renamed_to=new)


class ToolAdded(ProtocolFault):
    """A new tool appears (a copy of the called tool under ``name``); the call itself is served."""

    type: Literal["tool_added"] = "tool_added"
    family: ClassVar[str] = "catalogue"
    side: Literal["request", "response"] = "response"
    name: str = Field("{tool}_next", pattern=r"^[A-Za-z0-9._{}-]{1,100}$")

    def added(self, tool: str) -> str:
        """The new tool's name."""
        return self.name.replace("{tool}", tool)


class SchemaChanged(ProtocolFault):
    """The called tool's input schema gets a new version: a required field added, or an enum narrowed.

    ``enum_narrowed`` keeps only the first value of the first enum property; a tool without one gets
    the required field instead (the MCP layer records which change it made).
    """

    type: Literal["schema_changed"] = "schema_changed"
    family: ClassVar[str] = "catalogue"
    change: Literal["required_field", "enum_narrowed"] = "required_field"
    field_name: str = Field("schema_version", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    value: str = "2"

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """The call was written for the old schema: an input-validation error naming the change."""
        change = schema_change(self, call.tool.input_schema)
        return _refused(INVALID_INPUT, f"invalid arguments for {call.tool.name}: {change.describe()}")


# --- session --------------------------------------------------------------------------------------


class SessionExpired(ProtocolFault):
    """The session expires.

    This call and every later request get "session not found" (HTTP 404) until the client
    initializes again.
    """

    type: Literal["session_expired"] = "session_expired"
    family: ClassVar[str] = "session"

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """Refused: the session is gone."""
        return _refused(SESSION_EXPIRED, "Session not found: the session expired; initialize a new one")


class Unauthorized(ProtocolFault):
    """The access token is revoked: 401 until the client presents a refreshed token (or initializes)."""

    type: Literal["unauthorized"] = "unauthorized"
    family: ClassVar[str] = "session"

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """Refused: the token is no longer valid."""
        return _refused(UNAUTHORIZED, "Unauthorized: the access token expired; refresh it and retry")


class ServerRestart(ProtocolFault):
    """The server restarts under the call.

    The connection drops, the session is gone, and the episode continues after re-initialization
    with its tool state kept (``keep_state``) or lost.
    """

    type: Literal["server_restart"] = "server_restart"
    family: ClassVar[str] = "session"
    keep_state: bool = False

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """Refused: the server went away before running the call."""
        message = "Connection closed: the server restarted"
        return _refused(SERVER_RESTARTED, message, keep_state=self.keep_state)


# --- transport ------------------------------------------------------------------------------------


class ResponseDelayed(TransportFault):
    """The tool runs; its response comes late.

    It is sent ``delay_seconds`` (times the server's time scale) late, past a typical client timeout.
    """

    type: Literal["response_delayed"] = "response_delayed"
    delay_seconds: float = Field(60.0, gt=0, le=3600)


class ResponseDropped(TransportFault):
    """The tool runs (its side effect happens); no response is ever sent."""

    type: Literal["response_dropped"] = "response_dropped"

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """The agent never learns the result."""
        return _refused(NO_RESPONSE, "no response was sent (the tool ran)")


class ResponseDuplicated(TransportFault):
    """The tool runs; its response is sent twice (same JSON-RPC id)."""

    type: Literal["response_duplicated"] = "response_duplicated"


class StreamStalled(TransportFault):
    """The tool runs; ``notifications`` progress notifications are sent, then the stream stalls."""

    type: Literal["stream_stalled"] = "stream_stalled"
    notifications: int = Field(3, ge=0, le=1000)

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """The agent never learns the result."""
        return _refused(NO_RESPONSE, f"the stream stalled after {self.notifications} progress notifications")


class OversizedResult(TransportFault):
    """The tool runs; its result carries an extra text block of ``megabytes`` MB."""

    type: Literal["oversized_result"] = "oversized_result"
    megabytes: float = Field(5.0, gt=0, le=64)


class TransportReset(TransportFault):
    """The tool runs; the connection is reset before the response (stdio: the server's output closes)."""

    type: Literal["transport_reset"] = "transport_reset"

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """The agent never learns the result."""
        return _refused(CONNECTION_RESET, "the connection was reset before the response (the tool ran)")


# --- pressure -------------------------------------------------------------------------------------


class ProgressFlood(PressureFault):
    """The tool runs; ``count`` progress notifications precede its response.

    A client that asked for no progress gets log messages instead.
    """

    type: Literal["progress_flood"] = "progress_flood"
    count: int = Field(500, ge=1, le=100_000)


class LogFlood(PressureFault):
    """The tool runs; ``count`` log notifications precede its response."""

    type: Literal["log_flood"] = "log_flood"
    count: int = Field(500, ge=1, le=100_000)


class ElicitationRequest(PressureFault):
    """The tool runs; before its response the server asks the client (its user) to confirm."""

    type: Literal["elicitation_request"] = "elicitation_request"
    message: str = "Please confirm that the operation may continue."


class SamplingRequest(PressureFault):
    """The tool runs; before its response the server asks the client's model for a completion."""

    type: Literal["sampling_request"] = "sampling_request"
    message: str = "Summarise the result of the last operation in one sentence."


# --- modern (2026-07-28) ---------------------------------------------------------------------------


class ModernFault(ProtocolFault):
    """A fault of what 2026-07-28 introduced; in the handshake era it does that era's equivalent."""

    family: ClassVar[str] = "modern"
    side: Literal["request", "response"] = "response"


class StaleListing(ModernFault):
    """The catalogue changes silently under a ``ttlMs`` promise: a client trusting its cache goes stale.

    2026-07-28 listings carry ``ttlMs`` (``ttl_ms``) while the plan holds this fault; when it fires the
    called tool is renamed (``{tool}_v2``) or removed with no notification; the call itself is served.
    Handshake era: the same silent change (no ``notifications/tools/list_changed``).
    """

    type: Literal["stale_listing"] = "stale_listing"
    ttl_ms: int = Field(300_000, ge=1, le=86_400_000)
    change: Literal["renamed", "removed"] = "renamed"
    new_name: str = Field("{tool}_v2", pattern=r"^[A-Za-z0-9._{}-]{1,100}$")

    def renamed(self, tool: str) -> str:
        """The tool's new name (``change="renamed"``)."""
        return self.new_name.replace("{tool}", tool)


class HandleExpired(ModernFault):
    """The episode's handle expires (or, with ``unknown``, comes back unknown) under this call.

    Handle mode: the call is refused as an ``isError`` result naming ``start_episode``; calling it
    again (same client, same task) resumes the same episode under a new handle. Other modes: the
    session expires (as ``session_expired``).
    """

    type: Literal["handle_expired"] = "handle_expired"
    side: Literal["request", "response"] = "request"
    unknown: bool = False

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """Refused: the tool did not run."""
        code = HANDLE_UNKNOWN if self.unknown else HANDLE_EXPIRED
        return _refused(code, "the episode handle is no longer valid; call start_episode again")


class InputRequired(ModernFault):
    """Before its answer the call needs ``rounds`` rounds of input from the client (elicitation).

    2026-07-28: an ``input_required`` result the client answers by retrying the call; an answer that
    does not fit the requested schema (malformed), or, with ``late``, the first retry (its request
    state expired), is asked again; after ``rounds`` good answers the result comes. Handshake era:
    ``rounds`` ``elicitation/create`` requests. A client without the capability is never asked.
    """

    type: Literal["input_required"] = "input_required"
    rounds: int = Field(2, ge=1, le=10)
    late: bool = False
    message: str = "Please confirm that the operation may continue."


class NotificationDropped(ModernFault):
    """A tool appears (``{tool}_next``, as ``tool_added``) and its list-changed notice is lost.

    On the client's ``subscriptions/listen`` stream (2026-07-28) or its session (handshake era).
    """

    type: Literal["notification_dropped"] = "notification_dropped"
    name: str = Field("{tool}_next", pattern=r"^[A-Za-z0-9._{}-]{1,100}$")

    def added(self, tool: str) -> str:
        """The new tool's name."""
        return self.name.replace("{tool}", tool)


class NotificationDuplicated(NotificationDropped):
    """As `NotificationDropped`, but the notice is delivered twice."""

    type: Literal["notification_duplicated"] = "notification_duplicated"  # type: ignore[assignment]


class DiscoverChanged(ModernFault):
    """Later discovery answers change: ``server/discover`` (or a new ``initialize``) for this episode.

    ``capabilities``: prompts, resources, logging and completions are gone and no list changes are
    announced. ``version``: ``server/discover``'s supported versions name an unknown newer revision
    first (the client's stays among them); a new ``initialize`` negotiates another, older version.
    """

    type: Literal["discover_changed"] = "discover_changed"
    change: Literal["capabilities", "version"] = "capabilities"


PROTOCOL_FAULTS: tuple[type[ProtocolFault], ...] = (
    ToolRemoved,
    ToolRenamed,
    ToolAdded,
    SchemaChanged,
    SessionExpired,
    Unauthorized,
    ServerRestart,
    ResponseDelayed,
    ResponseDropped,
    ResponseDuplicated,
    StreamStalled,
    OversizedResult,
    TransportReset,
    ProgressFlood,
    LogFlood,
    ElicitationRequest,
    SamplingRequest,
    StaleListing,
    HandleExpired,
    InputRequired,
    NotificationDropped,
    NotificationDuplicated,
    DiscoverChanged,
)
#: Every protocol fault type tag of both eras, in catalogue order.
ALL_PROTOCOL_TYPES: tuple[str, ...] = tuple(cls.model_fields["type"].default for cls in PROTOCOL_FAULTS)
#: The seventeen handshake-era types (what the ``light``/``medium``/``heavy`` profiles draw from).
PROTOCOL_TYPES: tuple[str, ...] = ALL_PROTOCOL_TYPES[:17]
#: The 2026-07-28 types (the ``modern`` family), each with its handshake-era equivalent.
MODERN_TYPES: tuple[str, ...] = ALL_PROTOCOL_TYPES[17:]
#: Family of each protocol fault type tag.
FAMILY_OF: dict[str, str] = {cls.model_fields["type"].default: cls.family for cls in PROTOCOL_FAULTS}


def has_protocol_faults(plan: Mapping[str, Any] | Iterable[Any] | Any) -> bool:
    """Whether a plan's JSON form (as in a trace header) holds any protocol fault."""
    kind = type(plan)  # asked for every episode scored: the plan's many scalars are settled first
    if kind is str or kind is float or kind is int or kind is bool or plan is None:
        return False
    if isinstance(plan, Mapping):
        if plan.get("type") in FAMILY_OF:
            return True
        return any(has_protocol_faults(value) for value in plan.values())
    if isinstance(plan, list | tuple):
        return any(has_protocol_faults(value) for value in plan)
    return False


# --- what a schema change does --------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaChange:
    """The new version of one tool's input schema: a required field, or an enum cut to ``allowed``."""

    field_name: str
    value: str | None = None
    allowed: tuple[Any, ...] = ()

    def describe(self) -> str:
        """What a call written for the old schema now breaks."""
        if self.value is not None:
            return f"'{self.field_name}' is a required property (schema version {self.value})"
        shown = ", ".join(repr(v) for v in self.allowed)
        return f"'{self.field_name}' must now be one of [{shown}] (the schema was narrowed)"

    def schema(self, old: Mapping[str, Any]) -> dict[str, Any]:
        """The new input schema."""
        new = copy.deepcopy(dict(old))
        properties = dict(new.get("properties") or {})
        if self.value is not None:
            properties[self.field_name] = {
                "type": "string",
                "enum": [self.value],
                "description": f"Schema version; must be {self.value!r}.",
            }
            required = [r for r in new.get("required") or [] if r != self.field_name]
            new["required"] = [*required, self.field_name]
        else:
            narrowed = dict(properties.get(self.field_name) or {})
            narrowed["enum"] = list(self.allowed)
            properties[self.field_name] = narrowed
        new["type"] = new.get("type", "object")
        new["properties"] = properties
        return new

    def problem(self, arguments: Mapping[str, Any]) -> str | None:
        """What is wrong with ``arguments`` under the new schema, or None."""
        if self.value is not None:
            if arguments.get(self.field_name) != self.value:
                return self.describe()
            return None
        if self.field_name in arguments and arguments[self.field_name] not in self.allowed:
            return self.describe()
        return None

    def strip(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as the tool behind still takes them (the added field removed)."""
        if self.value is None:
            return dict(arguments)
        return {k: v for k, v in arguments.items() if k != self.field_name}


def schema_change(fault: SchemaChanged, schema: Mapping[str, Any]) -> SchemaChange:
    """The change ``fault`` makes to ``schema`` (an enum narrowing falls back to a required field)."""
    if fault.change == "enum_narrowed":
        for name, prop in sorted((schema.get("properties") or {}).items()):
            enum = prop.get("enum") if isinstance(prop, dict) else None
            if isinstance(enum, list) and len(enum) > 1:
                return SchemaChange(name, allowed=(enum[0],))
    return SchemaChange(fault.field_name, value=fault.value)


# --- per-episode state the MCP layer keeps --------------------------------------------------------


@dataclass
class ProtocolState:
    """What protocol faults changed for one episode: its catalogue and its session.

    Kept by the server per episode (never shared): ``removed`` names, ``renamed`` (new → old),
    ``added`` (new → original), ``schemas`` (tool → change); ``expired`` holds why the session is gone
    (until the client initializes again), ``revoked`` the refused credential while a 401 stands;
    ``pending`` results held for a 2026-07-28 client answering an input request; ``discover`` how
    discovery answers changed.
    """

    removed: set[str] = field(default_factory=set)
    renamed: dict[str, str] = field(default_factory=dict)
    added: dict[str, str] = field(default_factory=dict)
    schemas: dict[str, SchemaChange] = field(default_factory=dict)
    expired: str | None = None
    revoked: str | None = None
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: How discovery answers changed (`DiscoverChanged`: ``capabilities`` or ``version``), if they did.
    discover: str | None = None

    @property
    def changed(self) -> bool:
        """Whether the catalogue differs from the server's own."""
        return bool(self.removed or self.renamed or self.added or self.schemas)

    def listing(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A ``tools/list`` page (raw JSON tools) as this episode sees it."""
        if not self.changed:
            return tools
        by_name = {t.get("name"): t for t in tools}
        out = []
        for tool in tools:
            name = tool.get("name")
            if name in self.removed or name in self.renamed.values():
                continue
            out.append(self._versioned(tool))
        for new, old in [*self.renamed.items(), *self.added.items()]:
            base = by_name.get(old)
            if base is not None:
                out.append(self._versioned({**base, "name": new}, source=old))
        return out

    def _versioned(self, tool: dict[str, Any], source: str | None = None) -> dict[str, Any]:
        change = self.schemas.get(str(tool.get("name"))) or self.schemas.get(source or "")
        if change is None:
            return tool
        return {**tool, "inputSchema": change.schema(tool.get("inputSchema") or {"type": "object"})}

    def resolve(self, name: str) -> str | None:
        """The server tool a called name reaches, or None when the episode no longer has it."""
        if name in self.removed or (name in self.renamed.values() and name not in self.renamed):
            return None
        return self.renamed.get(name) or self.added.get(name) or name


# --- the schedule ---------------------------------------------------------------------------------


class ProtocolRule(BaseModel):
    """When ``fault`` fires: every condition given must hold, then a roll under ``probability``.

    ``tool``: a glob on the called tool. ``calls``: 1-based call numbers of that tool in the episode.
    ``at_call``: 1-based call numbers of the episode (its clock: "at a time" counts calls, never
    wall-clock time). ``after_tool``: only on the call right after a call to a tool matching this
    glob. ``fault_key``: a glob on the session's fault key (``TASK/TRIAL``). ``once``: at most once
    per episode.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    fault: Fault
    tool: str = "*"
    calls: tuple[int, ...] | None = None
    at_call: tuple[int, ...] | None = None
    after_tool: str | None = None
    #: A glob on the episode's fault key (``TASK/TRIAL``): which sessions the rule applies to.
    fault_key: str = "*"
    probability: float = Field(1.0, ge=0, le=1)
    once: bool = True

    @model_validator(mode="after")
    def _positive(self) -> ProtocolRule:
        for name in ("calls", "at_call"):
            numbers = getattr(self, name)
            if numbers is not None and any(n < 1 for n in numbers):
                raise ValueError(f"{name} numbers are 1-based, got {list(numbers)}")
        return self

    def eligible(self, call: CallContext) -> bool:
        """Whether every condition but the roll holds for ``call``."""
        if not fnmatch.fnmatchcase(call.tool.name, self.tool):
            return False
        if self.fault_key != "*" and not fnmatch.fnmatchcase(call.fault_key, self.fault_key):
            return False
        if self.calls is not None and call.ordinal + 1 not in self.calls:
            return False
        if self.at_call is not None and len(call.history) + 1 not in self.at_call:
            return False
        return self.after_tool is None or (
            bool(call.history) and fnmatch.fnmatchcase(call.history[-1].tool, self.after_tool)
        )


#: Key of the plan's counters in the episode's fault state.
_FIRED = "protocol/fired"


class ProtocolFaults(BasePlan):
    """Protocol fault rules (the first that fires takes the call), then ``base`` for the other calls.

    ``max_per_episode`` caps how many protocol faults one episode meets. The base plan decides from
    its own copy of the call's random stream, so a suite's result faults are drawn exactly as they
    are without protocol faults (a call a protocol fault took gets no result fault).
    """

    kind: Literal["protocol"] = "protocol"
    #: The profile the rules came from (``light``, ``medium``, ``heavy``), or None for hand-written ones.
    profile: str | None = None
    rules: tuple[ProtocolRule, ...]
    max_per_episode: int | None = Field(None, ge=1)
    base: dict[str, Any] | None = None
    _base: BasePlan | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        """Parse the base plan once (the plan is frozen data; this is its parsed form)."""
        self._base = None if self.base is None else parse_plan(self.base)

    def base_plan(self) -> BasePlan | None:
        """The plan under the protocol rules, if any."""
        return self._base

    def decide(self, call: CallContext, rng: random.Random) -> FaultDecision:
        """The first eligible rule whose roll comes in under its probability, else the base plan."""
        fired: dict[int, int] = call.state.setdefault(_FIRED, {})
        base_rng = random.Random()
        base_rng.setstate(rng.getstate())
        if self.max_per_episode is None or sum(fired.values()) < self.max_per_episode:
            for index, rule in enumerate(self.rules):
                if (rule.once and fired.get(index)) or not rule.eligible(call):
                    continue
                roll = rng.random()
                if roll < rule.probability:
                    fired[index] = fired.get(index, 0) + 1
                    return FaultDecision(
                        plan=self.kind, ordinal=call.ordinal, roll=roll, rule=index, fault=rule.fault
                    )
        base = self._base
        if base is None:
            return FaultDecision(plan=self.kind, ordinal=call.ordinal)
        decision = base.decide(call, base_rng)
        return decision.model_copy(update={"reason": f"base plan {base.to_dict().get('kind')}"})


#: Per-call probability of each rule and the episode cap, per profile.
PROFILES: dict[str, tuple[float, int, tuple[str, ...]]] = {
    "light": (
        0.015,
        1,
        (
            "tool_added",
            "schema_changed",
            "response_delayed",
            "response_duplicated",
            "progress_flood",
            "log_flood",
        ),
    ),
    "medium": (0.015, 2, PROTOCOL_TYPES),
    "heavy": (0.04, 4, PROTOCOL_TYPES),
    # The 2026-07-28 faults only; and every type of both eras in one profile.
    "modern": (0.05, 2, MODERN_TYPES),
    "mixed": (0.02, 3, ALL_PROTOCOL_TYPES),
}


def protocol_profile(level: str, base: BasePlan | None = None) -> ProtocolFaults:
    """The documented mix ``level`` (``light``, ``medium``, ``heavy``), over ``base`` if given."""
    if level not in PROFILES:
        raise ValueError(f"unknown protocol profile {level!r}; choose from {', '.join(PROFILES)}")
    probability, cap, types = PROFILES[level]
    by_type = {cls.model_fields["type"].default: cls for cls in PROTOCOL_FAULTS}
    rules = tuple(ProtocolRule(fault=by_type[name](), probability=probability) for name in types)
    return ProtocolFaults(
        profile=level,
        rules=rules,
        max_per_episode=cap,
        base=None if base is None else base.to_dict(),
    )


def protocol_fault_types() -> dict[str, type[BaseFault]]:
    """Every protocol fault type by tag (both eras), in catalogue order."""
    return {cls.model_fields["type"].default: cls for cls in PROTOCOL_FAULTS}
