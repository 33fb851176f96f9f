"""The ResiliBench suite: 30 tools, DAG tasks, the probabilistic failure model, three-level scoring."""

from __future__ import annotations

from mcp_resili.registry import resilibench_library
from mcp_resili.scoring.resilibench import score
from mcp_resili.suites import Suite
from mcp_resili.tasks.resilibench import default_tasks
from mcp_resili.tasks.resilibench.prompts import VARIANTS, render_prompt


def resilibench_suite() -> Suite:
    """ResiliBench as served and run by mcp-resili."""
    return Suite(
        name="resilibench",
        description="Data pipelines over 30 simulated tools with declared dependencies.",
        library=resilibench_library(),
        load_tasks=default_tasks,
        render_prompt=render_prompt,
        score=score,
        default_faults="resilibench",
        variants=VARIANTS,
        enforce_dependencies=True,
    )
