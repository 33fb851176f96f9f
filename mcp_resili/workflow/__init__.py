"""Workflow metrics, WorkflowPerturb perturbations, threshold calibration and the CI gate (pure functions)."""

from mcp_resili.tasks.model import Task
from mcp_resili.trace import Trace
from mcp_resili.workflow.calibration import ThresholdFit, derive_thresholds, rules_from_fits
from mcp_resili.workflow.gate import (
    FAILURE_MODES,
    PAPER_RULES,
    THRESHOLD_SETS,
    TOOL_RULES,
    AlertRule,
    Thresholds,
    Verdict,
    compare,
    default_threshold_set,
    rules_with,
)
from mcp_resili.workflow.match import Alignment, align, match_steps, text_similarity
from mcp_resili.workflow.metrics import (
    DEFAULT_GRAPH,
    GRAPH_DEFINITIONS,
    METRIC_BOUNDS,
    METRICS,
    GraphDefinition,
    WorkflowScores,
    bleu,
    chain_f1,
    evaluate,
    gleu,
    graph_f1,
    kendall_tau,
)
from mcp_resili.workflow.model import (
    Step,
    WorkflowFileError,
    WorkflowGraph,
    load_workflow,
    workflow_from_task,
    workflow_from_trace,
    workflow_graph,
)
from mcp_resili.workflow.perturb import LEVELS, PERTURBATIONS, PerturbationError, perturb, sensitivity


def episode_workflow_scores(
    task: Task, trace: Trace, *, graph: GraphDefinition = DEFAULT_GRAPH, match_arguments: bool = False
) -> WorkflowScores:
    """The executed tool sequence of ``trace`` against the golden workflow of ``task`` it followed.

    A task may have several valid workflows (`Task.golden_workflows`: ToolMaze's alternative tools);
    taking any of them is right, so the scores are against the one closest to what ran: the highest
    Chain F1, then Graph F1, then Kendall's τ, the first listed (the reference) on a tie. Each metric
    comes from that one workflow, never the best of each over different ones.
    """
    executed = workflow_from_trace(trace)
    candidates = (
        evaluate(executed, workflow_graph(golden), graph=graph, match_arguments=match_arguments)
        for golden in task.golden_workflows()
    )
    # max() keeps the first of equals: the reference wins every tie.
    return max(
        candidates, key=lambda s: (s.chain_f1, s.graph_f1, -2.0 if s.kendall_tau is None else s.kendall_tau)
    )


__all__ = [
    "DEFAULT_GRAPH",
    "FAILURE_MODES",
    "GRAPH_DEFINITIONS",
    "LEVELS",
    "METRICS",
    "METRIC_BOUNDS",
    "PAPER_RULES",
    "PERTURBATIONS",
    "THRESHOLD_SETS",
    "TOOL_RULES",
    "AlertRule",
    "Alignment",
    "GraphDefinition",
    "PerturbationError",
    "Step",
    "ThresholdFit",
    "Thresholds",
    "Verdict",
    "WorkflowFileError",
    "WorkflowGraph",
    "WorkflowScores",
    "align",
    "bleu",
    "chain_f1",
    "compare",
    "default_threshold_set",
    "derive_thresholds",
    "episode_workflow_scores",
    "evaluate",
    "gleu",
    "graph_f1",
    "kendall_tau",
    "load_workflow",
    "match_steps",
    "perturb",
    "rules_from_fits",
    "rules_with",
    "sensitivity",
    "text_similarity",
    "workflow_from_task",
    "workflow_from_trace",
    "workflow_graph",
]
