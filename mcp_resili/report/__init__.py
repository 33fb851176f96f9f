"""Reports read stored results; they never write.

Names load on first use (PEP 562): the command line imports `mcp_resili.report.ladder` to name the
fault ladders in its help, which must not pay for the summaries and rich tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_resili.lazy import lazy_exports

if TYPE_CHECKING:
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

#: Public name -> the module that defines it (imported on first use).
_HOMES = {
    "BREAKDOWN_KEYS": "mcp_resili.report.summary",
    "GroupSummary": "mcp_resili.report.summary",
    "Rate": "mcp_resili.report.summary",
    "rate": "mcp_resili.report.summary",
    "summarize": "mcp_resili.report.summary",
    "variant_flaw": "mcp_resili.report.summary",
    "wilson_interval": "mcp_resili.report.summary",
    "summary_table": "mcp_resili.report.terminal",
}

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


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals())
