"""The dependency gate traces data flow incrementally, and agrees with a trace from scratch every time."""

import weakref

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_resili.registry.loader import get_suite
from mcp_resili.suites.resilibench import gate
from mcp_resili.suites.resilibench.dataflow import trace_data_flow
from mcp_resili.suites.resilibench.gate import task_dag_gate
from suites.resilibench.gold import call_event, gold_run

SUITE = get_suite("resilibench")
TASKS = [SUITE.tasks[i] for i in range(0, 5040, 97)]  # 52 tasks spread over the suite


def candidate_calls(task):
    """Per gold step: its right-data call, the same call failed, and a call on wrong data."""
    pool = []
    for gold in gold_run(task):
        pool.append((gold.tool, gold.arguments, gold.result, True))
        pool.append((gold.tool, gold.arguments, None, False))
        wrong = {name: "not the data" for name in gold.arguments} or {"x": 1}
        pool.append((gold.tool, wrong, gold.result, True))
    return pool


def scratch_done(task, kept):
    return set(trace_data_flow(task, kept).right)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(st.data())
def test_the_gate_agrees_with_a_trace_from_scratch_after_every_call(data):
    task = data.draw(st.sampled_from(TASKS))
    pool = candidate_calls(task)
    picks = data.draw(st.lists(st.integers(0, len(pool) - 1), max_size=3 * len(task.workflow.steps)))
    kept = []
    for seq, pick in enumerate(picks):
        tool, arguments, result, ok = pool[pick]
        kept.append(call_event(seq, tool, arguments, result, ok))
        assert set(gate._done_steps(task, kept)) == scratch_done(task, kept)
        for step in task.workflow.steps:  # and so does every refusal
            fresh = gate._EpisodeFlow(task, kept[0]).advance(kept)
            expected_open = all(a in fresh for a, b in task.workflow.edges if b == step.id) or not any(
                b == step.id for _, b in task.workflow.edges
            )
            if sum(s.tool == step.tool for s in task.workflow.steps) == 1:
                assert (task_dag_gate(task, step.tool, kept) is None) == expected_open


def test_a_list_that_does_not_continue_the_episode_is_traced_again():
    task = TASKS[3]
    calls = [call_event(i, g.tool, g.arguments, g.result) for i, g in enumerate(gold_run(task))]
    assert len(calls) >= 3
    kept = list(calls)
    assert set(gate._done_steps(task, kept)) == {s.id for s in task.workflow.steps}
    # The same first event, but a later success replaced by its failure: the memo must not be trusted.
    changed = [calls[0], call_event(1, calls[1].tool, calls[1].arguments, None, ok=False), *calls[2:]]
    assert set(gate._done_steps(task, changed)) == scratch_done(task, changed)
    assert scratch_done(task, changed) != scratch_done(task, kept)
    # A shorter list than the one taken in, and the same list with another task.
    assert set(gate._done_steps(task, calls[:1])) == scratch_done(task, calls[:1])
    other = next(t for t in TASKS if t.id != task.id)
    assert set(gate._done_steps(other, kept)) == scratch_done(other, kept)


def test_interleaved_episodes_keep_their_own_flows_and_nothing_outlives_them():
    before = len(gate._FLOWS)
    episodes = []
    for task in TASKS[:6]:
        episodes.append(
            (task, [call_event(i, g.tool, g.arguments, g.result) for i, g in enumerate(gold_run(task))], [])
        )
    longest = max(len(calls) for _, calls, _ in episodes)
    for step in range(longest):  # one call of each episode in turn
        for task, calls, kept in episodes:
            if step < len(calls):
                kept.append(calls[step])
                assert set(gate._done_steps(task, kept)) == scratch_done(task, kept)
    assert len(gate._FLOWS) == before + len(episodes)
    del episodes, calls, kept
    assert len(gate._FLOWS) == before  # each flow went with its episode's first event


def test_a_tasks_predecessor_table_is_worked_out_once_and_let_go_after_enough_other_tasks():
    task = SUITE.tasks[11].model_copy(deep=True)  # an object nothing else holds
    last = task.workflow.steps[-1]
    preds = [a for a, b in task.workflow.edges if b == last.id]
    assert preds, "the last step of a stored task reads an earlier one"
    misses = gate._predecessors.cache_info().misses
    refusal = task_dag_gate(task, last.tool, [])
    tool_of = {s.id: s.tool for s in task.workflow.steps}
    assert refusal is not None and refusal[0] == tuple(tool_of[p] for p in preds)
    assert task_dag_gate(task, task.workflow.steps[0].tool, []) is None
    assert task_dag_gate(task, "no_such_tool", []) is None
    assert gate._predecessors.cache_info().misses == misses + 1  # one table for the three questions
    held = weakref.ref(task)
    del task
    assert held() is not None  # kept while recent: a run asks about a task at every call
    others = [SUITE.tasks[12].model_copy(deep=True) for _ in range(gate._predecessors.cache_info().maxsize)]
    for other in others:
        task_dag_gate(other, other.workflow.steps[-1].tool, [])
    assert held() is None  # and let go once enough other tasks came after it
