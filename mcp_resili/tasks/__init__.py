"""Tasks and ground truth as data (see `mcp_resili.tasks.model`), plus per-suite generators."""

from mcp_resili.tasks.model import (
    Binding,
    ConstantBinding,
    InputBinding,
    StepBinding,
    Task,
    TaskConstraints,
    TaskSet,
    Workflow,
    WorkflowStep,
    resolve_arguments,
)

__all__ = [
    "Binding",
    "ConstantBinding",
    "InputBinding",
    "StepBinding",
    "Task",
    "TaskConstraints",
    "TaskSet",
    "Workflow",
    "WorkflowStep",
    "resolve_arguments",
]
