"""The one model interface every agent implements: scripted agents today, hosted providers next.

The agent loop owns the conversation (so it owns the trace); a model only turns a request into a
response. Provider failures raise `InfrastructureError` and are never scored as agent failures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from mcp_resili.tasks.model import Task

#: Agent architectures the loop supports: plain ReAct, or Reflexion (a reflection after a failed step).
ARCHITECTURES = ("react", "reflexion")


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as offered to the model (from MCP ``tools/list``)."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolResult:
    """What came back for one `ToolCall`: the text the model reads, plus structured data if any."""

    call_id: str
    name: str
    text: str
    is_error: bool
    structured: dict[str, Any] | None = None


@dataclass(frozen=True)
class UserMessage:
    """A user turn."""

    text: str


@dataclass(frozen=True)
class AssistantMessage:
    """A model turn: text and the tool calls it made."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class ToolResultsMessage:
    """The results of the previous assistant turn's tool calls, in call order."""

    results: tuple[ToolResult, ...]


Message = UserMessage | AssistantMessage | ToolResultsMessage


@dataclass(frozen=True)
class ModelRequest:
    """Everything a model sees for one turn.

    ``task`` carries the ground truth for scripted agents only; hosted providers must ignore it.
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...]
    system: str | None = None
    task: Task | None = None
    max_turns: int = 10


#: ``ModelResponse.extra`` key: a turn without tool calls continues with this user message instead
#: of ending the episode (the turn still counts). Used by the text protocol's reminders.
CONTINUE_WITH = "continue_with"


@dataclass(frozen=True)
class ModelResponse:
    """One model turn."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str = "end_turn"
    input_tokens: int = 0
    output_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class InfrastructureError(Exception):
    """The model API failed (after retries): the episode is void, not an agent failure."""


class Model(Protocol):
    """A model provider: ``name`` is its spec (``scripted:oracle``, ``anthropic:MODEL``, ...)."""

    @property
    def name(self) -> str:
        """The model spec this instance answers to."""
        ...

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Produce the next turn."""
        ...
