"""Exports and numbers as a reader reads them: reasons a list, tiny p-values, an ETA that means something."""

import csv
import io
import json

import pytest
from rich.console import Console

from mcp_resili.cli import main
from mcp_resili.cli.progress import ETA_AFTER, RunProgress
from mcp_resili.store import EpisodeRow, Store

REASONS = ["step 'a' never ran", 'quoted "b", with a comma', "ünïcode ✓"]


def episode(n, reasons):
    return EpisodeRow(
        run_id="r",
        episode_id=f"e{n}",
        model="scripted:oracle",
        faults="none",
        variant="baseline",
        task_id=f"t{n}",
        trial=0,
        termination="completed",
        label="partial",
        value=0.5,
        score={"label": "partial", "value": 0.5, "components": {"coverage": 0.5}, "reasons": reasons},
        trace="",
    )


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "r.db"
    store = Store(path)
    try:
        store.add_run("r", "2026-01-01T00:00:00+00:00", "resilibench", 0, {})
        store.add_episode(episode(0, REASONS))
        store.add_episode(episode(1, []))
    finally:
        store.close()
    return path


def test_reasons_are_a_list_in_jsonl_a_list_column_in_parquet_and_an_array_in_csv(db, tmp_path, capsys):
    assert main(["export", "--db", str(db)]) == 0
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert first["reasons"] == REASONS and second["reasons"] == []
    assert main(["export", "--db", str(db), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert json.loads(rows[0]["reasons"]) == REASONS and json.loads(rows[1]["reasons"]) == []
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "e.parquet"
    assert main(["export", "--db", str(db), "--format", "parquet", "--out", str(out)]) == 0
    table = pq.read_table(out)
    assert str(table.schema.field("reasons").type).startswith("list<") and "string" in str(
        table.schema.field("reasons").type
    )
    assert table.column("reasons").to_pylist() == [REASONS, []]
    assert table.schema.metadata[b"mcp_resili.export_version"] == b"3"


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_eta_waits_for_the_pace_and_ignores_a_slow_start():
    clock = Clock()
    progress = RunProgress(Console(file=io.StringIO()), spent=lambda: None, interactive=False, clock=clock)
    progress.on_planned(100)
    clock.now = 60.0  # a cluster starting: the first episode ends a minute in
    progress.on_episode(episode(0, []))
    # Measured from the start, one episode a minute would promise 99 minutes: nothing is shown yet.
    assert progress.eta() == f"after {ETA_AFTER + 1} episodes" and "ETA after" in progress.status()
    for n in range(1, ETA_AFTER + 1):
        clock.now = 60.0 + 0.5 * n
        assert progress.eta().startswith("after") or n == ETA_AFTER
        progress.on_episode(episode(n, []))
    # ETA_AFTER episodes in 2 s after the first: 2 per second, 95 left → 48 s (rounded).
    assert progress.done == ETA_AFTER + 1
    assert progress.rate() == pytest.approx(2.0)
    assert progress.eta() == "0:00:48"
    assert progress.line().startswith(f"progress: {ETA_AFTER + 1}/100 episodes (5%) in 0:01:02")


def test_p_values_below_precision_print_as_less_than_in_every_comparison(tmp_path, capsys):
    db = tmp_path / "p.db"
    argv = [
        "run",
        "--model",
        "scripted:oracle",
        "--model",
        "scripted:naive",
        "--limit",
        "20",
        "--trials",
        "3",
    ]
    assert main([*argv, "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["report", "--db", str(db), "--json"]) == 0
    (pair,) = json.loads(capsys.readouterr().out)["sections"]["paired"]["pairs"]
    assert 0 < pair["p_value"] < 0.001  # kept in JSON with its significant digits, never 0
    assert main(["report", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "(p < 0.001)" in out and "│ < 0.001 │" in out and "p 0.000" not in out
