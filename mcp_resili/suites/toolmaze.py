"""The ToolMaze suite: DAG tasks C1–C4 with alternative paths, perturbation modes P1–P4, TSR/PRR/RC."""

from __future__ import annotations

from mcp_resili.registry.toolmaze import toolmaze_library
from mcp_resili.report.toolmaze import report_sections, toolmaze_summary, toolmaze_summary_table
from mcp_resili.scoring.toolmaze import score
from mcp_resili.suites import Suite
from mcp_resili.tasks.toolmaze import toolmaze_tasks
from mcp_resili.tasks.toolmaze.prompts import VARIANTS, render_prompt


def toolmaze_suite() -> Suite:
    """ToolMaze as served and run by mcp-resili (``--faults toolmaze:P1`` … ``toolmaze:P4``)."""
    return Suite(
        name="toolmaze",
        description="Multi-step tasks over simulated tools with interchangeable alternatives.",
        library=toolmaze_library(),
        load_tasks=toolmaze_tasks,
        render_prompt=render_prompt,
        score=score,
        default_faults="none",
        variants=VARIANTS,
        enforce_dependencies=False,
        stop_rules=False,
        summarize=toolmaze_summary,
        summary_table=toolmaze_summary_table,
        report_sections=report_sections,
    )
