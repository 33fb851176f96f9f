"""The ResiliBench suite: 30 tools, DAG tasks, the probabilistic failure model, three-level scoring."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from mcp_resili.registry import resilibench_library
from mcp_resili.report.resilibench import resilibench_sections
from mcp_resili.report.section import ReportSection
from mcp_resili.scoring.resilibench import score
from mcp_resili.store import EpisodeRow
from mcp_resili.suites import Suite
from mcp_resili.tasks.model import Task
from mcp_resili.tasks.resilibench import default_tasks
from mcp_resili.tasks.resilibench.prompts import VARIANTS, render_prompt


@cache
def _tasks_by_id() -> dict[str, Task]:
    return {t.id: t for t in default_tasks()}


def report_sections(rows: Sequence[EpisodeRow]) -> list[ReportSection]:
    """ResiliBench's sections of ``mcp-resili report``."""
    return resilibench_sections(rows, _tasks_by_id().get)


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
        report_sections=report_sections,
    )
