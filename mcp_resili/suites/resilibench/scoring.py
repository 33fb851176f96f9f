"""ResiliBench three-level scoring (paper §2.2, App. B.4), against the task's ground truth.

What counts (`mcp_resili.scoring.termination`): at most the episode's call budget of calls
(``max_turns``: every tool call and ``finish``; discovery calls are free), and nothing after the
first ``finish``. Then the termination rules (the reference executor's, applied to any trace so
server-side traces of other agents are judged alike) cut the episode at the first call where the
last 5 calls all failed (``too_many_errors``), more than 15 calls succeeded (``too_many_calls``) or
the last 5 successful calls were the same tool (``loop``).

Criteria, computed from the trace alone:

* **data flow** (`dataflow`): a step counts as done when a successful call of its tool ran it on
  the right data: every bound argument is the task's value or the output the agent received from
  a right-data run of the upstream step. ``steps_on_wrong_data`` names the steps whose tool
  succeeded only on other data.
* ``coverage``: share of required steps done (on the right data).
* ``order_ok``: the steps' first right-data runs respect every edge of the DAG (any topological
  order is correct, not just the listed one).
* ``output_produced``: every sink step of the workflow (a step nothing else depends on) is done.
* ``completion_signal``: a ``finish`` call with status ``completed`` within the budget, or (with no
  ``finish``) a completion phrase in the agent's text while a call of the budget was still left.
* ``enough_calls``: successful calls ≥ the task type's minimum (`MIN_SUCCESSFUL_CALLS`).

Discovery calls (``search_tools``, ``tool_info``) are left out of every criterion and rule.

Bounds (paper §1), reported as components, never used for the label: ``bound_iii_full_probability``
is the DP-optimal probability of full success for the episode's fault plan and call budget (the
value stored with the task for the defaults; an agent that knows the procedures and the failure
probabilities); ``bound_ii_full_possible`` says whether an agent that knew this episode's fault
draws could have reached full success (None for plans other than ResiliBench's and for tasks the
search gave up on).

Levels: **full** = coverage 1 (every step on the right data), order_ok, output_produced,
completion_signal and no termination rule fired. **partial** = not full, no termination rule, and
at least 2 of {coverage ≥ 0.6, output_produced, enough_calls, completion_signal}. **failure**
otherwise. Values 1.0 / 0.6 / 0.0 (the reference code's).
"""

from __future__ import annotations

from mcp_resili.constants import COMPLETION_PHRASES, DISCOVERY_TOOLS
from mcp_resili.scoring.model import Score
from mcp_resili.scoring.termination import BudgetCut, counts_against_budget, within_budget
from mcp_resili.suites.resilibench.dataflow import trace_data_flow
from mcp_resili.suites.resilibench.optimal import episode_bound_ii, episode_bound_iii
from mcp_resili.suites.resilibench.stop_rules import termination_index
from mcp_resili.tasks.model import Task
from mcp_resili.trace import FinishEvent, ModelTurnEvent, ToolCallEvent, Trace

PARTIAL_COVERAGE = 0.6
#: Minimum successful calls per task type for the partial-success criterion (capped at the number
#: of required tools). The paper names the criterion without numbers; these grow with pipeline depth.
MIN_SUCCESSFUL_CALLS = {
    "simple_data_transformation": 1,
    "basic_file_processing": 2,
    "complex_validation_pipeline": 3,
    "complex_network_integration": 3,
    "advanced_computation_pipeline": 4,
}
LEVEL_VALUES = {"full": 1.0, "partial": 0.6, "failure": 0.0}


def _completion_signal(cut: BudgetCut) -> tuple[bool, FinishEvent | None]:
    """The first ``finish`` within the budget, else a completion phrase as the agent's last word.

    A phrase counts only in a closing turn (one that asks for no call, which is what ends an episode
    in the runner), with nothing that costs a call after it, and while a call of the budget is left:
    like ``finish``, the signal takes a call (as in the DP and both bounds). Said earlier, or beside
    calls, it would let an agent spend the whole budget on steps and claim completion for free.
    """
    finish = next((e for e in cut.events if isinstance(e, FinishEvent)), None)
    if finish is not None:
        return finish.status == "completed", finish
    spent = 0
    said_while_a_call_was_left = False
    for event in cut.events:
        cost = counts_against_budget(event)
        spent += cost
        if cost:
            said_while_a_call_was_left = False  # the agent went on working: that was no last word
        elif isinstance(event, ModelTurnEvent) and not event.tool_calls:
            said = any(p in event.text.lower() for p in COMPLETION_PHRASES)
            said_while_a_call_was_left = said and spent < cut.budget
    return said_while_a_call_was_left, None


def score(task: Task, trace: Trace) -> Score:
    """Score one ResiliBench episode against ``task``'s ground truth."""
    budget = trace.header.max_turns or task.constraints.max_turns
    cut = within_budget(trace.events, budget)
    all_calls = [e for e in cut.events if isinstance(e, ToolCallEvent) and e.tool not in DISCOVERY_TOOLS]
    end, rule = termination_index(all_calls)
    calls = all_calls[:end]
    flow = trace_data_flow(task, calls)
    steps = [s.id for s in task.workflow.steps]
    done = [s for s in steps if s in flow.right]
    coverage = len(done) / len(steps) if steps else 1.0
    order_ok = all(
        flow.right[a] < flow.right[b] for a, b in task.workflow.edges if a in flow.right and b in flow.right
    )
    sinks = set(steps) - {a for a, _ in task.workflow.edges}
    output_produced = sinks <= set(flow.right)
    successful_calls = sum(1 for c in calls if not c.is_error)
    required = list(dict.fromkeys(task.required_tools))
    minimum = min(MIN_SUCCESSFUL_CALLS.get(task.task_type, 2), len(required))
    enough_calls = successful_calls >= minimum
    completion_signal, finish = _completion_signal(cut)
    wrong_data = flow.steps_on_wrong_data()

    tool_of = {s.id: s.tool for s in task.workflow.steps}
    reasons: list[str] = []
    if cut.over_budget:
        reasons.append(f"{cut.over_budget} call(s) past the budget of {budget} calls did not count")
    if cut.after_finish:
        reasons.append(f"{cut.after_finish} call(s) after finish did not count")
    if wrong_data:
        reasons.append(
            "steps ran on wrong data: "
            + "; ".join(f"{s} {tool_of[s]} ({flow.wrong[s][0]})" for s in wrong_data)
        )
    missing = [f"{s} {tool_of[s]}" for s in steps if s not in flow.right and s not in wrong_data]
    if missing:
        reasons.append(f"steps never succeeded: {', '.join(missing)}")
    if not order_ok:
        order = sorted(done, key=flow.right.__getitem__)
        reasons.append(f"steps ran out of DAG order: {' → '.join(tool_of[s] for s in order)}")
    if not output_produced:
        reasons.append("the workflow's final output was not produced")
    if not completion_signal:
        reasons.append(
            "no completion signal" if finish is None else f"agent finished with status {finish.status!r}"
        )
    if rule is not None:
        reasons.append(f"terminated by rule {rule} after {end} calls")

    if rule is None and coverage == 1.0 and order_ok and output_produced and completion_signal:
        label = "full"
    else:
        met = sum([coverage >= PARTIAL_COVERAGE, output_produced, enough_calls, completion_signal])
        label = "partial" if rule is None and met >= 2 else "failure"
    return Score(
        suite="resilibench",
        task=task.id,
        label=label,
        value=LEVEL_VALUES[label],
        components={
            "coverage": round(coverage, 4),
            "order_ok": order_ok,
            "output_produced": output_produced,
            "completion_signal": completion_signal,
            "data_flow_ok": not wrong_data and len(done) == len(steps),
            "steps_on_wrong_data": ",".join(wrong_data),
            "successful_calls": successful_calls,
            "min_successful_calls": minimum,
            "enough_calls": enough_calls,
            "tool_calls": len(calls),
            "budget": budget,
            "calls_over_budget": cut.over_budget,
            "calls_after_finish": cut.after_finish,
            "faults_injected": sum(1 for c in calls if c.fault is not None),
            "termination_rule": rule,
            "discovery_calls": sum(
                1 for e in trace.events if isinstance(e, ToolCallEvent) and e.tool in DISCOVERY_TOOLS
            ),
            "bound_iii_full_probability": episode_bound_iii(task, trace.header.fault_plan, budget),
            "bound_ii_full_possible": episode_bound_ii(
                task, trace.header.fault_plan, trace.header.seed, trace.header.fault_key, budget
            ),
        },
        reasons=tuple(reasons),
    )
