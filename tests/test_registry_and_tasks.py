"""The suite contract and the data it is made of: tool specs, tasks and their DAGs, unknown names,
prompts, and suites whose fields or tasks are wrong. On the tiny suite (tests/tiny_suite)."""

import sys
from dataclasses import replace

import pytest
from pydantic import ValidationError
from tiny_suite import suite as tiny_suite
from tiny_suite import tasks as tiny_tasks

from mcp_resili.registry.loader import get_suite
from mcp_resili.registry.suites import SuiteLoadError, UnknownSuiteError, UnknownTaskError
from mcp_resili.tasks import Task
from mcp_resili.tools import ToolSpec

TINY = tiny_suite()


def test_tool_spec_rejects_non_object_schema_and_bad_names():
    with pytest.raises(ValidationError, match="object root"):
        ToolSpec(name="t", description="", input_schema={"type": "string"})
    with pytest.raises(ValidationError, match="valid MCP tool name"):
        ToolSpec(name="has space", description="", input_schema={"type": "object"})


def test_task_rejects_required_tools_that_contradict_the_dag():
    task = TINY.task("tiny-3")  # lookup → scale → record
    data = task.model_dump(mode="json", exclude={"instance_id"})
    data["required_tools"] = list(reversed(data["required_tools"]))
    with pytest.raises(ValidationError, match="contradicts"):
        Task.model_validate(data)


def test_task_rejects_a_cyclic_workflow():
    task = TINY.task("tiny-2")  # lookup → scale
    data = task.model_dump(mode="json", exclude={"instance_id"})
    a, b = data["workflow"]["edges"][0]
    data["workflow"]["edges"].append([b, a])
    with pytest.raises(ValidationError, match="cycle"):
        Task.model_validate(data)


def test_unknown_suite_and_task_errors_suggest_alternatives():
    with pytest.raises(UnknownSuiteError, match=r"available: .*\btiny\b"):
        get_suite("nope")
    with pytest.raises(UnknownTaskError) as unknown:
        TINY.task("tiny-12")
    message, _, suggested = str(unknown.value).partition("; did you mean ")
    assert message == "unknown task 'tiny-12' in suite 'tiny'"
    assert "tiny-1" in suggested.rstrip("?").split(", ")
    with pytest.raises(UnknownTaskError, match="see `mcp-resili tasks list --suite tiny`"):
        TINY.task("zzzzzz")


def test_prompts_carry_the_task_and_inputs():
    for task in TINY.tasks:
        text = TINY.prompt(task)
        assert task.description in text and "finish" in text
        assert all(str(v) in text for v in task.inputs.values())
        assert TINY.prompt(task, "terse") == task.description  # the suite's own variant
    with pytest.raises(ValueError, match="variant"):
        TINY.prompt(TINY.tasks[0], "nope")


@pytest.mark.parametrize(
    ("field", "value"),
    [("agents", None), ("fault_specs", None), ("library", None), ("score", None), ("variants", "baseline")],
)
def test_a_suite_with_a_field_of_the_wrong_type_is_refused_when_built(field, value):
    # A third party's ``Suite(agents=None)`` fails in its factory (one line from `get_suite`), not
    # later in whichever command reads the field.
    with pytest.raises(TypeError, match=f"Suite {field} must be"):
        replace(TINY, **{field: value})


def _exit() -> list[Task]:
    sys.exit("tasks called sys.exit")


def _missing_key() -> list[Task]:
    return {}["tasks"]


@pytest.mark.parametrize(
    ("load_tasks", "expected"),
    [
        (lambda: [task.model_dump(mode="json") for task in tiny_tasks()], "must be Task objects"),
        (lambda: [*tiny_tasks(), "x"], "item 6 is a str"),
        (lambda: None, "not a sequence of Task"),
        (_missing_key, "KeyError"),
        (_exit, "SystemExit: tasks called sys.exit"),
    ],
)
def test_a_suite_whose_tasks_are_not_task_objects_or_do_not_load_is_one_line(load_tasks, expected):
    suite = replace(TINY, load_tasks=load_tasks)
    with pytest.raises(SuiteLoadError, match=expected) as error:
        _ = suite.tasks
    assert "\n" not in str(error.value)
