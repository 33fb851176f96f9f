"""Tools as data: specifications (schemas, declared errors, dependencies) bound to simulators (code)."""

from mcp_resili.tools.library import Simulator, ToolFailure, ToolLibrary, ToolState, load_specs
from mcp_resili.tools.spec import ErrorCode, ToolSpec

__all__ = ["ErrorCode", "Simulator", "ToolFailure", "ToolLibrary", "ToolSpec", "ToolState", "load_specs"]
