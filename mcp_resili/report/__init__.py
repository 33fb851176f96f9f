"""Reports read stored results; they never write."""

from mcp_resili.report.summary import (
    BREAKDOWN_KEYS,
    GroupSummary,
    Rate,
    rate,
    summarize,
    variant_flaw,
    wilson_interval,
)
from mcp_resili.report.terminal import summary_table

__all__ = [
    "BREAKDOWN_KEYS",
    "GroupSummary",
    "Rate",
    "rate",
    "summarize",
    "summary_table",
    "variant_flaw",
    "wilson_interval",
]
