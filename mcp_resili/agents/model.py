"""The one model interface every agent implements: scripted agents today, hosted providers next.

The agent loop owns the conversation (so it owns the trace); a model only turns a request into a
response. Provider failures raise `InfrastructureError` and are never scored as agent failures.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

if TYPE_CHECKING:
    from mcp_resili.tasks.model import Task

#: Agent architectures the runner supports: ReAct (the plain tool loop), or Reflexion (Shinn et al.,
#: 2023): after a failed trial the model writes a reflection that the next trials of the same task
#: start with.
ARCHITECTURES = ("react", "reflexion")
#: Reflexion's episodic memory: the most recent reflections a trial starts with (Shinn et al. keep 1-3).
MEMORY_SIZE = 3
#: Characters kept of one reflection, so the memory stays bounded whatever the model writes.
REFLECTION_CHARS = 2000


@dataclass(frozen=True)
class Reflection:
    """A reflection the model wrote after failed trial ``trial`` of a task (Reflexion's memory)."""

    trial: int
    text: str


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
    #: ``act``: the next turn of the episode. ``reflect``: Reflexion's self-reflection after a failed
    #: trial; the answer's text is kept as memory and any tool call in it is ignored.
    purpose: Literal["act", "reflect"] = "act"
    #: The reflections this trial started with (also in the first user message, which is what a
    #: hosted model reads); scripted agents may read them here.
    memory: tuple[Reflection, ...] = ()


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


@dataclass
class HarnessWait:
    """What the harness, not the agent, is waiting on in the current episode (None: nothing)."""

    reason: str | None = None
    #: Whether the harness waited at all (a retry, a rate limit) since the model call began.
    waited: bool = False
    #: When the episode's time runs out (``anyio.current_time()``): a model call failing after it is
    #: not retried, since its answer could no longer count.
    deadline: float = math.inf

    def hold(self, reason: str) -> None:
        """The harness starts waiting on ``reason``."""
        self.reason = reason
        self.waited = True

    def overdue(self) -> bool:
        """Whether the episode's time has run out."""
        return anyio.current_time() >= self.deadline


#: Set per episode by `play_episode`: provider retries and the run's rate limits say here what they
#: wait on, so a time limit that runs out meanwhile ends the episode as the harness's trouble.
HARNESS_WAIT: ContextVar[HarnessWait | None] = ContextVar("mcp_resili_harness_wait", default=None)


@contextmanager
def harness_waiting(reason: str) -> Iterator[None]:
    """Mark the episode as waiting on the harness for the body (left marked if it is cut short)."""
    wait = HARNESS_WAIT.get()
    if wait is not None:
        wait.hold(reason)
    yield
    if wait is not None:
        wait.reason = None


class ContextWindowExceededError(Exception):
    """The conversation no longer fits the model's context: the episode ends as ``context_exceeded``.

    Unlike `InfrastructureError` this is the agent's outcome (its conversation grew too long), so
    the episode is scored.
    """


class Model(Protocol):
    """A model provider: ``name`` is its spec (``scripted:oracle``, ``anthropic:MODEL``, ...)."""

    @property
    def name(self) -> str:
        """The model spec this instance answers to."""
        ...

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Produce the next turn."""
        ...
