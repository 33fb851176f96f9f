"""What ``run --estimate`` adds to the cost estimate: the noise floor at the run's size, and rule hits.

* **Noise floor**: the smallest paired difference of full success between two models (or two fault
  specs) the run's tasks × trials would detect with power 0.8 at α 0.05, under the variance
  `mcp_resili.report.plan` assumes without a pilot run (``mcp-resili plan-size RUN`` measures it).
* **Rule hits**: for each fault file of rules, how many calls each rule's pattern and call numbers
  select and how many it is expected to inject into, counted on the tasks' ground-truth workflows
  (one call per step, no retries: an agent that retries meets more), over every episode planned.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp_resili.client.plan import RunPlan


def estimate_extras(plan: RunPlan) -> dict[str, Any]:
    """The noise floor and the rule hits of a resolved run (JSON-ready)."""
    from mcp_resili.faults.rules import RuleFaults, expected_hits
    from mcp_resili.report.clustered import detectable_multiplier
    from mcp_resili.report.plan import ASSUMED

    config = plan.config
    tasks, trials = len(plan.task_ids), config.trials
    variance = (ASSUMED.difference_task + ASSUMED.difference_within / max(1, trials)) / max(1, tasks)
    floor = detectable_multiplier(tasks) * math.sqrt(variance) if tasks >= 2 else None
    repeats = trials * len(config.models) * len(config.all_variants())
    rules: list[dict[str, Any]] = []
    workflows = None
    for spec, fault_plan in plan.fault_plans.items():
        if not isinstance(fault_plan, RuleFaults):
            continue
        if workflows is None:
            workflows = [[s.tool for s in plan.suite.task(t).workflow.steps] for t in plan.task_ids]
        for hits in expected_hits(fault_plan, workflows):
            rules.append(
                {
                    "faults": spec,
                    "rule": hits.rule,
                    "tool": hits.tool,
                    "matched_calls": hits.matched * repeats,
                    "expected_injections": round(hits.expected * repeats, 1),
                    "per_episode": round(hits.expected / max(1, tasks), 3),
                }
            )
    return {
        "noise_floor": {
            "tasks": tasks,
            "trials": trials,
            "detectable_full": None if floor is None else round(floor, 4),
            "assumed": "two independent sides at 50%, within-task correlation 0.16",
        },
        "rule_hits": rules,
    }


def describe_extras(extras: dict[str, Any]) -> list[str]:
    """The extras as lines for a terminal."""
    lines = []
    floor = extras["noise_floor"]
    if floor["detectable_full"] is not None:
        lines.append(
            f"noise floor: at {floor['tasks']} tasks × {floor['trials']} trials a paired difference of "
            f"{100 * floor['detectable_full']:.1f} points in full success (two models, or two fault specs) "
            "is detectable with power 0.8 at α 0.05, under an assumed variance (a pilot run measures it: "
            "mcp-resili plan-size --effect D RUN)"
        )
    for hit in extras["rule_hits"]:
        lines.append(
            f"fault rule {hit['rule']} of {hit['faults']} (tool {hit['tool']!r}): selects "
            f"{hit['matched_calls']:,} calls of the tasks' ground-truth workflows, expected to inject into "
            f"~{hit['expected_injections']:,} (~{hit['per_episode']:g} per episode; retries add more)"
        )
    return lines
