"""A comparison holds its runs' rows compact (`held_rows`) and writes what it wrote holding them whole."""

import dataclasses
import filecmp
import json

import pytest

from mcp_resili.registry.loader import find_suite
from mcp_resili.report.compare import SharedValues, build_comparison, held_rows, load_comparison
from mcp_resili.report.episodes import DetailSpool, unpack
from mcp_resili.report.html import write_folder
from mcp_resili.store import EpisodeRow, Store, StoredRows
from mcp_resili.suites.resilibench.synthetic import write_synthetic_run

RUNS = ("base", "other-model", "other-seed", "odd-scores")


@pytest.fixture(scope="module")
def runs_db(tmp_path_factory):
    """Four runs: two models apart on the same seed, one on another seed, one with odd stored scores.

    The last has the first run's episodes with scores no version writes: no components, an
    unhashable component value, a bound given as 1 (not True), no score at all.
    """
    db = tmp_path_factory.mktemp("held") / "runs.db"
    write_synthetic_run(db, 240, run_id="base", seed=0, models=("scripted:oracle", "scripted:naive"))
    write_synthetic_run(db, 240, run_id="other-model", seed=0, models=("scripted:oracle", "scripted:retry"))
    write_synthetic_run(db, 240, run_id="other-seed", seed=1, models=("scripted:oracle",))
    store = Store(db)
    try:
        odd = []
        for n, row in enumerate(store.episodes("base")):
            score = row.score
            if score is not None and n % 4 == 1:
                score = {**score, "components": {**score["components"], "bound_ii_full_possible": 1}}
            elif score is not None and n % 4 == 2:
                score = {**score, "components": {**score["components"], "bound_ii_full_possible": [True]}}
            elif score is not None and n % 4 == 3:
                score = {key: value for key, value in score.items() if key != "components"}
            elif n % 8 == 0:
                score = None
            odd.append(
                dataclasses.replace(row, run_id="odd-scores", episode_id=f"odd/{row.episode_id}", score=score)
            )
        run = store.require_run("base")
        store.add_run("odd-scores", run.created_at, run.suite, run.seed, run.config)
        store.add_episodes(odd)
    finally:
        store.close()
    return db


def test_a_comparison_written_from_held_rows_is_the_one_written_from_whole_rows(runs_db, tmp_path):
    runs = [Store(runs_db, read_only=True).require_run(run_id) for run_id in RUNS]
    whole_spool, held_spool = DetailSpool(), DetailSpool()
    # What the comparison was before held rows: every run's rows as stored, parsed scores whole.
    whole = build_comparison(
        [(run, list(StoredRows(runs_db, run.id))) for run in runs],
        find_suite,
        traced=[StoredRows(runs_db, run.id, traces=True) for run in runs],
        observer=whole_spool,
    )
    held = load_comparison(runs_db, RUNS, find_suite, observer=held_spool)

    assert {s.id for s in held.sections} >= {"runs", "side-by-side", "paired-runs", "degradation", "cost"}
    assert json.dumps(held.to_dict()) == json.dumps(whole.to_dict())
    write_folder(whole, tmp_path / "whole")
    write_folder(held, tmp_path / "held")
    names = sorted(p.relative_to(tmp_path / "whole") for p in (tmp_path / "whole").rglob("*") if p.is_file())
    assert names == sorted(
        p.relative_to(tmp_path / "held") for p in (tmp_path / "held").rglob("*") if p.is_file()
    )
    assert len(names) > 3  # the page, the index and chunks
    _, mismatch, errors = filecmp.cmpfiles(tmp_path / "whole", tmp_path / "held", names, shallow=False)
    assert (mismatch, errors) == ([], [])
    index = next(p for p in names if p.name == "index.js")
    packed = (tmp_path / "held" / index).read_text().split('"')[1]
    assert len(unpack(packed)["rows"]) == 4 * 240


def test_held_rows_share_equal_values_and_keep_what_the_sections_read():
    score = {
        "suite": "s",
        "task": "t",
        "components": {"kept": 0.5, "dropped": 3, "flag": True},
        "reasons": [],
    }
    rows = [
        EpisodeRow(
            run_id="r",
            episode_id=f"r/{n}",
            model="".join(["m", "x"]),  # a new string each time, as the store returns them
            faults="none",
            variant="baseline",
            task_id=f"t{n % 2}",
            trial=n,
            termination="completed",
            label="full",
            value=float(n % 2),
            score={**score, "components": {**score["components"], "flag": [True, 1, 1.0][n % 3]}},
            trace="",
            input_tokens=1000 + n % 2,
        )
        for n in range(6)
    ]
    shared = SharedValues()
    held = held_rows(rows, frozenset({"kept", "flag"}), shared)

    assert [dataclasses.replace(r, score=None) for r in held] == [
        dataclasses.replace(r, score=None) for r in rows
    ]
    assert [r.score for r in held] == [{"components": {"kept": 0.5, "flag": f}} for f in [True, 1, 1.0] * 2]
    # True, 1 and 1.0 are equal, not the same: each keeps its type (and its own shared score).
    assert [type(r.score["components"]["flag"]) for r in held] == [bool, int, float] * 2
    assert held[0].score is held[3].score and held[0].score is not held[1].score
    assert held[0].model is held[5].model and held[0].task_id is held[2].task_id
    assert held[0].input_tokens is held[2].input_tokens
    assert [type(r.value) for r in held] == [float] * 6
    again = held_rows(rows[:1], frozenset({"kept", "flag"}), shared)  # the next run's rows share them too
    assert again[0].score is held[0].score and again[0].model is held[0].model
