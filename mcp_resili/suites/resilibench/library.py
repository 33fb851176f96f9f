"""The ResiliBench tool library: 30 tools, 6 categories × 5 operations (paper App. B.1.3, C.1)."""

from __future__ import annotations

from functools import cache

from mcp_resili.suites.resilibench.simulators import SIMULATORS
from mcp_resili.suites.resilibench.world import checked
from mcp_resili.tools.library import ToolLibrary, load_specs


@cache
def resilibench_library() -> ToolLibrary:
    """The 30 ResiliBench tools with their declared errors, dependencies and simulators.

    Every simulator runs behind its world checks (`world.check_call`).
    """
    simulators = {name: checked(name, simulator) for name, simulator in SIMULATORS.items()}
    # Every simulator does a fixed amount of work per argument element except the Monte-Carlo one,
    # whose loop runs ``options.iterations`` times: that one keeps its worker thread.
    inline = frozenset(SIMULATORS) - {"computation_simulator"}
    return ToolLibrary(
        "resilibench",
        load_specs(__package__ or __name__, "tools.json"),
        simulators,
        inline=inline,
        fresh_results=True,
    )


__all__ = ["resilibench_library"]
