import importlib.util
import json
import math
import statistics
from collections import Counter
from pathlib import Path

import jsonschema
import networkx as nx
import pytest

from mcp_resili.cli import main
from mcp_resili.suites.toolmaze.corpus import (
    PAPER_DOMAINS,
    PAPER_GROUPS,
    PAPER_ROLES,
    build_corpus,
    core_paths,
    decompositions,
    extra_style,
)
from mcp_resili.suites.toolmaze.corrupt import get_path
from mcp_resili.suites.toolmaze.library import corpus_index, toolmaze_corpus, toolmaze_library
from mcp_resili.suites.toolmaze.model import ToolMazeTask, path_links, resolve_path_arguments
from mcp_resili.suites.toolmaze.sanity import anomalies
from mcp_resili.suites.toolmaze.simulators import OPTIONS_PER_SUBJECT, booked
from mcp_resili.suites.toolmaze.tasks import toolmaze_tasks
from mcp_resili.tasks.stats import level_statistics, workflow_width
from mcp_resili.tools.library import ToolFailure

ROOT = Path(__file__).resolve().parents[3]


def regen_module():
    spec = importlib.util.spec_from_file_location("regen_tm", ROOT / "scripts" / "regenerate_toolmaze.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INPUT_VALIDATORS = {s.name: jsonschema.Draft202012Validator(s.input_schema) for s in toolmaze_library()}


def run_path(task, path, state=None):
    """Run a path through the simulators with its bindings; return (tool, arguments, record) per step."""
    library = toolmaze_library()
    state = {} if state is None else state
    by_step, prev, records = {}, None, []
    for number, step in path:
        arguments = resolve_path_arguments(step, task.inputs, prev, by_step)
        INPUT_VALIDATORS[step.tool].validate(arguments)
        prev = library.simulate(step.tool, arguments, state)
        by_step[number] = prev
        records.append((step.tool, arguments, prev))
    return records


def first_arguments(tool, subject="Paris", record_id="QU-00c0ffee", value=42.5):
    op = corpus_index().first_op(tool)
    args = {corpus_index().domains[op.domain].subject_field: subject}
    if op.role != "source":
        args[op.id_arg] = record_id
        args[op.measure_arg] = value
    if "priority" in toolmaze_library().spec(tool).input_schema["properties"]:
        args["priority"] = "high"
    return args


def core(tool, record):
    return {path: get_path(record, path) for path in core_paths(corpus_index().last_op(tool))}


def test_stored_corpus_and_tasks_are_exactly_what_the_generator_makes():
    module = regen_module()
    assert module.render_corpus() == module.CORPUS_PATH.read_text(encoding="utf-8")
    assert module.render_tasks() == module.TASKS_PATH.read_text(encoding="utf-8")


def test_corpus_has_the_papers_270_tools_domains_roles_and_126_groups():
    corpus = toolmaze_corpus()
    assert len(corpus.tools) == 270 and len({t.spec.name for t in corpus.tools}) == 270
    assert Counter(t.domain for t in corpus.tools) == PAPER_DOMAINS
    assert Counter(t.role for t in corpus.tools) == PAPER_ROLES
    assert Counter(g.kind for g in corpus.groups) == PAPER_GROUPS
    assert Counter(t.spec.access for t in corpus.tools)["write"] == PAPER_ROLES["action"]
    assert sum(1 for g in corpus.groups if len(g.members) == 3) == 6


def test_tools_have_their_own_schemas_not_one_envelope():
    index = corpus_index()
    specs = list(toolmaze_library())
    layouts = {json.dumps(s.output_schema, sort_keys=True) for s in specs}
    # Only tools returning the same op's record with the same provider extras share a layout.
    kinds = {
        (
            index.last_op(s.name).name,
            extra_style(index.tools[s.name], index.domains[index.tools[s.name].domain]),
        )
        for s in specs
    }
    assert len(layouts) == len(kinds) > 230
    names = Counter(name for s in specs for name in s.output_schema["properties"])
    assert len(names) > 300 and max(names.values()) < 0.6 * len(specs)
    nested = [
        s for s in specs if any(p.get("type") == "object" for p in s.output_schema["properties"].values())
    ]
    lists = [
        s for s in specs if any(p.get("type") == "array" for p in s.output_schema["properties"].values())
    ]
    assert len(nested) > 100 and len(lists) == len(specs)
    numbers = [p for s in specs for p in s.input_schema["properties"].values() if p.get("type") == "number"]
    assert numbers and all("minimum" in p and "maximum" in p for p in numbers)


def test_one_schema_of_every_layout_is_a_valid_json_schema():
    index = corpus_index()
    seen = set()
    for tool in toolmaze_corpus().tools:
        key = (
            tool.role,
            extra_style(tool, index.domains[tool.domain]),
            index.last_op(tool.spec.name).unit == "USD",
        )
        if key in seen:
            continue
        seen.add(key)
        jsonschema.Draft202012Validator.check_schema(tool.spec.input_schema)
        jsonschema.Draft202012Validator.check_schema(tool.spec.output_schema)
    assert len(seen) >= 10


def test_every_member_of_every_group_computes_the_same_record():
    corpus = toolmaze_corpus()
    index = corpus_index()
    library = toolmaze_library()
    for group in corpus.groups:
        assert sorted(decompositions(group.ops, {t.spec.name: t.ops for t in corpus.tools})) == sorted(
            group.members
        )
        outputs = []
        for member in group.members:
            assert tuple(op for name in member for op in index.tools[name].ops) == group.ops, group.id
            state: dict = {}
            record = library.simulate(member[0], first_arguments(member[0]), state)
            for name in member[1:]:
                previous = index.last_op(member[member.index(name) - 1]).facets
                op = index.first_op(name)
                args = {**first_arguments(name), op.id_arg: get_path(record, previous.id)}
                args[op.measure_arg] = get_path(record, previous.measure)
                record = library.simulate(name, args, state)
            outputs.append(core(member[-1], record))
        assert all(o == outputs[0] for o in outputs), group.id


def test_400_tasks_100_per_level_match_the_paper_table_1():
    tasks = toolmaze_tasks()
    assert len(tasks) == 400 and len({t.id for t in tasks}) == 400
    expected = {"C1": (5.30, 5, 7, 1), "C2": (5.75, 5, 9, 2), "C3": (6.66, 6, 10, 2), "C4": (11.00, 8, 15, 6)}
    for level, (mean, low, high, paths) in expected.items():
        members = [t for t in tasks if t.level == level]
        lengths = [len(t.shortest_path) for t in members]
        assert len(members) == 100
        assert statistics.mean(lengths) == pytest.approx(mean)
        assert min(lengths) == low and max(lengths) == high
        assert statistics.mean(len(t.valid_paths) for t in members) == paths
    assert all(any(g.kind == "many_to_many" for g in t.alternative_groups) for t in tasks if t.level == "C3")
    c4 = [t for t in tasks if t.level == "C4"]
    assert all(8 <= len(t.chain) <= 12 and len(t.alternative_groups) >= 2 for t in c4)
    assert all(len(t.perturbations.slots) == len(t.alternative_groups) for t in c4)
    assert Counter(len(t.valid_paths) for t in c4) == {6: 50, 4: 25, 8: 25}


def test_c4_tasks_are_dags_with_parallel_branches_each_holding_an_armed_group():
    for task in [t for t in toolmaze_tasks() if t.level == "C4"]:
        workflow = task.workflow
        graph = workflow.graph()
        assert workflow_width(workflow) >= 2, task.id
        # The armed groups sit on different branches: no group's step is an ancestor of another's.
        path = task.path_steps()[task.shortest_path_index()]
        first_step = {n: f"s{i + 1}" for i, (n, _) in reversed(list(enumerate(path)))}
        slots = [first_step[g.step] for g in task.alternative_groups]
        for a in slots:
            for b in slots:
                assert a == b or not nx.has_path(graph, a, b), task.id
    linear = [t for t in toolmaze_tasks() if t.level != "C4"]
    assert all(workflow_width(t.workflow) == 1 for t in linear[::7])


def prev_runs(task):
    """The runs of chain steps linked by ``prev``: where a combined tool could fuse steps."""
    runs = []
    for element in task.chain:
        first = task.group(element.alternative_id).members[0][0] if element.is_alternative else None
        bindings = first.arg_bindings if first else element.arg_bindings
        linked = any(b.source == "prev" for b in bindings.values())
        if linked and runs:
            runs[-1].append(element)
        else:
            runs.append([element])
    return runs


def test_valid_paths_are_every_tool_sequence_of_the_corpus_that_computes_the_task():
    tool_ops = {t.spec.name: t.ops for t in toolmaze_corpus().tools}
    for task in toolmaze_tasks():
        total = 1
        for run in prev_runs(task):
            ops = []
            for element in run:
                if element.is_alternative:
                    ops.extend(corpus_index().groups[task.group(element.alternative_id).corpus_group].ops)
                else:
                    ops.extend(tool_ops[element.tool_name])
            total *= len(decompositions(ops, tool_ops))
        assert total == len(task.valid_paths), task.id


def test_every_group_and_every_tool_is_used_by_some_task():
    tasks = toolmaze_tasks()
    assert {g.corpus_group for t in tasks for g in t.alternative_groups} == set(corpus_index().groups)
    assert {tool for t in tasks for path in t.valid_paths for tool in path} == set(corpus_index().tools)


def test_every_valid_path_runs_cleanly_and_computes_the_same_final_record():
    for task in toolmaze_tasks()[::9]:
        finals = []
        for path in task.path_steps():
            records = run_path(task, path)
            for tool, arguments, record in records:
                assert anomalies(tool, arguments, record) == [], (
                    task.id,
                    tool,
                    anomalies(tool, arguments, record),
                )
            finals.append(core(records[-1][0], records[-1][2]))
        assert all(f == finals[0] for f in finals), task.id


def test_after_an_alternative_step_later_steps_bind_only_keys_every_member_returns():
    library = toolmaze_library()
    for task in toolmaze_tasks():
        for path in task.path_steps():
            for i, links in enumerate(path_links(path)):
                for _, producer, field in links:
                    number = path[producer][0]
                    element = task.element(number)
                    if not element.is_alternative or path[i][0] == number:
                        continue
                    for member in task.group(element.alternative_id).members:
                        schema = library.spec(member[-1].tool).output_schema
                        node = schema
                        for part in field.split("."):
                            node = node["properties"][part]
                        assert field in core_paths(corpus_index().last_op(member[-1].tool)), (task.id, field)


def test_bindings_use_all_four_sources_and_the_request_states_subject_and_priorities():
    tasks = toolmaze_tasks()
    sources = Counter(
        b.source for t in tasks for p in t.path_steps() for _, s in p for b in s.arg_bindings.values()
    )
    assert set(sources) == {"user_input", "prev", "step", "constant"}
    for task in tasks:
        assert task.inputs["subject"] in task.description
        for _, step in task.path_steps()[0]:
            if "priority" in step.arg_bindings:
                assert f"({step.arg_bindings['priority'].value} priority)" in task.description


def test_every_tool_returns_a_schema_valid_record_for_extreme_inputs():
    library = toolmaze_library()
    for spec in library:
        for subject, record_id, value in (
            ("Zürich ☂", "x" * 200, -1_000_000),
            ("a", "R", 1_000_000),
            ("B", "-", 0.000001),
            ("\ud800 lone surrogate", "\udfff", 7),
        ):
            state: dict = {}
            record = library.simulate(spec.name, first_arguments(spec.name, subject, record_id, value), state)
            assert math.isfinite(get_path(record, corpus_index().last_op(spec.name).facets.measure))


def test_a_booking_hides_its_option_from_availability_and_a_second_booking_books_again():
    library = toolmaze_library()
    state: dict = {}
    search = library.simulate("search_flights", {"city": "Paris"}, state)
    args = {"source_id": search["flight_search_id"], "quantity": 300.0, "city": "Paris", "priority": "normal"}
    first = library.simulate("book_flight_skyscan", args, state)
    second = library.simulate("book_flight", args, state)
    after = library.simulate("search_flights", {"city": "Paris"}, state)
    assert first["booked_flight"] != second["booked_flight"] and first["booking_id"] != second["booking_id"]
    assert booked(state, "flight", "Paris") == [first["booked_flight"], second["booked_flight"]]
    assert first["booked_flight"] in search["available_flights"]
    assert (
        first["booked_flight"] not in after["available_flights"]
        and second["booked_flight"] not in after["available_flights"]
    )
    assert after["flights_available"] == search["flights_available"] - 2
    assert after["flight_search_id"] != search["flight_search_id"]
    assert library.simulate("search_flights", {"city": "Paris"}, {}) == search
    for _ in range(OPTIONS_PER_SUBJECT - 2):
        library.simulate("book_flight", args, state)
    sold_out = library.simulate("search_flights", {"city": "Paris"}, state)
    assert sold_out["status"] == "sold_out" and sold_out["available_flights"] == []
    assert anomalies("search_flights", {"city": "Paris"}, sold_out) == []
    with pytest.raises(ToolFailure, match="SOLD_OUT"):
        library.simulate("book_flight", args, state)


def test_tasks_list_json_carries_level_paths_and_groups(capsys):
    assert main(["tasks", "list", "--suite", "toolmaze", "--json"]) == 0
    tasks = json.loads(capsys.readouterr().out)
    first = next(t for t in tasks if t["level"] == "C4")
    assert {"id", "level", "valid_paths", "shortest_path", "alternative_groups", "chain"} <= first.keys()
    assert first["shortest_path"] in first["valid_paths"]
    ToolMazeTask.model_validate({k: v for k, v in first.items() if k != "instance_id"})


def test_level_statistics_recompute_the_papers_table_1_and_the_corpus_totals():
    rows = {r.level: r for r in level_statistics(toolmaze_tasks())}
    assert [rows[lv].mean_length for lv in ("C1", "C2", "C3", "C4")] == [5.3, 5.75, 6.66, 11.0]
    assert [(rows[lv].min_length, rows[lv].max_length) for lv in ("C1", "C2", "C3", "C4")] == [
        (5, 7),
        (5, 9),
        (6, 10),
        (8, 15),
    ]
    assert [rows[lv].mean_valid_paths for lv in ("C1", "C2", "C3", "C4")] == [1, 2, 2, 6]
    assert rows["C3"].group_kinds == {"many_to_many": 100}
    assert rows["C4"].mean_width >= 2 and rows["C1"].mean_width == 1
    assert rows["all"].tools == 270 and rows["all"].groups == PAPER_GROUPS


def test_tasks_stats_prints_the_per_level_table_1_columns_and_the_totals(capsys):
    assert main(["tasks", "stats", "--suite", "toolmaze", "--json"]) == 0
    rows = {r["level"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["all"]["tools"] == 270 and sum(rows["all"]["groups"].values()) == 126
    assert main(["tasks", "stats", "--suite", "toolmaze"]) == 0
    out = capsys.readouterr().out
    assert all(level in out for level in ("C1", "C2", "C3", "C4")) and "11.00" in out
    assert "270" in out and "many_to_many=56" in out


def test_the_built_corpus_refuses_a_group_with_an_undeclared_decomposition():
    from mcp_resili.suites.toolmaze.corpus import blueprint

    data = json.loads(json.dumps(blueprint()))
    general = next(d for d in data["domain"] if d["name"] == "general")
    # translate_text has a provider variant, so a combo with it is not the pair's only other decomposition.
    general["o2m"].append(["translate_text", "convert_units"])
    with pytest.raises(ValueError, match="translate_text_quickcalc"):
        build_corpus(data)
    general["o2m"][-1] = ["convert_units", "send_sms"]
    with pytest.raises(ValueError, match="convert_units_and_send_sms is defined twice"):
        build_corpus(data)
