"""ResiliBench: 30 tools, DAG tasks, the probabilistic failure model, three-level scoring.

The suite's task list is the full 5,040-task set (paper Table 7); a run with no task selection uses
the 40-task default set (its first 8 tasks of every type). See this folder's README.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from mcp_resili.registry.suites import Suite
from mcp_resili.report.section import ReportSection
from mcp_resili.report.summary import ComponentColumn
from mcp_resili.store import EpisodeRow
from mcp_resili.suites.resilibench.agents import GreedyRetryAgent, PlanFollowerAgent
from mcp_resili.suites.resilibench.faults import ResiliBenchFaults, parse_resilibench_spec
from mcp_resili.suites.resilibench.gate import task_dag_gate
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.prompts import VARIANTS, render_prompt
from mcp_resili.suites.resilibench.report import resilibench_sections
from mcp_resili.suites.resilibench.scoring import score
from mcp_resili.suites.resilibench.stop_rules import RESILIBENCH_STOP_RULES
from mcp_resili.suites.resilibench.tasks import default_tasks, full_tasks
from mcp_resili.suites.resilibench.world import initial_state
from mcp_resili.tasks.lazy import TaskSummary
from mcp_resili.tasks.model import Task

__all__ = ["ResiliBenchFaults", "resilibench_library", "suite"]


def _render(task: Task, variant: str) -> str:
    return render_prompt(task, variant, discovery=True)


#: The bounds as extra columns of the outcome table: bound (ii), the share of episodes an agent
#: knowing the fault draws could have fully solved (where the scorer could decide it), and bound
#: (iii), the mean DP-optimal probability of full success of the group's tasks.
BOUND_COLUMNS = (
    ComponentColumn("bound_ii", "bound ii %", "bound_ii_full_possible", "share"),
    ComponentColumn("bound_iii_mean", "bound iii %", "bound_iii_full_probability", "mean"),
)


def _kind_or_none(task_id: str) -> TaskSummary | None:
    """A task's type and complexity from the suite's index (no task is built), None when unknown."""
    info = suite().task_info(task_id)
    return TaskSummary(task_id, info["task_type"], info["complexity"]) if info else None


def report_sections(rows: Sequence[EpisodeRow]) -> list[ReportSection]:
    """ResiliBench's sections of ``mcp-resili report``."""
    return resilibench_sections(rows, _kind_or_none)


@cache
def suite() -> Suite:
    """ResiliBench as served and run by mcp-resili (the ``mcp_resili.suites`` entry point)."""
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
        dependency_gate=task_dag_gate,
        initial_state=initial_state,
        report_sections=report_sections,
        stop_rules=RESILIBENCH_STOP_RULES,
        summary_columns=BOUND_COLUMNS,
        discovery=True,
        fault_specs={"resilibench": parse_resilibench_spec},
        agents={"plan-follower": PlanFollowerAgent, "greedy-retry": GreedyRetryAgent},
    )
