"""ReliabilityBench: four stateful domains, chaos profiles λ, perturbations ε, pass^k.

See this folder's README.md.
"""

from __future__ import annotations

import copy
from typing import Any

from mcp_resili.registry.suites import Suite
from mcp_resili.suites.reliabilitybench.agents import LearnerAgent
from mcp_resili.suites.reliabilitybench.library import reliabilitybench_library
from mcp_resili.suites.reliabilitybench.model import details
from mcp_resili.suites.reliabilitybench.perturb import EPS_LEVELS, RELATIONS, relations_for, render
from mcp_resili.suites.reliabilitybench.report import passk_table, report_sections, summarize
from mcp_resili.suites.reliabilitybench.scoring import score
from mcp_resili.suites.reliabilitybench.stop_rules import RELIABILITYBENCH_STOP_RULES
from mcp_resili.suites.reliabilitybench.tasks import default_tasks
from mcp_resili.tasks.model import Task

#: ``baseline`` (= ``eps=0``), the four ε levels, and every single relation as ``mr=NAME``.
VARIANTS = ("baseline", *(f"eps={level}" for level in EPS_LEVELS), *(f"mr={name}" for name in RELATIONS))

_INSTRUCTIONS = """\
Use the available tools to carry out the request. Tools can fail or answer oddly (timeouts, rate \
limits, truncated or stale data): read every result, retry what is safe to retry, and check the \
current state before repeating anything that changes it. When you are done, call `finish` with \
status "completed" and a one-line summary; if it cannot be done, call `finish` with status "aborted" \
and say why."""


def render_prompt(task: Task, variant: str = "baseline") -> str:
    """The user prompt of ``task`` with the variant's metamorphic relations applied."""
    info = details(task)
    relations = relations_for(variant)
    text = render(info.request, relations, task_id=task.id, domain=info.domain, workflow=task.workflow)
    return f"{text}\n\n{_INSTRUCTIONS}"


def initial_state(task: Task | None) -> dict[str, Any]:
    """A fresh copy of the task's initial state (empty without a task)."""
    return {} if task is None else copy.deepcopy(details(task).initial_state)


def suite() -> Suite:
    """ReliabilityBench as served and run by mcp-resili."""
    return Suite(
        name="reliabilitybench",
        description="Scheduling, travel, support and e-commerce over 20 stateful tools, judged by end state.",
        library=reliabilitybench_library(),
        load_tasks=default_tasks,
        render_prompt=render_prompt,
        score=score,
        default_faults="lambda=0.0",
        variants=VARIANTS,
        initial_state=initial_state,
        summarize=summarize,
        summary_table=passk_table,
        report_sections=report_sections,
        stop_rules=RELIABILITYBENCH_STOP_RULES,
        agents={"learner": LearnerAgent},
    )
