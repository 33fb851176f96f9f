"""The ResiliBench suite: 30 tools, DAG tasks, the probabilistic failure model, three-level scoring.

The suite's task list is the full 5,040-task set (paper Table 7); a run with no task selection uses
the 40-task default set (its first 8 tasks of every type).
"""

from __future__ import annotations

from mcp_resili.registry import resilibench_library
from mcp_resili.scoring.resilibench import score
from mcp_resili.suites import Suite
from mcp_resili.tasks.model import Task
from mcp_resili.tasks.resilibench import default_tasks, full_tasks
from mcp_resili.tasks.resilibench.prompts import VARIANTS, render_prompt


def _render(task: Task, variant: str) -> str:
    return render_prompt(task, variant, discovery=True)


def resilibench_suite() -> Suite:
    """ResiliBench as served and run by mcp-resili."""
    return Suite(
        name="resilibench",
        description="Data pipelines over 30 simulated tools with declared dependencies.",
        library=resilibench_library(),
        load_tasks=full_tasks,
        load_default_tasks=default_tasks,
        render_prompt=_render,
        score=score,
        default_faults="resilibench",
        variants=VARIANTS,
        enforce_dependencies=True,
        discovery=True,
    )
