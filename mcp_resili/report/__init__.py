"""Reports read stored results; they never write."""

from mcp_resili.report.summary import GroupSummary, Rate, rate, summarize, wilson_interval
from mcp_resili.report.terminal import summary_table

__all__ = ["GroupSummary", "Rate", "rate", "summarize", "summary_table", "wilson_interval"]
