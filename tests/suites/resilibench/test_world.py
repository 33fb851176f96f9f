"""Tools check the meaning of their arguments against the episode's world (issue 13, item 1)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client

from mcp_resili.constants import META_EPISODE
from mcp_resili.faults import NoFaults
from mcp_resili.registry.loader import get_suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.tasks import full_tasks
from mcp_resili.suites.resilibench.world import content_format, initial_state, same_json
from mcp_resili.tasks import StepBinding, resolve_arguments
from mcp_resili.tools import ToolFailure

LIB = resilibench_library()


def task_using(*tools):
    return next(t for t in full_tasks() if set(tools) <= set(t.required_tools))


def gold_arguments(task, tool):
    """The ground-truth arguments of ``tool``'s step, with upstream steps run on the simulators."""
    state, results = initial_state(task), {}
    for step in task.workflow.steps:
        arguments = resolve_arguments(step, task.inputs, results)
        if step.tool == tool:
            return arguments, state
        results[step.id] = LIB.simulate(step.tool, arguments, state)
    raise AssertionError(f"{tool} not in {task.id}")


def refusal(tool, arguments, state):
    with pytest.raises(ToolFailure) as failure:
        LIB.simulate(tool, arguments, state)
    assert failure.value.code in LIB.spec(tool).error_codes, "a world check may only use declared errors"
    return failure.value.code, failure.value.message


# (tool, change to the gold arguments, expected code, words the message must contain)
MISMATCHES = [
    ("file_operations_reader", {"source": "data/archive_old.bin"}, "FILE_NOT_FOUND", ["archive_old.bin"]),
    ("file_operations_reader", {"source": "/etc/shadow"}, "PERMISSION_DENIED", ["/etc/shadow", "outside"]),
    ("file_operations_reader", {"source": "../secrets.csv"}, "PERMISSION_DENIED", ["outside"]),
    ("file_operations_writer", {"destination": "/dev/null"}, "PERMISSION_DENIED", ["/dev/null"]),
    (
        "file_operations_writer",
        {"destination": "out/other.json"},
        "INVALID_INPUT",
        ["destination", "must be"],
    ),
    ("file_operations_scanner", {"source": "data/nowhere"}, "FILE_NOT_FOUND", ["data/nowhere"]),
    ("network_fetcher", {"source": "https://api.example.com/other/1"}, "NETWORK_ERROR", ["404", "other/1"]),
    ("network_fetcher", {"source": "data/archive_old.bin"}, "INVALID_INPUT", ["http"]),
    ("network_monitor", {"source": "https://elsewhere.example"}, "NETWORK_ERROR", ["elsewhere"]),
    (
        "network_poster",
        {"destination": "https://hooks.example.com/x"},
        "NETWORK_ERROR",
        ["hooks.example.com/x"],
    ),
    ("network_router", {"destination": "/dev/null"}, "INVALID_INPUT", ["http"]),
    ("integration_authenticator", {"source": "payroll"}, "INVALID_INPUT", ["payroll"]),
    ("integration_connector", {"source": "payroll"}, "INVALID_INPUT", ["payroll"]),
    ("integration_queue", {"destination": "other-events"}, "INVALID_INPUT", ["other-events"]),
    ("utility_notifier", {"destination": "ceo@example.com"}, "INVALID_INPUT", ["ceo@example.com"]),
    ("data_processing_filter", {"options": {"min_value": 1}}, "INVALID_INPUT", ["options", "min_value"]),
    ("data_processing_transformer", {"options": None}, "INVALID_INPUT", ["options is missing"]),
    ("computation_calculator", {"precision": 3}, "INVALID_INPUT", ["precision", "3"]),
    (
        "file_operations_converter",
        {"output_format": "csv", "_flip": True},
        "INVALID_INPUT",
        ["output_format"],
    ),
    ("utility_helper", {"data": {}}, "INVALID_INPUT", ["data is empty"]),
    ("file_operations_compressor", {"data": {}}, "INVALID_INPUT", ["data is empty"]),
]


@pytest.mark.parametrize(("tool", "change", "code", "words"), MISMATCHES, ids=[m[0] for m in MISMATCHES])
def test_an_argument_that_does_not_fit_the_world_is_a_declared_error_naming_the_problem(
    tool, change, code, words
):
    task = task_using(tool)
    arguments, state = gold_arguments(task, tool)
    LIB.simulate(tool, arguments, {**state, "files": dict(state.get("files", {}))})  # gold runs
    bad = dict(arguments)
    for name, value in change.items():
        if name == "_flip":  # choose an output format other than the task's
            bad["output_format"] = next(f for f in ("csv", "json", "xml") if f != arguments["output_format"])
        elif value is None:
            bad.pop(name)
        else:
            bad[name] = value
    got, message = refusal(tool, bad, state)
    assert got == code
    for word in words:
        assert word in message


def test_a_parser_refuses_content_whose_declared_format_is_another():
    task = task_using("data_processing_parser")
    arguments, state = gold_arguments(task, "data_processing_parser")
    actual = arguments["data"]["format"]
    wrong = next(f for f in ("csv", "json", "xml") if f != actual)
    code, message = refusal("data_processing_parser", {"data": {**arguments["data"], "format": wrong}}, state)
    assert code == "INVALID_INPUT" and wrong in message and actual in message
    no_format = {k: v for k, v in arguments["data"].items() if k != "format"}
    if actual != "csv":  # a missing format means csv, the parser's default
        assert refusal("data_processing_parser", {"data": no_format}, state)[0] == "INVALID_INPUT"


@pytest.mark.parametrize(
    ("content", "fmt"),
    [
        ("id,name\n1,a\n", "csv"),
        ('[{"id": 1}]', "json"),
        ("<records/>", "xml"),
        ("just words", None),
        ("[1,", None),
    ],
)
def test_content_format_recognises_the_three_formats(content, fmt):
    assert content_format(content) == fmt


def test_files_the_agent_wrote_and_files_the_scanner_lists_can_be_read_when_no_step_fixes_the_path():
    task = next(
        t
        for t in full_tasks()
        if {"file_operations_writer", "file_operations_scanner"} <= set(t.required_tools)
        and "file_operations_reader" not in t.required_tools
    )
    state = initial_state(task)
    written, _ = gold_arguments(task, "file_operations_writer")
    LIB.simulate("file_operations_writer", written, state)
    back = LIB.simulate("file_operations_reader", {"source": written["destination"]}, state)
    assert back["data"]["source"] == written["destination"]
    listed = LIB.simulate("file_operations_scanner", {"source": task.inputs["directory"]}, state)["data"][
        "files"
    ]
    assert listed and LIB.simulate("file_operations_reader", {"source": listed[0]}, state)["success"]


def test_a_step_that_fixes_the_path_refuses_any_other_file_even_one_that_exists():
    task = task_using("file_operations_writer", "file_operations_reader")
    state = initial_state(task)
    written, _ = gold_arguments(task, "file_operations_writer")
    LIB.simulate("file_operations_writer", written, state)
    code, message = refusal("file_operations_reader", {"source": written["destination"]}, state)
    assert code == "INVALID_INPUT" and task.inputs["source"] in message


def test_a_tool_outside_the_workflow_has_no_fixed_values_but_still_meets_the_world():
    task = next(t for t in full_tasks() if "utility_logger" not in t.required_tools)
    state = initial_state(task)
    logged = LIB.simulate("utility_logger", {"data": {"note": "x"}, "options": {"level": "debug"}}, state)
    assert logged["success"]
    assert refusal("utility_logger", {"data": {}}, state)[0] == "INVALID_INPUT"


def test_without_a_task_there_is_no_world_only_the_checks_that_need_none():
    assert LIB.simulate("file_operations_reader", {"source": "data/anything.csv"}, {})["success"]
    assert refusal("file_operations_reader", {"source": "/etc/shadow"}, {})[0] == "PERMISSION_DENIED"


@pytest.mark.anyio
async def test_through_mcp_a_fabricated_path_is_an_is_error_result_and_the_real_one_works():
    task = task_using("file_operations_reader")
    server = ResiliServer(get_suite("resilibench"), NoFaults())
    meta = {META_EPISODE: {"id": "w1", "task": task.id}}
    async with Client(server.mcp) as client:
        fabricated = await client.call_tool(
            "file_operations_reader", {"source": "data/archive_old.bin"}, meta=meta
        )
        real = await client.call_tool("file_operations_reader", {"source": task.inputs["source"]}, meta=meta)
    # Results carry no recorded event (no answer key on the wire): the error code is in the text.
    assert fabricated.is_error and fabricated.content[0].text.startswith("Error FILE_NOT_FOUND")
    assert "archive_old.bin" in fabricated.content[0].text
    assert not real.is_error and real.structured_content["data"]["source"] == task.inputs["source"]


def test_every_step_bound_argument_of_the_gold_workflow_is_left_to_the_scorer_not_fixed():
    """Data that flows from an earlier step is never fixed by the world (a retry gets new output)."""
    task = task_using("data_processing_parser")
    state = initial_state(task)
    world = state["world"]
    for step in task.workflow.steps:
        bound = {n for n, b in step.arguments.items() if isinstance(b, StepBinding)}
        assert not bound & {n for fixed in world.fixed.get(step.tool, ()) for n in fixed}


def _json_equal_by_definition(a, b):
    """JSON equality spelled out: numbers by value, booleans only with booleans, containers piecewise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_json_equal_by_definition(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal_by_definition(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, 1.0, 2.0, 2.5, float("inf")]),
    st.sampled_from([2**70, -(2**70)]),  # beyond 64 bits: JSON, but not every encoder writes them
    st.sampled_from(["", "a", "1"]),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
    ),
    max_leaves=8,
)


def _swap_numbers(value):
    """``value`` with 1 and True, 0 and False, 2 and 2.0 exchanged: equal to Python, not all equal in JSON."""
    if isinstance(value, dict):
        return {k: _swap_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_swap_numbers(v) for v in value]
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, int | float) and float(value).is_integer():
        return float(value) if isinstance(value, int) else int(value)
    return value


@settings(max_examples=300, derandomize=True, deadline=None)
@given(a=_values, b=_values, swap=st.booleans())
def test_same_json_agrees_with_the_definition_of_json_equality(a, b, swap):
    other = _swap_numbers(a) if swap else b
    assert same_json(a, other) == _json_equal_by_definition(a, other)
    assert same_json(a, a) and same_json(other, other)


def test_same_json_tells_booleans_from_numbers_and_lets_2_equal_2_0_at_any_depth():
    assert same_json({"x": [1, {"y": 2}]}, {"x": [1, {"y": 2.0}]})
    assert not same_json({"x": [1, {"y": 1}]}, {"x": [1, {"y": True}]})
    assert not same_json([0], [False]) and not same_json("1", 1) and not same_json({"a": 1}, {"a": 1, "b": 1})


def test_same_json_finds_no_nan_equal_even_where_python_does_and_ignores_key_order():
    nan = float("nan")
    assert [nan] == [nan]  # one object: Python's list equality takes it as equal to itself
    assert not same_json([nan], [nan]) and not same_json({"x": nan}, {"x": nan})
    assert same_json({"a": [1, 2], "b": None}, {"b": None, "a": [1, 2.0]})
    assert not same_json([1, True], [1, 1]) and not same_json({"k": [False]}, {"k": [0]})


def test_a_sources_content_is_rendered_once_for_short_paths_and_is_the_same_text_either_way():
    from mcp_resili.suites.resilibench import simulators

    short, long = "data/q3.csv", "data/" + "x" * simulators.MAX_CACHED_SOURCE + ".json"
    for source, fmt in ((short, "csv"), (long, "json")):
        fresh = simulators._render(simulators._records_for(source), fmt)
        assert simulators._source_content(source, fmt) == fresh == simulators._source_content(source, fmt)
    info = simulators._cached_source_content.cache_info
    seen = info()
    simulators._source_content(short, "csv")
    assert info().hits == seen.hits + 1  # the short path is rendered once, then read from the cache
    simulators._source_content(long, "json")
    now = info()  # the long path never touches the cache
    assert (now.hits, now.misses, now.currsize) == (seen.hits + 1, seen.misses, seen.currsize)
