"""Fast listings: ``tasks list --json`` copied from a canonical task file is byte for byte what the
models dump; msgspec's index of a task file is `_scan`'s; jsonschema_rs's schema check never says yes
where jsonschema says no; ``--help`` imports none of the run machinery. (Their CPU is measured in
bench/listings.py, never here.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest
from tiny_suite import tasks as tiny_tasks

from mcp_resili.cli import main
from mcp_resili.registry.loader import get_suite
from mcp_resili.tasks import lazy
from mcp_resili.tasks.lazy import LazyTaskList
from mcp_resili.tasks.listing import copied_listing, model_listing
from mcp_resili.tasks.model import Task, TaskSet
from mcp_resili.tools import validator
from mcp_resili.tools.library import ToolLibrary
from mcp_resili.tools.spec import ToolSpec
from mcp_resili.tools.validator import schema_error

#: What a suite's generator leaves out of its task file (scripts/regenerate_default_tasks.py).
EXCLUDE = {"tasks": {"__all__": {"instance_id", "original_description"}}}


def _odd_tasks() -> list[Task]:
    """The tiny suite's tasks, plus copies whose strings need escaping and whose original description
    differs from the description (it lives in metadata)."""
    base = list(tiny_tasks())
    odd = [
        base[0].model_copy(
            update={
                "id": "odd-1",
                "description": 'quotes " and \\ backslash, tab\t newline\n, \u2028 line sep, é → 😀, \x01',
                "metadata": {"original_description": 'was "other"\n\x7f \ud7ff', "n": 1.5e-7},
            }
        ),
        base[1].model_copy(update={"id": "odd-2", "metadata": {"big": 10**30, "f": 1e16, "neg": -0.0}}),
    ]
    return [*base, *odd]


def _canonical(tasks: list[Task]) -> LazyTaskList:
    """A canonical task file of ``tasks``: the dump of the tasks read back from JSON, since a task built
    in Python may dump differently from the same task read from its dump (an int in a float field,
    such as the tiny suite's ``timeout=300``, dumps as ``300`` and reads back as ``300.0``)."""
    once = TaskSet(suite="tiny", tasks=tuple(tasks)).model_dump_json(exclude=EXCLUDE)
    text = TaskSet.model_validate_json(once).model_dump_json(exclude=EXCLUDE)
    return LazyTaskList.from_json(text, source="tasks.json", canonical=True)


def test_a_copied_listing_of_the_tiny_suite_and_odd_strings_is_the_models_listing_byte_for_byte():
    tasks = _odd_tasks()
    listing = _canonical(tasks)
    copied = copied_listing(listing)
    assert copied is not None and copied == model_listing(list(listing))
    assert b'"timeout":300.0' in copied and b'"timeout":300,' in model_listing(tasks)  # see _canonical
    parsed = json.loads(copied)
    assert parsed[-2]["original_description"] == 'was "other"\n\x7f \ud7ff'
    assert parsed[-2]["instance_id"] == "odd-1" and parsed[0]["original_description"] == tasks[0].description
    assert (
        copied_listing(listing[2:5]) == model_listing(list(listing[2:5]))
        and copied_listing(listing[:0]) == b"[]"
    )


def test_the_whole_resilibench_listing_is_copied_and_is_the_models_listing_byte_for_byte():
    # The canonical promise of full.json.gz, checked for every one of its 5,040 tasks.
    tasks = get_suite("resilibench").tasks
    assert isinstance(tasks, LazyTaskList) and tasks.canonical and len(tasks) == 5040
    copied = copied_listing(tasks)
    assert copied is not None and copied == model_listing(tasks)


def test_the_command_writes_the_copied_listing(capsysbinary):
    tasks = get_suite("resilibench").tasks
    assert main(["tasks", "list", "--suite", "resilibench", "--json"]) == 0
    out = capsysbinary.readouterr().out
    assert out == copied_listing(tasks) + b"\n" and out.count(b'"instance_id"') == 5040


@pytest.mark.parametrize(
    "why, make",
    [
        (
            "not canonical",
            lambda t: LazyTaskList.from_json(TaskSet(suite="tiny", tasks=t).model_dump_json(), source="x"),
        ),
        ("a plain tuple", lambda t: tuple(t)),
        (
            "a domain",
            lambda t: _canonical([*t, t[0].model_copy(update={"id": "d", "metadata": {"domain": "x"}})]),
        ),
        (
            "a non-string original description (the model writes Python's str() of it)",
            lambda t: _canonical([t[0].model_copy(update={"metadata": {"original_description": [1, "a"]}})]),
        ),
        (
            "computed fields in the file (a copy would repeat them)",
            lambda t: LazyTaskList.from_json(
                TaskSet(suite="tiny", tasks=t).model_dump_json(), source="x", canonical=True
            ),
        ),
        (
            "another task class",
            lambda t: LazyTaskList.from_json(
                TaskSet(suite="tiny", tasks=t).model_dump_json(exclude=EXCLUDE),
                source="x",
                model=type("OtherTask", (Task,), {}),
                canonical=True,
            ),
        ),
    ],
)
def test_what_cannot_be_copied_exactly_is_left_to_the_models(why, make):
    assert copied_listing(make(tuple(tiny_tasks()))) is None, why


def test_a_non_string_original_description_still_lists_through_the_models(capsys):
    task = tiny_tasks()[0].model_copy(update={"metadata": {"original_description": 3}})
    assert json.loads(model_listing([task]))[0]["original_description"] == "3"


@pytest.mark.parametrize(
    "text",
    [
        '{"suite": "tiny", "tasks": [%s, %s]}',
        ' \n{ "tasks" :[ %s ,\n %s ] , "suite":"tiny", "seed": 7}\n ',
        '{"suite": "tiny", "tasks": [], "tasks": [%s, %s]}',
    ],
)
def test_msgspec_indexes_a_task_file_as_the_careful_walk_does(text, monkeypatch):
    one, two = (t.model_dump_json(exclude={"instance_id", "original_description"}) for t in tiny_tasks()[:2])
    data = text % (one, two) if "%s" in text else text
    fast = LazyTaskList.from_json(data.encode(), source="x")
    monkeypatch.setattr(lazy, "_index_fast", lambda data: None)
    slow = LazyTaskList.from_json(data, source="x")
    assert list(fast.stored_texts()) == list(slow.stored_texts()) == [one.encode(), two.encode()]
    assert fast.summaries == slow.summaries and [t.id for t in fast] == [t.id for t in slow]


@pytest.mark.parametrize(
    "data",
    [
        b'{"suite": "tiny", "tasks": [{"id": 1, "task_type": "a", "complexity": "easy"}]}',
        b'{"suite": "tiny", "tasks": [NaN]}',
        b'{"suite": "tiny"}',
        b'{"suite": "tiny", "tasks": [[]]}',
        b'["not", "a", "set"]',
        '{"suite": "tiny", "tasks": ["\ud800"]}',
    ],
)
def test_a_file_the_fast_index_declines_goes_to_the_careful_walk(data):
    assert lazy._index_fast(data) is None


#: Schemas on which a Rust meta-check and Python's could disagree, and plain ones.
SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]+$"}}},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}},
    {"type": "object", "properties": {"a": {"pattern": "(?<name>x)"}}},  # ECMA named group, not Python's
    {"type": "object", "patternProperties": {"(?<n>x)": {"type": "string"}}},
    {"type": "object", "patternProperties": {"^x_": {"type": "string"}}},
    {"type": "object", "properties": {"a": {"type": "strin"}}},
    {"type": "object", "minLength": -1},
    {"type": "object", "items": [{}]},
    {"type": "object", "$ref": "#/$defs/x", "$defs": {"x": {"type": "object"}}},
    {"type": "object", "properties": {"pattern": {"type": "string"}}, "default": {"pattern": "("}},
    {"type": "object", "properties": {"a": {"type": "array", "prefixItems": [{"type": "integer"}]}}},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_schema_check_is_jsonschemas_verdict_and_message(schema):
    expected = None
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        expected = exc.message
    error = validator._check(schema)
    assert (error.message if error is not None else None) == expected
    assert (schema_error(schema) is None) == (expected is None)
    if expected is not None:
        assert not validator._surely_valid(schema)


def test_help_imports_none_of_the_run_machinery():
    code = (
        "import sys, contextlib, io\n"
        "from mcp_resili.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    main(['--help'])\n"
        "assert 'tasks' in out.getvalue()\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    heavy = {"pydantic", "mcp", "rich", "httpx", "anthropic", "openai", "networkx", "jsonschema", "aiohttp"}
    assert heavy.isdisjoint(loaded)
    assert {"mcp_resili.registry.loader", "mcp_resili.tasks.model", "mcp_resili.cli.taskcheck"}.isdisjoint(
        loaded
    )
    # The suites are still named, read from their entry points without importing one.
    proc = subprocess.run(
        [sys.executable, "-m", "mcp_resili", "serve", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "resilibench" in proc.stdout and "toolmaze" in proc.stdout


@pytest.mark.parametrize(
    "dependencies, cyclic",
    [
        ({"a": (), "b": ("a",), "c": ("a", "b")}, False),
        ({"a": ("c",), "b": ("a",), "c": ("b",)}, True),
        ({"a": ("a",), "b": ()}, True),
    ],
)
def test_a_library_with_cyclic_tool_dependencies_is_refused(dependencies, cyclic):
    # Checked with graphlib at load (networkx is imported only for `dependency_graph`).
    specs = tuple(
        ToolSpec(name=name, description=name, input_schema={"type": "object"}, dependencies=deps)
        for name, deps in dependencies.items()
    )
    simulators = dict.fromkeys(dependencies, lambda arguments, state: {})
    if cyclic:
        with pytest.raises(ValueError, match="has cyclic tool dependencies"):
            ToolLibrary("lib", specs, simulators)
    else:
        library = ToolLibrary("lib", specs, simulators)
        assert sorted(library.dependency_graph.edges) == [("a", "b"), ("a", "c"), ("b", "c")]
