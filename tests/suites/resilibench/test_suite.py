"""The full ResiliBench suite: Table 7 counts, distinct tasks, the whole library, stored = generated."""

import collections
import random

import pytest

from mcp_resili.registry.loader import get_suite
from mcp_resili.suites.resilibench.generate import TABLE7_COUNTS, rebuild_task
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.tasks import default_tasks, full_tasks

TABLE7_COMPLEXITY = {"easy": 1520, "medium": 2880, "hard": 640}


def test_full_suite_has_the_table7_counts_by_type_and_complexity():
    tasks = full_tasks()
    assert len(tasks) == 5040
    assert collections.Counter(t.task_type for t in tasks) == TABLE7_COUNTS
    assert collections.Counter(t.complexity for t in tasks) == TABLE7_COMPLEXITY


def test_full_suite_tasks_are_distinct_in_content_not_just_ids():
    tasks = full_tasks()
    assert len({t.id for t in tasks}) == 5040
    assert len({t.metadata["content_key"] for t in tasks}) == 5040
    assert len({t.description for t in tasks}) == 5040
    # Structural variety: many different tool sets per type, not one template reworded.
    for task_type in TABLE7_COUNTS:
        shapes = {t.required_tools for t in tasks if t.task_type == task_type}
        assert len(shapes) >= 20, task_type


def test_full_suite_uses_all_30_tools():
    used = {tool for t in full_tasks() for tool in t.required_tools}
    assert used == {s.name for s in resilibench_library()}


def test_required_tools_order_and_dependencies_agree_with_the_dag_in_every_task():
    library = resilibench_library()
    for task in full_tasks():
        assert task.workflow.tool_order_is_consistent(list(task.required_tools)), task.id
        deps = {d for tool in task.required_tools for d in library.spec(tool).dependencies}
        assert deps <= set(task.required_tools), task.id
        optimum = task.metadata["optimal_workflow"]
        assert task.workflow.tool_order_is_consistent(optimum["tools"]), task.id
        assert 0 < optimum["success_probability"] <= 1


def test_stored_tasks_are_exactly_what_the_generator_makes_for_a_sample():
    library = resilibench_library()
    sample = random.Random(7).sample(full_tasks(), 30)
    for task in sample:
        assert rebuild_task(library, task.metadata["generator_key"]) == task


def test_default_tasks_are_the_first_eight_of_every_type_of_the_full_suite():
    full = {t.id: t for t in full_tasks()}
    defaults = default_tasks()
    assert collections.Counter(t.task_type for t in defaults) == dict.fromkeys(TABLE7_COUNTS, 8)
    for task in defaults:
        assert full[task.id] == task
        assert task.metadata["generator_key"].split(":")[2] in {str(i) for i in range(8)}


def test_full_list_is_interleaved_so_a_prefix_mixes_every_type():
    first = [t.task_type for t in full_tasks()[:50]]
    assert set(first) == set(TABLE7_COUNTS)


def test_suite_lists_the_full_suite_and_runs_the_default_set():
    suite = get_suite("resilibench")
    assert len(suite.tasks) == 5040
    assert len(suite.default_tasks) == 40
    last = suite.tasks[-1]
    assert suite.task(last.id) is last


@pytest.mark.parametrize("task_type", list(TABLE7_COUNTS))
def test_complexity_follows_the_task_type(task_type):
    complexities = {t.complexity for t in full_tasks() if t.task_type == task_type}
    assert len(complexities) == 1


def test_tasks_carry_the_table8_fields_and_round_trip_through_json():
    from mcp_resili.tasks import Task

    task = full_tasks()[123]
    data = task.model_dump(mode="json")
    assert data["instance_id"] == task.id and data["original_description"] == task.description
    assert data["constraints"]["timeout"] == 300 and data["constraints"]["max_retries"] == 3
    assert Task.model_validate(data) == task
    data["instance_id"] = "task_other"
    with pytest.raises(ValueError, match="differs from id"):
        Task.model_validate(data)
