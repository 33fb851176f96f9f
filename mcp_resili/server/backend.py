"""Where a call goes after the fault decision: a simulated library, or a real upstream MCP server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from mcp_resili.faults import ToolOutcome
from mcp_resili.registry import ToolFailure, ToolLibrary, ToolSpec, ToolState


class ToolBackend(Protocol):
    """Runs a validated call and reports its outcome; a tool's own failure is an error outcome."""

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """The tools this backend serves."""
        ...

    async def run(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        state: ToolState,
        meta: Mapping[str, Any] | None = None,
    ) -> ToolOutcome:
        """Run the tool; ``meta`` is the request's ``_meta`` (a proxy forwards it)."""
        ...


class SimulatedBackend:
    """A `ToolLibrary`'s deterministic simulators."""

    def __init__(self, library: ToolLibrary) -> None:
        self.library = library

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """The library's specs."""
        return self.library.specs

    async def run(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        state: ToolState,
        meta: Mapping[str, Any] | None = None,
    ) -> ToolOutcome:
        """Simulate the call; declared failures become error outcomes."""
        try:
            return ToolOutcome(structured=self.library.simulate(spec.name, arguments, state))
        except ToolFailure as failure:
            return ToolOutcome(structured=None, error_code=failure.code, message=failure.message)
