"""Workflow metrics, WorkflowPerturb perturbations and the CI gate (pure functions)."""

from mcp_resili.tasks.model import Task
from mcp_resili.trace import Trace
from mcp_resili.workflow.gate import DEFAULT_RULES, AlertRule, Verdict, compare, rules_with
from mcp_resili.workflow.metrics import (
    METRICS,
    WorkflowScores,
    bleu,
    chain_f1,
    evaluate,
    gleu,
    graph_f1,
    kendall_tau,
    match_steps,
    text_similarity,
)
from mcp_resili.workflow.model import (
    Step,
    WorkflowFileError,
    WorkflowGraph,
    load_workflow,
    workflow_from_task,
    workflow_from_trace,
)
from mcp_resili.workflow.perturb import LEVELS, PERTURBATIONS, PerturbationError, perturb, sensitivity


def episode_workflow_scores(task: Task, trace: Trace) -> WorkflowScores:
    """The executed tool sequence of ``trace`` against ``task``'s golden DAG."""
    return evaluate(workflow_from_trace(trace), workflow_from_task(task))


__all__ = [
    "DEFAULT_RULES",
    "LEVELS",
    "METRICS",
    "PERTURBATIONS",
    "AlertRule",
    "PerturbationError",
    "Step",
    "Verdict",
    "WorkflowFileError",
    "WorkflowGraph",
    "WorkflowScores",
    "bleu",
    "chain_f1",
    "compare",
    "episode_workflow_scores",
    "evaluate",
    "gleu",
    "graph_f1",
    "kendall_tau",
    "load_workflow",
    "match_steps",
    "perturb",
    "rules_with",
    "sensitivity",
    "text_similarity",
    "workflow_from_task",
    "workflow_from_trace",
]
