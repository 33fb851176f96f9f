"""One episode as the agent loop plays it: its identity and budgets, and how it ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp_resili.agents.model import (
    Message,
    Reflection,
    ToolDefinition,
)
from mcp_resili.constants import (
    META_EPISODE,
)
from mcp_resili.scoring.termination import NO_STOP_RULES, StopRules
from mcp_resili.tasks.model import Task
from mcp_resili.trace import (
    TraceEvent,
)

#: Seconds a tool call may take before the loop stops waiting (a response that never comes).
CALL_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class EpisodeSpec:
    """Identity of one episode: ``id`` isolates its state; ``fault_key`` and ``seed`` fix its faults."""

    id: str
    fault_key: str
    seed: int
    task: Task | None
    prompt: str
    #: The episode's budget: at most this many model turns, and at most this many tool calls
    #: (``finish`` included, discovery excluded; see `mcp_resili.scoring.termination`).
    max_turns: int = 10
    #: The trial this episode plays (recorded in our server's trace header).
    trial: int | None = None
    #: ``react`` or ``reflexion``: the loop is the same; Reflexion's trials start with ``memory``.
    architecture: str = "react"
    #: The stop rules that may end the episode early.
    stop_rules: StopRules = NO_STOP_RULES
    #: Reflexion: reflections written after earlier failed trials of the same task, oldest first.
    memory: tuple[Reflection, ...] = ()
    #: Input plus output tokens the episode may spend; the turn that crosses it is the last.
    max_tokens: int | None = None
    #: Wall-clock seconds the episode may take (model and tool time together).
    time_limit: float | None = None
    #: Seconds one tool call may take before the loop gives up on its response.
    call_timeout: float = CALL_TIMEOUT_SECONDS

    def meta(self) -> dict[str, Any]:
        """The ``_meta`` our server reads to route and seed the call."""
        named: dict[str, Any] = {
            "id": self.id,
            "task": self.task.id if self.task else None,
            "fault_key": self.fault_key,
            "seed": self.seed,
        }
        if self.trial is not None:
            named["trial"] = self.trial
        return {META_EPISODE: named}


@dataclass(frozen=True)
class EpisodeOutcome:
    """The recorded events, why the episode ended, and the conversation (for a reflection)."""

    events: tuple[TraceEvent, ...]
    termination: str
    turns: int
    #: The stop rule that ended the episode, if one did.
    stop_rule: str | None = None
    messages: tuple[Message, ...] = ()
    tools: tuple[ToolDefinition, ...] = ()
