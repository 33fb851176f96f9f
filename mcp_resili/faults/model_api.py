"""Faults at the model API: what a fault gateway (``mcp-resili llm-proxy``) does to one model call.

Faults are data, like the MCP faults: pydantic models tagged by ``type``, listed in rules, decided per
call by one plan with an RNG derived from (seed, episode fault key, `MODEL_CALL`, model-call ordinal),
and every decision is a ledger entry (`ModelFaultDecision`) written to the episode's trace as a
`mcp_resili.trace.ModelFaultEvent`. What a fault *does* on the wire, in each vendor's exact shape,
happens in `mcp_resili.modelapi` (the same code for OpenAI Chat Completions and Anthropic Messages,
streaming or not).

Families (`ModelFaultBase.family`):

* ``error``: the gateway answers with the vendor's error (the upstream is not called): ``rate_limit``
  (429, with or without ``retry-after``), ``server_error`` (500/502/503/529), ``context_length``,
  ``content_filter``;
* ``transport``: ``connection_reset`` (the connection is reset before any byte of an answer), ``hang``
  (no headers until the client gives up, or for ``seconds``), ``slow_first_token``, ``slow_tokens``;
* ``stream``: ``stream_cut`` (mid-event, or mid-tool-call), ``malformed_sse`` (a line that is no event);
* ``content``: the upstream's answer changed: ``tool_arguments`` (truncated or invalid JSON),
  ``empty_completion``, ``max_tokens`` (``finish_reason: length`` / ``stop_reason: max_tokens``).

Profiles ``llm:light``, ``llm:medium`` and ``llm:heavy`` are rule lists (`MODEL_FAULT_PROFILES`); a
TOML or JSON file holds ``[[rules]]`` of the same shape (`parse_model_fault_spec`).
"""

from __future__ import annotations

import json
import random
import tomllib
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mcp_resili.errors import plain_validation_error
from mcp_resili.faults.base import FaultSpecError
from mcp_resili.faults.rng import derive_rng

#: The "tool" coordinate of a model call's RNG: no MCP tool name can contain ``@``, so a model call
#: never shares draws with a tool call of the same episode and ordinal.
MODEL_CALL = "@model"

Api = Literal["openai", "anthropic"]
APIS: tuple[Api, ...] = ("openai", "anthropic")


class ModelFaultBase(BaseModel):
    """A model-API fault. Subclasses set ``type: Literal[...]`` and their `family`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: ``error``, ``transport``, ``stream`` or ``content`` (see the module docstring).
    family: ClassVar[str] = ""
    #: Whether the gateway answers it alone, without calling the upstream.
    answers_alone: ClassVar[bool] = False


class RateLimited(ModelFaultBase):
    """HTTP 429; ``retry_after`` seconds (times the gateway's time scale) in ``retry-after``, or none."""

    type: Literal["rate_limit"] = "rate_limit"
    family: ClassVar[str] = "error"
    answers_alone: ClassVar[bool] = True
    retry_after: float | None = Field(None, ge=0)


class ServerError(ModelFaultBase):
    """HTTP 500, 502, 503 or 529 (Anthropic's "overloaded") in the vendor's error shape."""

    type: Literal["server_error"] = "server_error"
    family: ClassVar[str] = "error"
    answers_alone: ClassVar[bool] = True
    status: Literal[500, 502, 503, 529] = 500


class ContextLength(ModelFaultBase):
    """HTTP 400: the conversation is longer than the model's context window."""

    type: Literal["context_length"] = "context_length"
    family: ClassVar[str] = "error"
    answers_alone: ClassVar[bool] = True
    limit: int = Field(128_000, ge=1)


class ContentFilter(ModelFaultBase):
    """HTTP 400: the request or its answer was blocked by the provider's content filter."""

    type: Literal["content_filter"] = "content_filter"
    family: ClassVar[str] = "error"
    answers_alone: ClassVar[bool] = True


class ConnectionReset(ModelFaultBase):
    """The connection is reset (TCP RST) before any byte of the answer; the upstream is not called."""

    type: Literal["connection_reset"] = "connection_reset"
    family: ClassVar[str] = "transport"
    answers_alone: ClassVar[bool] = True


class Hang(ModelFaultBase):
    """No headers: until the client gives up (``seconds`` None), or for ``seconds`` then the answer."""

    type: Literal["hang"] = "hang"
    family: ClassVar[str] = "transport"
    seconds: float | None = Field(None, ge=0)


class SlowFirstToken(ModelFaultBase):
    """``seconds`` before the first event of a stream (headers come at once), or before a whole answer."""

    type: Literal["slow_first_token"] = "slow_first_token"
    family: ClassVar[str] = "transport"
    seconds: float = Field(5.0, ge=0)


class SlowTokens(ModelFaultBase):
    """``seconds`` before every event of a stream; a whole answer trickles in eight pieces."""

    type: Literal["slow_tokens"] = "slow_tokens"
    family: ClassVar[str] = "transport"
    seconds: float = Field(0.5, ge=0)


class StreamCut(ModelFaultBase):
    """The connection closes mid-answer.

    ``mid_event``: after ``after_events`` whole events, half of the next one. ``mid_tool_call``: right
    after the first event carrying tool-call arguments, half of the next one. A whole (non-streamed)
    answer is cut inside its JSON (inside the first tool call's arguments for ``mid_tool_call``).
    """

    type: Literal["stream_cut"] = "stream_cut"
    family: ClassVar[str] = "stream"
    at: Literal["mid_event", "mid_tool_call"] = "mid_event"
    after_events: int = Field(2, ge=0)


class MalformedEvent(ModelFaultBase):
    """After ``after_events`` events, a ``data:`` line that is not JSON; the stream then goes on.

    A whole answer becomes a body that is not JSON.
    """

    type: Literal["malformed_sse"] = "malformed_sse"
    family: ClassVar[str] = "stream"
    after_events: int = Field(1, ge=0)


class ToolArguments(ModelFaultBase):
    """Every tool call's arguments arrive ``truncated`` (cut in half) or ``invalid`` (not JSON)."""

    type: Literal["tool_arguments"] = "tool_arguments"
    family: ClassVar[str] = "content"
    mode: Literal["truncated", "invalid"] = "truncated"


class EmptyCompletion(ModelFaultBase):
    """A well-formed answer with no text and no tool call (the upstream is not called)."""

    type: Literal["empty_completion"] = "empty_completion"
    family: ClassVar[str] = "content"
    answers_alone: ClassVar[bool] = True


class MaxTokens(ModelFaultBase):
    """The answer stops after ``keep_chars`` characters of text and tool arguments, as out of tokens.

    OpenAI: ``finish_reason: "length"``; Anthropic: ``stop_reason: "max_tokens"``.
    """

    type: Literal["max_tokens"] = "max_tokens"
    family: ClassVar[str] = "content"
    keep_chars: int = Field(8, ge=0)


ModelFault = Annotated[
    RateLimited
    | ServerError
    | ContextLength
    | ContentFilter
    | ConnectionReset
    | Hang
    | SlowFirstToken
    | SlowTokens
    | StreamCut
    | MalformedEvent
    | ToolArguments
    | EmptyCompletion
    | MaxTokens,
    Field(discriminator="type"),
]

#: Every model-API fault type by tag, in the order docs list them.
MODEL_FAULT_TYPES: dict[str, type[ModelFaultBase]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        RateLimited,
        ServerError,
        ContextLength,
        ContentFilter,
        ConnectionReset,
        Hang,
        SlowFirstToken,
        SlowTokens,
        StreamCut,
        MalformedEvent,
        ToolArguments,
        EmptyCompletion,
        MaxTokens,
    )
}


class ModelFaultRule(BaseModel):
    """Inject ``fault`` into the model calls this rule covers, each with ``probability``.

    ``calls``: 1-based model-call numbers in the episode (all when omitted); ``api``: only calls to
    that API; ``stream``: only streamed (True) or whole (False) answers.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    calls: tuple[int, ...] | None = None
    probability: float = Field(1.0, ge=0, le=1)
    api: Api | None = None
    stream: bool | None = None
    fault: ModelFault

    @model_validator(mode="after")
    def _positive_calls(self) -> ModelFaultRule:
        if self.calls is not None and any(n < 1 for n in self.calls):
            raise ValueError(f"call numbers are 1-based, got {list(self.calls)}")
        return self

    def covers(self, ordinal: int, api: Api, stream: bool) -> bool:
        """Whether call ``ordinal`` (0-based) of ``api`` is eligible (before the probability roll)."""
        return (
            (self.calls is None or ordinal + 1 in self.calls)
            and (self.api is None or self.api == api)
            and (self.stream is None or self.stream == stream)
        )


class ModelFaultDecision(BaseModel):
    """One ledger entry: what the plan decided for one model call, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    plan: str
    ordinal: int
    roll: float | None = None
    rule: int | None = None
    fault: ModelFault | None = None

    @property
    def fired(self) -> bool:
        """Whether a fault is injected into this call."""
        return self.fault is not None


class ModelFaultPlan(BaseModel):
    """An ordered list of rules; the first one that covers a call and rolls under its probability fires.

    Every covering rule draws one number from the call's RNG, in order (as `RuleFaults` does for tool
    calls), so a decision depends only on (seed, episode, ordinal, API, streaming).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "rules"
    rules: tuple[ModelFaultRule, ...] = ()

    def decide(self, ordinal: int, api: Api, stream: bool, rng: random.Random) -> ModelFaultDecision:
        """The ledger entry for model call ``ordinal`` (0-based) of its episode."""
        for index, rule in enumerate(self.rules):
            if not rule.covers(ordinal, api, stream):
                continue
            roll = rng.random()
            if roll < rule.probability:
                return ModelFaultDecision(
                    plan=self.name, ordinal=ordinal, roll=roll, rule=index, fault=rule.fault
                )
        return ModelFaultDecision(plan=self.name, ordinal=ordinal)


def model_call_rng(seed: int, fault_key: str, ordinal: int) -> random.Random:
    """The RNG of model call ``ordinal`` of the episode whose fault key is ``fault_key``."""
    return derive_rng(seed, fault_key, MODEL_CALL, ordinal)


def _rule(probability: float, fault: dict[str, Any], **where: Any) -> dict[str, Any]:
    return {"probability": probability, "fault": fault, **where}


#: The documented profiles (docs/llm.md), as data: 3%, 8-9% and 17-20% of calls faulted (whole answers /
#: streamed ones). Production model APIs fail on the order of 1-5% of calls; ``heavy`` is a stress test.
MODEL_FAULT_PROFILES: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "light": [
        _rule(0.010, {"type": "rate_limit", "retry_after": 1.0}),
        _rule(0.005, {"type": "server_error", "status": 500}),
        _rule(0.005, {"type": "server_error", "status": 529}, api="anthropic"),
        _rule(0.005, {"type": "server_error", "status": 503}, api="openai"),
        _rule(0.010, {"type": "slow_first_token", "seconds": 3.0}),
    ],
    "medium": [
        _rule(0.020, {"type": "rate_limit", "retry_after": 2.0}),
        _rule(0.010, {"type": "rate_limit"}),
        _rule(0.010, {"type": "server_error", "status": 500}),
        _rule(0.010, {"type": "server_error", "status": 529}, api="anthropic"),
        _rule(0.010, {"type": "server_error", "status": 503}, api="openai"),
        _rule(0.005, {"type": "server_error", "status": 502}),
        _rule(0.005, {"type": "connection_reset"}),
        _rule(0.010, {"type": "slow_first_token", "seconds": 5.0}),
        _rule(0.005, {"type": "slow_tokens", "seconds": 0.2}, stream=True),
        _rule(0.005, {"type": "stream_cut", "at": "mid_event"}, stream=True),
        _rule(0.005, {"type": "tool_arguments", "mode": "truncated"}),
        _rule(0.005, {"type": "empty_completion"}),
        _rule(0.005, {"type": "max_tokens"}),
    ],
    "heavy": [
        _rule(0.040, {"type": "rate_limit", "retry_after": 2.0}),
        _rule(0.020, {"type": "rate_limit"}),
        _rule(0.020, {"type": "server_error", "status": 500}),
        _rule(0.020, {"type": "server_error", "status": 529}, api="anthropic"),
        _rule(0.020, {"type": "server_error", "status": 503}, api="openai"),
        _rule(0.010, {"type": "server_error", "status": 502}),
        _rule(0.010, {"type": "connection_reset"}),
        _rule(0.005, {"type": "hang", "seconds": 60.0}),
        _rule(0.020, {"type": "slow_first_token", "seconds": 5.0}),
        _rule(0.010, {"type": "slow_tokens", "seconds": 0.2}, stream=True),
        _rule(0.010, {"type": "stream_cut", "at": "mid_event"}, stream=True),
        _rule(0.010, {"type": "stream_cut", "at": "mid_tool_call"}, stream=True),
        _rule(0.005, {"type": "malformed_sse"}, stream=True),
        _rule(0.010, {"type": "tool_arguments", "mode": "truncated"}),
        _rule(0.005, {"type": "tool_arguments", "mode": "invalid"}),
        _rule(0.010, {"type": "empty_completion"}),
        _rule(0.010, {"type": "max_tokens"}),
        _rule(0.002, {"type": "context_length"}),
        _rule(0.002, {"type": "content_filter"}),
    ],
}
#: The SPEC prefix of the profiles: ``llm:medium``.
PROFILE_PREFIX = "llm:"


def model_fault_profile(name: str) -> ModelFaultPlan:
    """The profile ``name`` (``none``, ``light``, ``medium``, ``heavy``) as a plan."""
    if name not in MODEL_FAULT_PROFILES:
        raise FaultSpecError(
            f"unknown model-API fault profile {name!r}; known: {', '.join(MODEL_FAULT_PROFILES)}"
        )
    return ModelFaultPlan.model_validate(
        {"name": f"{PROFILE_PREFIX}{name}", "rules": MODEL_FAULT_PROFILES[name]}
    )


def parse_model_fault_spec(spec: str) -> ModelFaultPlan:
    """``none``, ``llm:none|light|medium|heavy``, or a TOML/JSON file with ``[[rules]]``."""
    if spec == "none":
        return model_fault_profile("none")
    if spec.startswith(PROFILE_PREFIX):
        return model_fault_profile(spec[len(PROFILE_PREFIX) :])
    path = Path(spec)
    if path.suffix.lower() not in (".toml", ".json"):
        raise FaultSpecError(
            f"unknown model-API fault spec {spec!r}; use none, llm:light, llm:medium, llm:heavy "
            "or a .toml/.json file of rules"
        )
    return load_model_fault_file(path)


def load_model_fault_file(path: Path) -> ModelFaultPlan:
    """A plan from a TOML or JSON file: ``rules``, each ``{calls, probability, api, stream, fault}``."""
    try:
        text = path.read_text(encoding="utf-8")
        raw = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise FaultSpecError(f"cannot read fault file {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise FaultSpecError(f"invalid fault file {path}: expected a table/object with 'rules'")
    try:
        return ModelFaultPlan.model_validate({"name": path.name, **raw})
    except ValidationError as exc:
        raise FaultSpecError(f"invalid fault file {path}: {plain_validation_error(exc)}") from None
