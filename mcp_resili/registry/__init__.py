"""Tool specifications (data) and their simulated implementations (code)."""

from mcp_resili.registry.library import Simulator, ToolFailure, ToolLibrary, ToolState, load_specs
from mcp_resili.registry.resilibench import resilibench_library
from mcp_resili.registry.spec import ErrorCode, ToolSpec

__all__ = [
    "ErrorCode",
    "Simulator",
    "ToolFailure",
    "ToolLibrary",
    "ToolSpec",
    "ToolState",
    "load_specs",
    "resilibench_library",
]
