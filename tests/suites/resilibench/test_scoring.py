import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_resili.registry.loader import get_suite
from mcp_resili.scoring.termination import within_budget
from mcp_resili.suites.resilibench.dataflow import same_data
from mcp_resili.suites.resilibench.scoring import score
from mcp_resili.suites.resilibench.stop_rules import termination_index
from mcp_resili.tasks import StepBinding
from mcp_resili.trace import ModelTurnEvent, ToolCallEvent
from suites.resilibench.gold import call_event, finish, gold_run, trace_from, turn

SUITE = get_suite("resilibench")


def task_with(n_tools, *tools):
    return next(
        t for t in SUITE.tasks if len(t.required_tools) == n_tools and set(tools) <= set(t.required_tools)
    )


def trace_of(task, outcomes, finish_status="completed", text="", max_turns=None):
    """outcomes: (tool, ok) in call order; every call carries the ground-truth arguments and result."""
    gold = {g.tool: g for g in gold_run(task)}
    events = [turn(text)]
    events += [call_event(0, t, gold[t].arguments, gold[t].result, ok) for t, ok in outcomes]
    if finish_status:
        events.append(finish(finish_status))
    return trace_from(task, events, max_turns=max_turns)


def test_all_tools_in_dag_order_with_completion_is_full():
    task = task_with(3)
    result = score(task, trace_of(task, [(t, True) for t in task.required_tools]))
    assert result.label == "full" and result.value == 1.0 and result.reasons == ()
    assert result.components["data_flow_ok"] is True and result.components["steps_on_wrong_data"] == ""


def test_retries_after_faults_still_reach_full():
    task = task_with(3)
    calls = []
    for tool in task.required_tools:
        calls += [(tool, False), (tool, True)]
    result = score(task, trace_of(task, calls))
    assert result.label == "full" and result.components["successful_calls"] == 3


def test_missing_completion_signal_is_not_full():
    task = task_with(3)
    result = score(task, trace_of(task, [(t, True) for t in task.required_tools], finish_status=None))
    assert result.label == "partial" and "no completion signal" in result.reasons


def test_completion_phrase_in_a_closing_turn_counts_as_a_signal():
    task = task_with(3)
    calls = trace_of(task, [(t, True) for t in task.required_tools], finish_status=None)
    trace = trace_from(task, [*calls.events, turn("Task completed.")])
    assert score(task, trace).label == "full"


def test_a_completion_phrase_said_beside_calls_or_before_more_work_is_no_signal():
    """Review finding: said with the last step's calls, the phrase cost no call and beat both bounds."""
    task = task_with(3)
    tools = list(task.required_tools)
    gold = {g.tool: g for g in gold_run(task)}
    calls = [call_event(0, t, gold[t].arguments, gold[t].result) for t in tools]
    asked = tuple({"id": f"c{i}", "name": t, "arguments": gold[t].arguments} for i, t in enumerate(tools))
    beside = ModelTurnEvent(
        episode="e", turn=1, text="Writing the result now, task completed.", tool_calls=asked
    )
    for events in (
        [beside, *calls],  # in the turn that makes the calls
        [turn("Task completed."), *calls],  # before the work
        [*calls[:2], turn("Task completed."), calls[2]],  # and then more work
    ):
        result = score(task, trace_from(task, events, max_turns=3))
        assert result.label != "full" and result.components["completion_signal"] is False
    # With a call left for it, the closing phrase is a signal; three calls spent on steps leave none.
    closing = [*calls, turn("Task completed.")]
    assert score(task, trace_from(task, closing, max_turns=4)).label == "full"
    assert score(task, trace_from(task, closing, max_turns=3)).label != "full"


def test_aborted_finish_is_not_a_completion_signal():
    task = task_with(3)
    result = score(task, trace_of(task, [(t, True) for t in task.required_tools], finish_status="aborted"))
    assert result.label == "partial" and result.components["completion_signal"] is False


def test_a_step_run_before_its_upstream_ran_cannot_have_the_right_data():
    task = next(t for t in SUITE.tasks if len(t.required_tools) >= 3 and t.workflow.edges)
    a, b = task.workflow.edges[0]
    first, second = task.workflow.step(a).tool, task.workflow.step(b).tool
    rest = [t for t in task.required_tools if t not in (first, second)]
    result = score(task, trace_of(task, [(second, True), (first, True)] + [(t, True) for t in rest]))
    assert result.label == "partial" and b in result.components["steps_on_wrong_data"].split(",")


def test_a_valid_alternative_order_is_full():
    task = next(
        t
        for t in SUITE.tasks
        if any(
            not {(a, b), (b, a)} & set(t.workflow.edges)
            for i, a in enumerate(s.id for s in t.workflow.steps)
            for b in [s.id for s in t.workflow.steps][i + 1 :]
        )
        and len(t.workflow.steps) >= 4
    )
    gold = gold_run(task)
    graph = task.workflow.graph()
    orders = [o for _, o in zip(range(50), nx.all_topological_sorts(graph), strict=False)]
    other = next(o for o in orders if o != [g.step for g in gold])
    by_step = {g.step: g for g in gold}
    events = [call_event(0, by_step[s].tool, by_step[s].arguments, by_step[s].result) for s in other]
    assert score(task, trace_from(task, [*events, finish()])).label == "full"


def test_one_required_tool_short_is_partial_and_half_is_failure():
    task = task_with(5)
    tools = list(task.required_tools)
    assert score(task, trace_of(task, [(t, True) for t in tools[:4]])).label == "partial"
    assert score(task, trace_of(task, [(tools[0], True)], finish_status=None)).label == "failure"


def test_five_consecutive_failures_terminate_as_failure_even_if_work_continued():
    task = task_with(3)
    tools = list(task.required_tools)
    calls = [(tools[0], False)] * 5 + [(t, True) for t in tools]
    result = score(task, trace_of(task, calls))
    assert result.label == "failure" and result.components["termination_rule"] == "too_many_errors"


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        ([("a", False)] * 4 + [("a", True)], (5, None)),
        ([("a", False)] * 5, (5, "too_many_errors")),
        ([("a", True)] * 5, (5, "loop")),
        ([("a", True), ("b", True)] * 8, (16, "too_many_calls")),
    ],
)
def test_termination_rules(outcomes, expected):
    calls = [
        ToolCallEvent(episode="e", seq=i, tool=t, arguments={}, is_error=not ok)
        for i, (t, ok) in enumerate(outcomes)
    ]
    assert termination_index(calls) == expected


def _termination_by_definition(calls):
    """The rules read literally, window by window (the reference the one-pass count must match)."""
    successes = []
    for i in range(len(calls)):
        window = calls[max(0, i - 4) : i + 1]
        if len(window) == 5 and all(c.is_error for c in window):
            return i + 1, "too_many_errors"
        if not calls[i].is_error:
            successes.append(calls[i].tool)
            if len(successes) > 15:
                return i + 1, "too_many_calls"
            if len(successes) >= 5 and len(set(successes[-5:])) == 1:
                return i + 1, "loop"
    return len(calls), None


@settings(max_examples=400, derandomize=True, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), max_size=30))
def test_termination_rules_agree_with_their_window_by_window_definition(outcomes):
    calls = [
        ToolCallEvent(episode="e", seq=i, tool=t, arguments={}, is_error=not ok)
        for i, (t, ok) in enumerate(outcomes)
    ]
    assert termination_index(calls) == _termination_by_definition(calls)


def test_scoring_is_pure():
    task = task_with(3)
    trace = trace_of(task, [(t, True) for t in task.required_tools])
    assert score(task, trace) == score(task, trace)


# --- data flow ----------------------------------------------------------------------------------


def test_a_fabricated_input_never_earns_full_even_when_the_server_let_it_through():
    """An outside server that checks nothing: the trace says success, the data says otherwise."""
    task = task_with(3, "file_operations_reader")
    gold = gold_run(task)
    events = [
        call_event(
            0, g.tool, {**g.arguments, "source": "data/archive_old.bin"} if i == 0 else g.arguments, g.result
        )
        for i, g in enumerate(gold)
    ]
    result = score(task, trace_from(task, [*events, finish()]))
    assert result.label != "full" and result.components["data_flow_ok"] is False
    wrong = result.components["steps_on_wrong_data"].split(",")
    assert wrong[0] == gold[0].step
    # Everything whose data comes from the fabricated read ran on wrong data too.
    fed = {b for b in nx.descendants(task.workflow.graph(), gold[0].step)}
    assert fed and set(wrong) >= {gold[0].step} | {
        s for s in fed if any(isinstance(b, StepBinding) for b in task.workflow.step(s).arguments.values())
    }
    assert any("source is not the task's value" in r for r in result.reasons)


def test_a_fabricated_payload_for_a_later_step_is_named_with_its_argument():
    task = task_with(4, "data_processing_parser")
    gold = gold_run(task)
    index = next(i for i, g in enumerate(gold) if g.tool == "data_processing_parser")
    fake = {"content": "id,name,category,value\n1,x,alpha,1.0\n", "format": "csv"}
    events = [
        call_event(0, g.tool, {**g.arguments, "data": fake} if i == index else g.arguments, g.result)
        for i, g in enumerate(gold)
    ]
    result = score(task, trace_from(task, [*events, finish()]))
    assert result.label != "full"
    assert result.components["steps_on_wrong_data"].split(",")[0] == gold[index].step
    assert any(
        f"{gold[index].step} data_processing_parser (data is not the data" in r for r in result.reasons
    )


def test_a_wrong_data_run_followed_by_a_right_one_is_a_recovery():
    task = task_with(3, "file_operations_reader")
    gold = gold_run(task)
    wrong = call_event(0, gold[0].tool, {**gold[0].arguments, "source": "data/other.csv"}, gold[0].result)
    events = [wrong] + [call_event(0, g.tool, g.arguments, g.result) for g in gold]
    result = score(task, trace_from(task, [*events, finish()]))
    assert result.label == "full" and result.components["steps_on_wrong_data"] == ""


def test_downstream_steps_may_use_any_output_the_agent_received_from_a_right_run():
    task = next(
        t
        for t in SUITE.tasks
        if any(isinstance(b, StepBinding) for s in t.workflow.steps for b in s.arguments.values())
        and t.workflow.steps[1].tool == "data_processing_parser"
    )
    gold = gold_run(task)
    first, second = gold[0], gold[1]
    # The upstream step ran twice on the right data and answered differently (say, the file changed).
    changed = {
        **first.result,
        "data": {**first.result["data"], "content": "id,name,category,value\n9,zed,beta,1.5\n"},
    }
    second_args = {**second.arguments, "data": changed["data"]}
    events = [
        call_event(0, first.tool, first.arguments, first.result),
        call_event(0, first.tool, first.arguments, changed),
        call_event(0, second.tool, second_args, second.result),
        *[call_event(0, g.tool, g.arguments, g.result) for g in gold[2:]],
        finish(),
    ]
    result = score(task, trace_from(task, events))
    assert result.label == "full", result.reasons


RECORDS = [{"id": 1, "name": "a", "category": "x", "value": 2}]


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [
        # A records payload is its records: bookkeeping fields are free, the records are not.
        ({"records": RECORDS}, {"records": RECORDS, "record_count": 1}, True),
        ({"records": RECORDS, "record_count": 999}, {"records": RECORDS, "record_count": 1}, True),
        ({"records": RECORDS, "note": "mine"}, {"records": RECORDS, "total": 2.0}, True),
        ({"records": [{**RECORDS[0], "value": 3}]}, {"records": RECORDS, "record_count": 1}, False),
        ({"record_count": 1}, {"records": RECORDS, "record_count": 1}, False),
        ({"records": [{**RECORDS[0], "value": 2.0}]}, {"records": RECORDS}, True),  # 2 is 2.0 as JSON
        # A text payload is its content and its format (a dropped format is another reading).
        ({"content": "a,b\n", "format": "csv"}, {"content": "a,b\n", "format": "csv", "source": "f"}, True),
        ({"content": "a,b\n"}, {"content": "a,b\n", "format": "csv", "source": "f"}, False),
        ({"content": "a,b\n", "format": "json"}, {"content": "a,b\n", "format": "csv"}, False),
        ({"content": "a,b\n"}, {"content": "a,b\n"}, True),
        # Anything else is compared whole.
        ({"valid": True}, {"valid": True, "checks": {"schema": True}}, False),
        ({"valid": True, "checks": {"schema": True}}, {"valid": True, "checks": {"schema": True}}, True),
        ([1, 2], [1, 2.0], True),
        (True, 1, False),
    ],
)
def test_the_same_data_is_one_rule_read_from_the_data(actual, expected, same):
    assert same_data(actual, expected) is same


def _records_into(task, declared):
    """(upstream step, receiving step) of ``task``: a records payload into a tool whose schema does
    (``declared``) or does not declare the fields of its ``data``."""
    lib = SUITE.library
    for step in task.workflow.steps:
        binding = step.arguments.get("data")
        if not isinstance(binding, StepBinding):
            continue
        upstream = task.workflow.step(binding.step)
        out = lib.spec(upstream.tool).output_schema["properties"]["data"]["properties"]
        fields = lib.spec(step.tool).input_schema["properties"]["data"].get("properties")
        if "records" in out and bool(fields) == declared:
            return upstream, step
    return None


def test_the_same_data_does_not_depend_on_the_receiving_tools_schema():
    """An upstream's records without its bookkeeping fields: the same data for a records tool (whose
    schema declares ``records``) and for a tool whose schema declares no field (before: only the first)."""
    for declared in (True, False):
        task = next(t for t in SUITE.tasks[:400] if _records_into(t, declared))
        upstream, receiver = _records_into(task, declared)
        gold = gold_run(task)
        up = next(g for g in gold if g.step == upstream.id)
        records_only = {"records": up.result["data"]["records"]}
        assert records_only != up.result["data"]  # there were other fields to leave out
        events = [
            call_event(
                0,
                g.tool,
                {**g.arguments, "data": records_only} if g.step == receiver.id else g.arguments,
                g.result,
            )
            for g in gold
        ]
        assert score(task, trace_from(task, [*events, finish()])).label == "full", (task.id, declared)
        changed = [dict(r) for r in records_only["records"]]
        changed[0]["value"] = changed[0]["value"] + 1
        wrong = [
            call_event(
                0,
                g.tool,
                {**g.arguments, "data": {"records": changed}} if g.step == receiver.id else g.arguments,
                g.result,
            )
            for g in gold
        ]
        assert score(task, trace_from(task, [*wrong, finish()])).label != "full", (task.id, declared)


# --- the call budget ------------------------------------------------------------------------------


def test_calls_past_the_budget_do_not_count():
    """The issue's case: a budget of 10, ten calls, then finish: the finish is the eleventh call."""
    task = task_with(3)
    tools = list(task.required_tools)
    calls = (
        [(tools[0], False)] * 4
        + [(tools[0], True)]
        + [(tools[1], False)] * 3
        + [(tools[1], True), (tools[2], True)]
    )
    assert len(calls) == 10
    result = score(task, trace_of(task, calls, max_turns=10))
    assert result.label != "full" and result.components["calls_over_budget"] == 1
    assert result.components["completion_signal"] is False
    assert any("past the budget of 10" in r for r in result.reasons)
    assert score(task, trace_of(task, calls, max_turns=11)).label == "full"


def test_without_an_override_the_budget_is_the_tasks():
    task = task_with(3)
    budget = task.constraints.max_turns
    tools = list(task.required_tools)
    calls = [(tools[0], False), (tools[0], False), (tools[0], True)] * (budget // 3) + [
        (t, True) for t in tools
    ]
    result = score(task, trace_of(task, calls))
    assert result.components["budget"] == budget and result.components["calls_over_budget"] > 0
    assert result.label != "full"


def test_nothing_after_the_first_finish_counts():
    task = task_with(3)
    gold = gold_run(task)
    events = [finish()] + [call_event(0, g.tool, g.arguments, g.result) for g in gold] + [finish()]
    result = score(task, trace_from(task, events))
    assert result.label != "full" and result.components["calls_after_finish"] == len(gold) + 1


def test_a_completion_phrase_needs_a_call_of_the_budget_left():
    task = task_with(3)
    tools = list(task.required_tools)
    calls = [(t, True) for t in tools]
    said = trace_of(task, calls, finish_status=None, text="", max_turns=3)
    events = [*said.events, turn("Task completed.")]
    assert score(task, trace_from(task, events, max_turns=3)).label != "full"
    assert score(task, trace_from(task, events, max_turns=4)).label == "full"


def test_discovery_calls_are_free_and_finish_costs_a_call():
    task = task_with(3)
    gold = gold_run(task)
    search = ToolCallEvent(episode="e", seq=0, tool="search_tools", arguments={"query": "x"}, is_error=False)
    events = [search, search] + [call_event(0, g.tool, g.arguments, g.result) for g in gold] + [finish()]
    cut = within_budget(events, len(gold) + 1)
    assert cut.spent == len(gold) + 1 and cut.over_budget == 0 and len(cut.events) == len(events)
    assert within_budget(events, len(gold)).over_budget == 1
    with pytest.raises(ValueError, match="at least 1"):
        within_budget(events, 0)
