"""ToolMaze: DAG tasks C1–C4 with alternative paths, perturbation modes P1–P4, TSR/PRR/RC.

See this folder's README.md.
"""

from __future__ import annotations

from mcp_resili.registry.suites import Suite
from mcp_resili.suites.toolmaze.agents import abort_agent, retry_agent, switch_agent, trusting_agent
from mcp_resili.suites.toolmaze.faults import ToolMazeFaults, parse_toolmaze_spec
from mcp_resili.suites.toolmaze.library import toolmaze_library
from mcp_resili.suites.toolmaze.prompts import VARIANTS, render_prompt
from mcp_resili.suites.toolmaze.report import report_sections, toolmaze_summary, toolmaze_summary_table
from mcp_resili.suites.toolmaze.scoring import score
from mcp_resili.suites.toolmaze.tasks import toolmaze_tasks

__all__ = ["ToolMazeFaults", "suite", "toolmaze_library", "toolmaze_tasks"]


def suite() -> Suite:
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
        summarize=toolmaze_summary,
        summary_table=toolmaze_summary_table,
        report_sections=report_sections,
        fault_specs={"toolmaze": parse_toolmaze_spec},
        agents={
            "retry": retry_agent,
            "switch": switch_agent,
            "abort": abort_agent,
            "trusting": trusting_agent,
        },
        # The generic oracle and naive agents check no data, so a perturbation that corrupts records
        # fails them both alike; these two recover, each its own way (TSR/PRR/RC tell them apart).
        default_models=("scripted:retry", "scripted:switch"),
    )
