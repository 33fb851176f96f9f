"""A big task list kept as text: tasks are built one at a time when used; a broken one is one line.

The list is the tiny suite's six tasks seven times over (tests/tiny_suite), served by its tools and
scorer; ResiliBench's own 5,040-task list is checked in tests/suites/resilibench/.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import textwrap
import weakref
from collections.abc import Callable
from typing import ClassVar

import pytest
from pydantic import model_validator
from tiny_suite import suite as tiny_suite
from tiny_suite import tasks as tiny_tasks

from mcp_resili.cli import main
from mcp_resili.client.plan import RunConfig, run_task_ids, select_tasks
from mcp_resili.registry import loader as registry
from mcp_resili.registry.loader import SuiteEntry
from mcp_resili.registry.suites import SuiteLoadError, UnknownTaskError
from mcp_resili.tasks.lazy import RECENT_TASKS, InvalidTaskError, LazyTaskList
from mcp_resili.tasks.model import Task, TaskSet

#: The tiny suite's six tasks, seven times under new ids (``tiny-3-2``: task tiny-3's third copy), as an
#: indented task file: 42 tasks.
DEFAULT_TEXT = json.dumps(
    {
        "suite": "tiny",
        "tasks": [
            {**task.model_dump(mode="json", exclude={"instance_id"}), "id": f"{task.id}-{copy}"}
            for copy in range(7)
            for task in tiny_tasks()
        ],
    },
    indent=1,
)


class CountingTask(Task):
    """A `Task` that records the id of every task built, so a test can see what was parsed."""

    built: ClassVar[list[str]] = []

    @model_validator(mode="after")
    def _count(self) -> CountingTask:
        CountingTask.built.append(self.id)
        return self


def task_set(position: int = 0, edit: Callable[[dict], object] = lambda task: None) -> dict:
    """The default task set as JSON data, ``edit`` applied to its task at ``position``."""
    data = json.loads(DEFAULT_TEXT)
    edit(data["tasks"][position])
    return data


def lazy_suite(text: str, name: str = "lazy"):
    """The tiny suite's tools and scorer over a lazy list of ``text`` (no default set: it is the list)."""
    CountingTask.built.clear()
    return dataclasses.replace(
        tiny_suite(),
        name=name,
        load_tasks=lambda: LazyTaskList.from_json(text, source="tasks.json", model=CountingTask),
        load_default_tasks=None,
    )


def test_the_lazy_list_is_a_sequence_of_the_eager_parse_s_tasks_in_order():
    eager = TaskSet.model_validate_json(DEFAULT_TEXT).tasks
    lazy = LazyTaskList.from_json(DEFAULT_TEXT.encode(), source="default.json")
    assert len(lazy) == len(eager) == 42
    assert list(lazy) == list(eager)
    assert [s.id for s in lazy.summaries] == [t.id for t in eager]
    assert [(s.task_type, s.complexity) for s in lazy.summaries] == [
        (t.task_type, t.complexity) for t in eager
    ]
    assert lazy[0] == eager[0] and lazy[-1] == eager[-1] and lazy[17] == eager[17]
    for cut in (slice(3, 9), slice(None, None, 7), slice(None, None, -3), slice(-5, None), slice(50, 60)):
        assert list(lazy[cut]) == list(eager[cut])
        assert [s.id for s in lazy[cut].summaries] == [t.id for t in eager[cut]]
    assert lazy[::2][1:3][0] == eager[2]
    assert eager[5] in lazy and lazy.index(eager[5]) == 5
    with pytest.raises(IndexError):
        lazy[42]


def test_suite_task_builds_only_the_task_asked_for_and_shares_it_while_in_use():
    suite = lazy_suite(DEFAULT_TEXT)
    wanted = suite.task_summaries[30]
    task = suite.task(wanted.id)
    assert task.id == wanted.id and CountingTask.built == [wanted.id]
    assert suite.task(wanted.id) is task and CountingTask.built == [wanted.id]
    other = suite.task_summaries[12]
    assert suite.task_info(other.id) == {"task_type": other.task_type, "complexity": other.complexity}
    assert CountingTask.built == [wanted.id]


def test_an_unknown_task_id_still_gets_close_suggestions_without_building_any_task():
    suite = lazy_suite(DEFAULT_TEXT)
    known = suite.task_summaries[7].id
    with pytest.raises(UnknownTaskError, match=f"did you mean {known}\\b"):  # the closest first
        suite.task(known + "x")
    assert suite.task_info("nope") == {} and CountingTask.built == []


def test_iterating_the_list_keeps_only_the_recent_tasks_alive():
    many = task_set()
    originals = many["tasks"]
    many["tasks"] = []
    for copy in range(RECENT_TASKS // len(originals) + 2):  # more tasks than the recent ones kept
        for original in originals:
            task = {**original, "id": f"{original['id']}-{copy}"}
            task.pop("instance_id", None)
            many["tasks"].append(task)
    lazy = LazyTaskList.from_json(json.dumps(many), source="many.json")
    first = weakref.ref(lazy[0])
    assert sum(1 for _ in lazy) == len(many["tasks"]) > RECENT_TASKS
    gc.collect()
    assert first() is None
    assert lazy[-1] is lazy[-1]  # a task still referenced is found again, not rebuilt


def test_a_limit_sample_of_a_lazy_list_builds_only_the_tasks_it_draws():
    suite = lazy_suite(DEFAULT_TEXT)
    config = RunConfig(suite="lazy", limit=6, stratified=True, seed=3)
    ids = run_task_ids(config, suite)
    assert ids == [t.id for t in select_tasks(TaskSet.model_validate_json(DEFAULT_TEXT).tasks, 6, seed=3)]
    assert sorted(CountingTask.built) == sorted(ids)


def _break_tools(task: dict) -> None:
    task["required_tools"] = task["required_tools"][:-1]  # no longer the workflow's tools


def test_a_task_that_does_not_validate_is_one_line_naming_it_when_it_is_built():
    suite = lazy_suite(json.dumps(task_set(3, _break_tools)))
    broken = suite.task_summaries[3].id
    assert len(suite.tasks) == 42  # indexing reads ids, types and complexities only
    with pytest.raises(SuiteLoadError) as caught:
        suite.task(broken)
    message = str(caught.value)
    assert message.startswith(f"suite 'lazy': invalid task {broken!r} (tasks[3] of tasks.json): 1 problem(s)")
    assert "\n" not in message and "required_tools" in message
    with pytest.raises(InvalidTaskError, match=broken):
        list(suite.tasks)
    with pytest.raises(SuiteLoadError, match=broken):  # a run plans (and builds) its tasks first
        run_task_ids(RunConfig(suite="lazy", all_tasks=True), suite)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            json.dumps(task_set(5, lambda t: t.pop("id"))),
            r"invalid task \(tasks\[5\] of tasks.json\): .*first at id",
        ),
        (
            json.dumps(task_set(5, lambda t: t.update(complexity=3))),
            r"invalid task \(tasks\[5\] of tasks.json\): .*first at complexity",
        ),
        (DEFAULT_TEXT[:5000], r"tasks.json: invalid JSON: "),
        (DEFAULT_TEXT + "[]", r"tasks.json: extra data after the task set"),
        (json.dumps({"suite": "x"}), r"tasks.json: no 'tasks' list"),
        (json.dumps({"suite": "x", "tasks": {}}), r"tasks.json: expected '\[' at char"),
        (
            json.dumps({**task_set(), "format_version": 2}),
            r"tasks.json: 1 problem\(s\), first at format_version",
        ),
    ],
)
def test_a_task_file_that_cannot_be_indexed_is_refused_at_load_in_one_line(text, expected):
    suite = lazy_suite(text)
    with pytest.raises(SuiteLoadError, match=f"^suite 'lazy': {expected}") as caught:
        _ = suite.tasks
    assert "\n" not in str(caught.value)


def test_the_cli_refuses_a_run_over_a_broken_lazy_task_in_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "tasks.json").write_text(json.dumps(task_set(3, _break_tools)), encoding="utf-8")
    (tmp_path / "lazy_broken_suite.py").write_text(
        textwrap.dedent(
            f"""
            import dataclasses
            from mcp_resili.tasks.lazy import LazyTaskList
            from tiny_suite import suite as tiny_suite

            def suite():
                text = open({str(tmp_path / "tasks.json")!r}, encoding="utf-8").read()
                return dataclasses.replace(
                    tiny_suite(), name="lazybroken", load_default_tasks=None,
                    load_tasks=lambda: LazyTaskList.from_json(text, source="tasks.json"),
                )
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    entries = {**registry.registered_suites()}
    entries["lazybroken"] = SuiteEntry("lazybroken", "lazy_broken_suite:suite", "tests", "1.0")
    monkeypatch.setattr(registry, "registered_suites", lambda: entries)
    db = tmp_path / "r.db"
    assert main(["run", "--suite", "lazybroken", "--all-tasks", "--faults", "none", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mcp-resili: error: suite 'lazybroken': invalid task ")
    assert "(tasks[3] of tasks.json)" in err and not db.exists()
