"""Episode environments: where a suite's calls go when its tools are real MCP servers, not simulators.

An environment is a `ToolBackend` that also owns per-episode state outside the server: it lays an
episode's fixture and binds servers to it when the episode opens (`open_episode`), offers the tools
of the episode's own servers (`episode_tools`), and, when the episode ends, observes the end state its
verifiers judge (`end_episode`), which the server records in the trace, so scoring stays pure. A
suite names its environment's factory in ``Suite.environment``; whoever builds a `ResiliServer` for
such a suite enters the environment first (``async with``) and hands it over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, Self

from mcp_resili.faults import ToolOutcome
from mcp_resili.tasks.model import Task
from mcp_resili.tools import ToolSpec, ToolState
from mcp_resili.trace import ToolCallEvent


class Episode(Protocol):
    """What an environment reads of one episode (the server's `mcp_resili.server.episode.Episode`)."""

    @property
    def id(self) -> str:
        """The episode's id."""

    @property
    def task(self) -> Task | None:
        """The episode's task, if any."""

    @property
    def tool_state(self) -> dict[str, Any]:
        """The episode's tool state."""


class EpisodeEnvironment(Protocol):
    """A suite's servers and per-episode state (see the module docstring)."""

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """Every tool any episode may be offered (the pipeline knows them all)."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def run(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        state: ToolState,
        meta: Mapping[str, Any] | None = None,
    ) -> ToolOutcome:
        """Run a call of an opened episode (``state`` is its tool state)."""
        ...

    def run_inline(
        self, spec: ToolSpec, arguments: dict[str, Any], state: ToolState, json_bytes: int | None = None
    ) -> ToolOutcome | None:
        """The outcome of a call that finishes without awaiting; None for a real server's calls."""
        ...

    async def open_episode(self, episode: Episode) -> None:
        """Lay the episode's fixture and bind its servers; idempotent."""
        ...

    def episode_tools(self, task: Task | None) -> Sequence[ToolSpec]:
        """The tools an episode of ``task`` is offered (None: every tool)."""
        ...

    async def end_episode(self, episode: Episode) -> dict[str, Any] | None:
        """Observe the episode's end state and release what it held; None if it never opened."""
        ...

    def result_text(self, event: ToolCallEvent, outcome: ToolOutcome | None) -> str:
        """The text an agent reads for a call (the server's own text while the call was untouched)."""
        ...
