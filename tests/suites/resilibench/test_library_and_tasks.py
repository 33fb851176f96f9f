"""ResiliBench's library and tasks: six categories of five tools, the reference registry's errors and
dependencies, gold workflows that run cleanly, data flowing between tools, and the default task file."""

import gzip
import importlib.util
import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from mcp_resili.registry.loader import get_suite
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.tasks import default_tasks
from mcp_resili.tasks import resolve_arguments
from mcp_resili.tools import ToolFailure

ROOT = Path(__file__).resolve().parents[3]


def test_library_has_six_categories_of_five_operations():
    lib = resilibench_library()
    assert len(lib) == 30
    by_category = {c: [s for s in lib if s.category == c] for c in {s.category for s in lib}}
    assert len(by_category) == 6 and all(len(v) == 5 for v in by_category.values())
    assert all(s.name == f"{s.category}_{s.operation}" for s in lib)


def test_declared_errors_and_dependencies_follow_the_reference_registry():
    lib = resilibench_library()
    assert set(lib.spec("file_operations_reader").error_codes) >= {"FILE_NOT_FOUND", "PERMISSION_DENIED"}
    assert set(lib.spec("network_fetcher").error_codes) >= {"NETWORK_ERROR", "INVALID_RESPONSE"}
    assert set(lib.spec("computation_analyzer").error_codes) >= {"CALCULATION_ERROR", "OVERFLOW"}
    assert lib.spec("utility_notifier").dependencies == ("computation_analyzer", "network_monitor")
    assert sum(1 for s in lib if s.dependencies) == 9


def test_every_gold_workflow_runs_cleanly_and_outputs_validate():
    lib = resilibench_library()
    for task in default_tasks():
        state: dict = {}
        results: dict = {}
        for step in task.workflow.steps:
            arguments = resolve_arguments(step, task.inputs, results)
            jsonschema.validate(arguments, lib.spec(step.tool).input_schema)
            results[step.id] = lib.simulate(step.tool, arguments, state)  # validates output schema too
        assert results, task.id


def test_data_flows_between_tools():
    lib = resilibench_library()
    state: dict = {}
    read = lib.simulate("file_operations_reader", {"source": "data/a.csv"}, state)
    parsed = lib.simulate("data_processing_parser", {"data": read["data"]}, state)
    total = lib.simulate(
        "computation_calculator", {"data": parsed["data"], "options": {"operation": "sum"}}, state
    )
    assert total["data"]["result"] == pytest.approx(
        sum(r["value"] for r in parsed["data"]["records"]), abs=0.01
    )
    lib.simulate("file_operations_writer", {"data": parsed["data"], "destination": "out/b.json"}, state)
    again = lib.simulate("file_operations_reader", {"source": "out/b.json"}, state)
    assert lib.simulate("data_processing_parser", {"data": again["data"]}, state)["data"] == parsed["data"]


def test_tools_report_their_own_declared_failures():
    with pytest.raises(ToolFailure) as failure:
        resilibench_library().simulate("file_operations_reader", {"source": "data/missing.csv"}, {})
    assert failure.value.code == "FILE_NOT_FOUND"


def test_default_tasks_cover_every_task_type_with_consistent_ground_truth():
    tasks = default_tasks()
    assert {t.task_type for t in tasks} == {
        "basic_file_processing",
        "simple_data_transformation",
        "complex_validation_pipeline",
        "complex_network_integration",
        "advanced_computation_pipeline",
    }
    assert len({t.id for t in tasks}) == len(tasks)
    for task in tasks:
        assert task.workflow.tool_order_is_consistent(list(task.required_tools))
        deps = {d for tool in task.required_tools for d in resilibench_library().spec(tool).dependencies}
        assert deps <= set(task.required_tools), task.id


def test_default_task_file_is_exactly_what_the_generator_makes():
    spec = importlib.util.spec_from_file_location("regen", ROOT / "scripts" / "regenerate_default_tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stored = (ROOT / "mcp_resili" / "suites" / "resilibench" / "default.json").read_text(encoding="utf-8")
    assert module.render() == stored


def test_the_full_resilibench_list_has_the_file_s_ids_in_the_file_s_order():
    raw = gzip.decompress(
        resources.files("mcp_resili.suites.resilibench").joinpath("full.json.gz").read_bytes()
    )
    ids = [t["id"] for t in json.loads(raw)["tasks"]]
    suite = get_suite("resilibench")
    assert [s.id for s in suite.task_summaries] == ids and len(suite.tasks) == 5040
    assert suite.tasks[4321].id == ids[4321]
