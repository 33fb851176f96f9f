"""The ReliabilityBench tool library: 20 stateful tools over four domains (paper App. A)."""

from __future__ import annotations

from functools import cache

from mcp_resili.suites.reliabilitybench.simulators import MUTABLE_KEYS, SIMULATORS
from mcp_resili.tools.library import ToolLibrary, load_specs

DOMAINS = ("scheduling", "travel", "support", "ecommerce")


@cache
def reliabilitybench_library() -> ToolLibrary:
    """The 20 ReliabilityBench tools (specs in ``tools.json``; ``category`` is the domain)."""
    return ToolLibrary("reliabilitybench", load_specs(__package__ or __name__, "tools.json"), SIMULATORS)


__all__ = ["DOMAINS", "MUTABLE_KEYS", "reliabilitybench_library"]
