"""Contract checks for any MCP server (`mcp-resili check`, and a pytest fixture)."""

from mcp_resili.check.contract import CheckError, check_server, check_target, sample_arguments
from mcp_resili.check.report import CheckReport, Finding
from mcp_resili.check.schema import check_tool_schemas, strict_mode_problems

__all__ = [
    "CheckError",
    "CheckReport",
    "Finding",
    "check_server",
    "check_target",
    "check_tool_schemas",
    "sample_arguments",
    "strict_mode_problems",
]
