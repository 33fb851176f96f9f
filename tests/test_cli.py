"""The command line end to end: run (table and JSON), tasks, score, serve, report. On the tiny suite,
found by name (``--suite tiny``) through the entry point the conftest installed."""

import json
import os
import subprocess
import sys

import pytest
from tiny_suite import suite as tiny_suite

from mcp_resili.cli import main


def cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "mcp_resili", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "160"},
    )


def test_run_json_prints_a_machine_readable_summary(tmp_path):
    proc = cli(
        "run", "--suite", "tiny", "--limit", "4", "--trials", "1", "--json", "--db", str(tmp_path / "r.db")
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert {g["model"] for g in summary["groups"]} == {"scripted:oracle", "scripted:naive"}
    assert all(g["episodes"] == 4 for g in summary["groups"])
    assert summary["seed"] == 0 and summary["suite"] == "tiny" and (tmp_path / "r.db").exists()


def test_default_run_prints_a_table_and_stores_in_the_working_directory(tmp_path):
    proc = cli("run", "--suite", "tiny", "--limit", "2", "--trials", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "scripted:oracle" in proc.stdout and "full" in proc.stdout
    assert (tmp_path / "mcp-resili.db").exists()


def test_tasks_list_json_lists_task_objects(capsys):
    assert main(["tasks", "list", "--suite", "tiny", "--json"]) == 0
    tasks = json.loads(capsys.readouterr().out)
    assert [t["id"] for t in tasks] == [t.id for t in tiny_suite().tasks]
    assert {"id", "instance_id", "task_type", "complexity", "required_tools", "workflow"} <= set(tasks[0])


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--suite", "tiny", "--faults", "chaos"],
        ["run", "--suite", "tiny", "--model", "nobody:x"],
        ["run", "--suite", "tiny", "--task", "nope"],
        ["run", "--suite", "nope"],
        ["tasks", "list", "--suite", "nope"],
    ],
)
def test_bad_input_exits_2_with_a_clear_message(argv, capsys, tmp_path):
    assert main([*argv, *(["--db", str(tmp_path / "x.db")] if argv[0] == "run" else [])]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("mcp-resili: error:") and captured.out == ""
    assert not (tmp_path / "x.db").exists()


def test_score_reads_a_trace_file(tmp_path, capsys):
    from mcp_resili.store import Store

    db = tmp_path / "r.db"
    assert (
        main(
            [
                "run",
                "--suite",
                "tiny",
                "--limit",
                "1",
                "--trials",
                "1",
                "--model",
                "scripted:oracle",
                "--faults",
                "none",
                "--db",
                str(db),
                "--json",
            ]
        )
        == 0
    )
    capsys.readouterr()
    store = Store(db)
    (row,) = store.episodes(store.latest_run())
    store.close()
    path = tmp_path / "t.jsonl"
    path.write_text(row.trace)
    assert main(["score", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["label"] == "full"
    path.write_text("{not json\n")
    assert main(["score", str(path)]) == 2
    assert "t.jsonl:1" in capsys.readouterr().err


def test_serve_http_on_a_busy_port_is_a_clear_error():
    import socket

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        proc = cli("serve", "--suite", "tiny", "--transport", "http", "--port", str(port))
    assert proc.returncode == 2
    assert proc.stderr.startswith("mcp-resili: error:") and "Traceback" not in proc.stderr


def test_text_that_looks_like_rich_markup_is_printed_as_text(tmp_path, capsys, monkeypatch):
    """A fault file under "x[/b]" (brackets are common in paths): no MarkupError, the path printed whole."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x[" / "b][red]").mkdir(parents=True)
    spec = "x[/b][red]/f.json"
    (tmp_path / spec).write_text(json.dumps({"kind": "rules", "rules": []}))
    assert (
        main(["run", "--suite", "tiny", "--faults", spec, "--limit", "1", "--trials", "1", "--db", "r.db"])
        == 0
    )
    assert spec in capsys.readouterr().out  # markup would have failed on "[/b]", eaten "[red]"
    assert main(["report", "--db", "r.db"]) == 0
    assert spec in capsys.readouterr().out


def test_score_of_a_stored_trace_gives_the_stored_score_with_protocol_faults_too(tmp_path, capsys):
    """`score` (and inspect's scorer) used to leave out the coping components the runner adds."""
    from mcp_resili.store import Store

    db = tmp_path / "r.db"
    argv = ["run", "--suite", "tiny", "--limit", "3", "--trials", "1", "--model", "scripted:oracle", "--json"]
    assert main([*argv, "--faults", "protocol:heavy", "--time-scale", "0", "--db", str(db)]) == 0
    capsys.readouterr()
    store = Store(db)
    rows = store.episodes(store.latest_run())
    store.close()
    assert any(any(k.startswith("coping_") for k in (r.score or {}).get("components", {})) for r in rows)
    for n, row in enumerate(rows):
        path = tmp_path / f"t{n}.jsonl"
        path.write_text(row.trace)
        assert main(["score", str(path)]) == 0
        assert json.loads(capsys.readouterr().out) == row.score
