"""Exports (JSONL, CSV, Parquet, traces) of real and synthetic runs of the tiny suite (tests/tiny_suite),
and the refusals that keep the results database and its stored values safe."""

import csv
import io
import json
import sys
from dataclasses import replace

import pytest
from tiny_suite import suite as tiny_suite
from tiny_suite.synthetic import write_synthetic_run

from mcp_resili.cli import main
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.scoring.termination import StopDecision, StopRules
from mcp_resili.store import Store
from mcp_resili.store.export import FIXED_COLUMNS, trace_file_name
from mcp_resili.trace import Trace


@pytest.fixture(scope="module")
def run_db(tmp_path_factory):
    """A real offline run (the tiny suite's own faults, so ledgers are not empty), played with --trace-dir."""
    base = tmp_path_factory.mktemp("export")
    db, traces = base / "r.db", base / "traces"
    argv = [
        "run",
        "--suite",
        "tiny",
        "--db",
        str(db),
        "--trials",
        "1",
        "--limit",
        "3",
        "--seed",
        "5",
        "--trace-dir",
        str(traces),
    ]
    assert main(argv) == 0
    return db, traces


def stored(db):
    store = Store(db)
    try:
        (run_id,) = store.run_ids()
        return run_id, store.episodes(run_id)
    finally:
        store.close()


def test_run_trace_dir_writes_each_stored_episodes_trace_as_a_jsonl_file(run_db):
    db, traces = run_db
    _, rows = stored(db)
    files = sorted(traces.iterdir())
    assert len(files) == len(rows) == 6  # 3 tasks x 1 trial x 2 models
    for row in rows:
        path = traces / trace_file_name(row.episode_id)
        assert path.read_text() == row.trace
        assert Trace.read(path).header.episode == row.episode_id


def test_jsonl_export_has_one_row_per_episode_with_score_components_and_the_fault_ledger(run_db, capsys):
    db, _ = run_db
    _, rows = stored(db)
    assert main(["export", "--db", str(db)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["episode_id"] for r in records] == [r.episode_id for r in rows]
    for record, row in zip(records, rows, strict=True):
        trace = Trace.from_lines(row.trace.splitlines())
        faulted = [c for c in trace.tool_calls if c.fault is not None]
        assert record["injected_total"] == len(faulted)
        assert record["injected_explicit"] + record["injected_implicit"] == len(faulted)
        for fault_type in {c.fault.type for c in faulted}:
            assert record[f"injected_{fault_type}"] == sum(1 for c in faulted if c.fault.type == fault_type)
        assert record["tool_calls"] == len(trace.tool_calls)
        assert record["label"] == row.label and record["termination"] == row.termination
        for name, value in row.score["components"].items():
            assert record[f"score_{name}"] == value
    assert sum(r["injected_total"] for r in records) > 0  # the run met faults: the ledger was read


def test_csv_and_parquet_exports_carry_the_same_typed_rows(run_db, tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    db, _ = run_db
    assert main(["export", "--db", str(db)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    out = tmp_path / "episodes.parquet"
    assert main(["export", "--db", str(db), "--format", "parquet", "--out", str(out)]) == 0
    table = pq.read_table(out)
    assert table.num_rows == len(records)
    assert table.column_names[: len(FIXED_COLUMNS)] == [c.name for c in FIXED_COLUMNS]
    types = {f.name: str(f.type) for f in table.schema}
    assert types["tool_calls"] == "int64" and types["value"] == "double"
    assert types["infrastructure_error"] == "bool" and types["score_order_ok"] == "bool"
    assert types["score_steps_done"] == "int64"
    assert table.schema.metadata[b"mcp_resili.export_version"] == b"3"
    columns = table.to_pydict()
    for i, record in enumerate(records):
        for name in ("episode_id", "label", "injected_total", "score_steps_done", "cost_usd"):
            assert columns[name][i] == record[name]
    # A fault type an episode did not meet is 0 there, not missing.
    assert all(isinstance(v, int) for name in columns if name.startswith("injected_") for v in columns[name])

    assert main(["export", "--db", str(db), "--format", "csv"]) == 0
    lines = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [line["episode_id"] for line in lines] == [r["episode_id"] for r in records]
    assert {line["infrastructure_error"] for line in lines} <= {"true", "false"}
    assert [int(line["injected_total"]) for line in lines] == [r["injected_total"] for r in records]


def test_traces_export_is_one_jsonl_stream_of_every_episode(run_db, tmp_path):
    db, _ = run_db
    _, rows = stored(db)
    out = tmp_path / "traces.jsonl"
    assert main(["export", "--db", str(db), "--traces", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == sum(len(r.trace.splitlines()) for r in rows)
    by_episode = {}
    for line in lines:
        event = json.loads(line)
        by_episode.setdefault(event["episode"], []).append(line)
    assert set(by_episode) == {r.episode_id for r in rows}
    for row in rows:
        assert Trace.from_lines(by_episode[row.episode_id]) == Trace.from_lines(row.trace.splitlines())


def test_export_of_two_runs_names_each_rows_run(tmp_path, capsys):
    db = tmp_path / "two.db"
    write_synthetic_run(db, 30, run_id="a", seed=1)
    write_synthetic_run(db, 20, run_id="b", seed=2)
    assert main(["export", "a", "b", "--db", str(db)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["run_id"] for r in records] == ["a"] * 30 + ["b"] * 20
    assert {r["seed"] for r in records if r["run_id"] == "b"} == {2}


@pytest.mark.parametrize(
    "argv",
    [
        ["nope"],  # an unknown run
        ["--format", "parquet"],  # a binary format needs --out
        ["--traces", "--format", "csv"],  # traces are JSONL
    ],
)
def test_export_mistakes_are_one_line_and_exit_2(run_db, tmp_path, capsys, argv):
    db, _ = run_db
    out = tmp_path / "never.jsonl"
    assert main(["export", "--db", str(db), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mcp-resili: error:")
    assert not out.exists()


def test_parquet_without_pyarrow_names_the_extra(run_db, tmp_path, capsys, monkeypatch):
    db, _ = run_db
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # what an install without the extra looks like
    assert main(["export", "--db", str(db), "--format", "parquet", "--out", str(tmp_path / "x.parquet")]) == 2
    assert "mcp-resili[parquet]" in capsys.readouterr().err


def test_react_and_reflexion_rows_of_one_run_set_are_told_apart_by_architecture(tmp_path, capsys):
    """ReliabilityBench keys every result by architecture; the export must carry it (and the stop rule).

    The tiny suite names no stop rules: here it is handed down with one of its own, which ends an
    episode at two failed calls in a row, so some rows carry a rule and others none.
    """
    import anyio

    def two_errors(calls):
        errors = [c.is_error for c in calls]
        return StopDecision("two_errors", "too_many_errors") if errors[-2:] == [True, True] else None

    suite = replace(tiny_suite(), stop_rules=StopRules("twice", "two failed calls in a row", two_errors))
    db = tmp_path / "rb.db"
    for architecture in ("react", "reflexion"):
        config = RunConfig(
            suite="tiny",
            db=db,
            faults=("tiny:p=0.5",),
            trials=2,
            limit=4,
            models=("scripted:naive",),
            architecture=architecture,
        )
        anyio.run(lambda config=config: execute(config, suite=suite))
    store = Store(db)
    run_ids = store.run_ids()
    rows = {(r.run_id, r.episode_id): r for run_id in run_ids for r in store.episodes(run_id)}
    store.close()
    assert main(["export", *run_ids, "--db", str(db)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted({r["architecture"] for r in records}) == ["react", "reflexion"]
    assert len(records) == len(rows) == 16
    assert {r["stop_rule"] for r in records} == {None, "two_errors"}
    for record in records:
        row = rows[(record["run_id"], record["episode_id"])]
        assert (record["architecture"], record["stop_rule"]) == (row.architecture, row.stop_rule)


def test_the_documented_schema_is_the_exported_one():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[1] / "docs" / "reports.md").read_text()
    table = docs.split("| column | type | meaning |", 1)[1].split("\n\n", 1)[0]
    documented = [tuple(cell.strip(" `") for cell in line.split("|")[1:3]) for line in table.splitlines()[2:]]
    assert documented[: len(FIXED_COLUMNS)] == [(c.name, c.type) for c in FIXED_COLUMNS]
    assert [name for name, _ in documented[len(FIXED_COLUMNS) :]] == ["score_<component>", "injected_<type>"]


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "--out", "{db}"],
        ["export", "--format", "csv", "--out", "{db}"],
        ["export", "--format", "parquet", "--out", "{db}"],
        ["export", "--traces", "--out", "{link}"],  # another name of the same file
        ["report", "--html", "{db}"],
    ],
)
def test_writing_over_the_results_database_is_refused_and_it_survives(run_db, tmp_path, capsys, argv):
    db, _ = run_db
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    (tmp_path / "link.db").symlink_to(copy)
    before = stored(copy)[1]
    argv = [a.format(db=copy, link=tmp_path / "link.db") for a in argv]
    assert main([*argv, "--db", str(copy)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "is the results database" in line
    assert stored(copy)[1] == before


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (
            "UPDATE episodes SET score = '{bad' WHERE rowid = (SELECT min(rowid) FROM episodes)",
            "the score of",
        ),
        ("UPDATE episodes SET score = '[1]' WHERE rowid = (SELECT min(rowid) FROM episodes)", "the score of"),
        (
            "UPDATE episodes SET score = json_set(score, '$.components', 'x') "
            "WHERE rowid = (SELECT min(rowid) FROM episodes)",
            "the score of",
        ),
        ("UPDATE runs SET config = '{'", "the configuration of run"),
        ("UPDATE runs SET config = '[1]'", "the configuration of run"),
    ],
)
@pytest.mark.parametrize("command", ["report", "export", "resume"])
def test_a_damaged_stored_value_is_one_line_naming_it(run_db, tmp_path, capsys, damage, named, command):
    import sqlite3

    db, _ = run_db
    copy = tmp_path / "damaged.db"
    copy.write_bytes(db.read_bytes())
    run_id, _ = stored(copy)
    with sqlite3.connect(copy) as conn:
        conn.execute(damage)
    argv = {"report": ["report"], "export": ["export"], "resume": ["run", "--resume", run_id]}[command]
    assert main([*argv, "--db", str(copy)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert named in line and "damaged" in line


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("json_set(config, '$.models', 5)", "stored run config is damaged: models"),
        (
            """json_set(config, '$.fault_plans', json('[["tiny", "not json"]]'))""",
            "stored plan of fault spec 'tiny' is damaged",
        ),
        (
            """json_set(config, '$.fault_plans', json('[["tiny", "{\\"kind\\": \\"nope\\"}"]]'))""",
            "stored plan of fault spec 'tiny' is damaged",
        ),
    ],
)
def test_a_stored_config_damaged_inside_is_refused_on_resume(run_db, tmp_path, capsys, damage, expected):
    import sqlite3

    db, _ = run_db
    copy = tmp_path / "damaged.db"
    copy.write_bytes(db.read_bytes())
    run_id, _ = stored(copy)
    with sqlite3.connect(copy) as conn:
        conn.execute(f"UPDATE runs SET config = {damage}")
    assert main(["run", "--resume", run_id, "--db", str(copy)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert expected in line


def test_a_suite_score_missing_a_field_is_one_line_in_report_and_resume(tmp_path, capsys):
    # On ToolMaze: a suite summary hook (its `summarize`) that meets a damaged score; the tiny suite has none.
    import sqlite3

    import anyio

    db = tmp_path / "tm.db"
    config = RunConfig(suite="toolmaze", db=db, trials=1, limit=2, faults=("toolmaze:P1",), time_scale=0)
    run_id = anyio.run(lambda: execute(config)).run_id
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE episodes SET score = json_remove(score, '$.components.level') WHERE rowid = 1")
        conn.execute("DELETE FROM episodes WHERE rowid = 2")  # so the resume has an episode to play
    for argv in (["report", run_id], ["run", "--resume", run_id]):
        assert main([*argv, "--db", str(db)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "toolmaze scores of this run cannot be summarised (KeyError: 'level')" in line
