"""Print one ResiliBench task's optimal plan, a flawed version of it, and its DP success probability.

Run: python examples/resilibench_plans.py [FLAW]   (FLAW e.g. missing_step:light; default semantic_drift)
"""

import sys

from mcp_resili import get_suite

suite = get_suite("resilibench")
task = suite.default_tasks[3]
flaw = sys.argv[1] if len(sys.argv) > 1 else "semantic_drift"
optimum = task.metadata["optimal_workflow"]
print(f"{task.id} ({task.task_type}, {task.complexity}): {task.description}")
print(
    f"DP-optimal plan {optimum['tools']} succeeds fully with probability {optimum['success_probability']:.3f}"
)
print()
print(suite.prompt(task, "optimal").split("## ")[1])
print(f"--- flawed:{flaw} ---")
print(suite.prompt(task, f"flawed:{flaw}").split("## ")[1])
