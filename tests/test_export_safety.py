"""`export` never damages what it writes over, reads back row for row (lone surrogates in stored scores
included), and survives its reader leaving."""

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from servers import run_cli

from mcp_resili.cli import main
from mcp_resili.store import EpisodeRow, Store


def three_episode_db(path, note):
    """A database with run ``r1`` of three episodes whose score component ``note`` is ``note``."""
    store = Store(path)
    try:
        store.add_run("r1", "2026-01-01T00:00:00+00:00", "tiny", 0, {})
        for trial in range(3):
            store.add_episode(
                EpisodeRow(
                    run_id="r1",
                    episode_id=f"e{trial}",
                    model="scripted:oracle",
                    faults="none",
                    variant="baseline",
                    task_id="t1",
                    trial=trial,
                    termination="completed",
                    label="full",
                    value=1.0,
                    score={"components": {"note": note}, "reasons": []},
                    trace="",
                )
            )
    finally:
        store.close()
    return path


@pytest.fixture
def db(tmp_path):
    return three_episode_db(tmp_path / "r.db", "fine")


@pytest.mark.parametrize("argv", [["--format", "csv"], ["--format", "jsonl"], ["--traces"]])
def test_a_failed_export_leaves_the_existing_out_file_as_it_was(db, tmp_path, capsys, argv):
    with sqlite3.connect(db) as conn:  # the last row is damaged: rows before it are written first
        conn.execute("UPDATE episodes SET score = '[1]' WHERE rowid = (SELECT max(rowid) FROM episodes)")
    out = tmp_path / "out" / "episodes.txt"
    out.parent.mkdir()
    out.write_text("precious\n")
    assert main(["export", "--db", str(db), *argv, "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "damaged" in line
    assert out.read_text() == "precious\n"
    assert os.listdir(out.parent) == ["episodes.txt"]  # no temporary file left behind


def test_a_successful_export_replaces_the_file_keeping_its_mode_and_a_symlink(db, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    target = out / "real.jsonl"
    target.write_text("old\n")
    target.chmod(0o600)
    link = out / "link.jsonl"
    link.symlink_to(target)
    assert main(["export", "--db", str(db), "--out", str(link)]) == 0
    assert [json.loads(line)["episode_id"] for line in target.read_text().splitlines()] == ["e0", "e1", "e2"]
    assert link.is_symlink() and (target.stat().st_mode & 0o777) == 0o600
    assert sorted(os.listdir(out)) == ["link.jsonl", "real.jsonl"]


@pytest.mark.parametrize("note", ["line one\rline two", 'one\r\ntwo\nthree, "four"\r'])
def test_a_carriage_return_in_a_csv_cell_reads_back_as_one_row(tmp_path, capsys, note):
    db = three_episode_db(tmp_path / "cr.db", note)
    assert main(["export", "--db", str(db), "--format", "csv"]) == 0
    text = capsys.readouterr().out
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert len(rows) == 4  # the header and the 3 episodes
    assert {row[rows[0].index("score_note")] for row in rows[1:]} == {note}
    assert text.endswith('"\n')  # lines still end with \n


def test_a_run_named_twice_is_refused_like_report_does(db, tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    assert main(["export", "r1", "r1", "--db", str(db), "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "mcp-resili: error: a run is named twice in r1 r1: export different runs"
    assert not out.exists()


class ClosedPipe(io.RawIOBase):
    """A stdout whose reader has gone (``| head`` after its lines)."""

    def __init__(self):
        self.gone = True

    def writable(self):
        return True

    def write(self, data):
        if self.gone:
            raise BrokenPipeError(32, "Broken pipe")
        return len(data)


def test_a_reader_closing_stdout_ends_the_export_quietly(db, capsys, monkeypatch):
    pipe = ClosedPipe()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(pipe), encoding="utf-8"))
    try:
        assert main(["export", "--db", str(db)]) == 141
    finally:
        pipe.gone = False  # so the fake stdout's own final flush succeeds
    assert capsys.readouterr().err == ""


def test_a_closed_pipe_prints_nothing_at_exit_either(db):
    """A real pipe: Python's flush of stdout at exit must not complain (`Exception ignored ...`)."""
    # Buffered stdout, as a user has it: the bytes stuck in the buffer are what the exit flush tries.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mcp_resili", "export", "--db", str(db)],
            stdout=write,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, b"")


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_stdout_gets_utf8_whatever_its_encoding(tmp_path, capsys, monkeypatch, fmt):
    note = "done ✓ \U0001f600"  # neither is in cp1252
    db = three_episode_db(tmp_path / "u.db", note)
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="cp1252"))
    assert main(["export", "--db", str(db), "--format", fmt]) == 0
    text = raw.getvalue().decode("utf-8")
    if fmt == "jsonl":
        assert [json.loads(line)["score_note"] for line in text.splitlines()] == [note] * 3
    else:
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
        assert [row["score_note"] for row in rows] == [note] * 3
    assert capsys.readouterr().err.count("\n") == 1  # only the "wrote ..." line


# --- a lone surrogate in a stored score (a review finding: export crashed on it) ---------------------

LONE = "bad \ud800 note"


@pytest.fixture
def surrogate_db(tmp_path: Path) -> Path:
    """Three episodes whose score component ``note`` holds a lone surrogate (the store keeps JSON
    escapes, so it can); one of them also has it in a judge's reason."""
    db = three_episode_db(tmp_path / "s.db", LONE)
    with sqlite3.connect(db) as conn:
        score = json.dumps({"components": {"note": LONE}, "reasons": [LONE, "fine"]})  # ASCII: escaped
        conn.execute("UPDATE episodes SET score = ? WHERE episode_id = 'e0'", (score,))
    return db


def test_export_jsonl_writes_a_lone_surrogate_as_its_json_escape(surrogate_db: Path, tmp_path: Path) -> None:
    proc = run_cli("export", "--db", str(surrogate_db))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and all("\\ud800" in line for line in lines)
    records = [json.loads(line) for line in lines]
    assert [r["score_note"] for r in records] == [LONE] * 3  # reads back as stored
    assert records[0]["reasons"] == [LONE, "fine"]  # a list, as stored
    out = tmp_path / "out.jsonl"
    proc = run_cli("export", "--db", str(surrogate_db), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8").splitlines() == lines  # the same bytes as stdout


def test_export_csv_writes_a_lone_surrogate_backslash_escaped(surrogate_db: Path, tmp_path: Path) -> None:
    proc = run_cli("export", "--db", str(surrogate_db), "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    stdout = proc.stdout
    rows = list(csv.DictReader(io.StringIO(stdout)))
    assert [r["score_note"] for r in rows] == ["bad \\ud800 note"] * 3  # the six characters \ud800
    assert json.loads(rows[0]["reasons"]) == [LONE, "fine"]  # JSON text: the escape reads back
    out = tmp_path / "out.csv"
    proc = run_cli("export", "--db", str(surrogate_db), "--format", "csv", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == stdout.encode("utf-8")  # the same bytes as stdout


def test_export_parquet_writes_a_lone_surrogate_as_csv_does(surrogate_db: Path, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "out.parquet"
    proc = run_cli("export", "--db", str(surrogate_db), "--format", "parquet", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(out).to_pydict()["score_note"] == ["bad \\ud800 note"] * 3
