"""The ResiliBench suite: 30 tools, DAG tasks, the probabilistic failure model, three-level scoring.

The suite's task list is the full 5,040-task set (paper Table 7); a run with no task selection uses
the 40-task default set (its first 8 tasks of every type).
"""

from __future__ import annotations

from collections.abc import Sequence

from mcp_resili.registry import resilibench_library
from mcp_resili.report.resilibench import resilibench_sections
from mcp_resili.report.section import ReportSection
from mcp_resili.scoring.resilibench import score
from mcp_resili.store import EpisodeRow
from mcp_resili.suites import Suite
from mcp_resili.tasks.model import Task
from mcp_resili.tasks.resilibench import default_tasks, full_tasks
from mcp_resili.tasks.resilibench.prompts import VARIANTS, render_prompt


def _render(task: Task, variant: str) -> str:
    return render_prompt(task, variant, discovery=True)


def _task_or_none(task_id: str) -> Task | None:
    from mcp_resili.suites import UnknownTaskError, get_suite

    try:
        return get_suite("resilibench").task(task_id)
    except UnknownTaskError:
        return None


def report_sections(rows: Sequence[EpisodeRow]) -> list[ReportSection]:
    """ResiliBench's sections of ``mcp-resili report``."""
    return resilibench_sections(rows, _task_or_none)


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
        report_sections=report_sections,
        discovery=True,
    )
