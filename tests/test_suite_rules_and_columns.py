"""A suite's stop rules and summary columns are its own: one that names none inherits none.

The tiny suite (tests/tiny_suite) names neither. No ResiliBench stop rule ever ends its episodes, even
on five failed calls in a row (the run that names ResiliBench's rules shows the rule would fire on the
same calls), and no bound column shows in ``run``'s table and JSON, ``report --json``, the HTML page or
``export``; a ResiliBench run still shows "bound ii %" and "bound iii %" everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_suite import suite as tiny_suite

from mcp_resili import NO_STOP_RULES, RunConfig, Store, Trace, execute
from mcp_resili.cli import main

pytestmark = pytest.mark.anyio

TINY = tiny_suite()
#: Every call of ``lookup`` fails: the oracle retries it until the task's budget (12 calls) is spent.
ALWAYS_FAILS = {"kind": "rules", "rules": [{"tool": "lookup", "fault": {"type": "error", "code": "TIMEOUT"}}]}


def test_the_tiny_suite_names_no_stop_rules_and_no_columns_and_gets_the_frameworks_none():
    assert TINY.stop_rules is None and TINY.summary_columns == ()
    assert TINY.own_stop_rules is NO_STOP_RULES and NO_STOP_RULES.name == "none"


async def test_no_resilibench_rule_fires_on_the_tiny_suite_even_on_five_failed_calls_in_a_row(tmp_path):
    faults = tmp_path / "always-fails.json"
    faults.write_text(json.dumps(ALWAYS_FAILS), encoding="utf-8")
    base = dict(models=("scripted:oracle",), faults=(str(faults),), tasks=("tiny-1",), trials=1)
    own = await execute(RunConfig(suite="tiny", db=tmp_path / "own.db", **base), suite=TINY)
    (row,) = own.rows
    trace = Trace.from_lines(row.trace.splitlines())
    calls = trace.tool_calls
    assert [c.tool for c in calls] == ["lookup"] * 12 and all(c.is_error for c in calls)  # 12 in a row
    assert trace.end is not None and (trace.end.stop_rules, trace.end.stop_rule) == ("none", None)
    assert (row.termination, row.stop_rule, row.label) == ("max_turns", None, "failure")
    # The same calls under ResiliBench's rules, which a run may name: its rule fires on the fifth.
    named = await execute(
        RunConfig(suite="tiny", db=tmp_path / "named.db", stop_rules="resilibench", **base), suite=TINY
    )
    (stopped,) = named.rows
    end = Trace.from_lines(stopped.trace.splitlines())
    assert len(end.tool_calls) == 5 and end.end is not None and end.end.stop_rules == "resilibench"
    assert (stopped.termination, stopped.stop_rule) == ("too_many_errors", "too_many_errors")


def shown(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``mcp-resili ARGV`` printed on stdout (it must succeed)."""
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def bound_columns_everywhere(
    suite: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> dict[str, str]:
    """``run`` (table, then JSON), ``report --json``, the HTML page and ``export`` of one small run."""
    db = str(tmp_path / f"{suite}.db")
    run = ["run", "--suite", suite, "--limit", "2", "--trials", "1", "--faults", "none", "--db", db]
    table = shown(run, capsys)
    summary = shown([*run, "--json"], capsys)
    run_id = json.loads(summary)["run_id"]
    report = shown(["report", run_id, "--db", db, "--json"], capsys)
    page = tmp_path / f"{suite}.html"
    shown(["report", run_id, "--db", db, "--html", str(page)], capsys)
    exported = shown(["export", run_id, "--db", db], capsys)
    store = Store(Path(db))
    try:
        assert len(store.episodes(run_id)) == 4  # 2 tasks x the 2 default agents
    finally:
        store.close()
    return {
        "run table": table,
        "run --json": json.dumps(json.loads(summary)["groups"]),
        "report --json": json.dumps(json.loads(report)["sections"]["outcomes"]),
        "html": page.read_text(encoding="utf-8"),
        "export": json.dumps(sorted({key for line in exported.splitlines() for key in json.loads(line)})),
    }


def test_a_tiny_run_shows_no_bound_columns_and_a_resilibench_run_still_does(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the terminal table whole, its titles on one line
    tiny = bound_columns_everywhere("tiny", tmp_path, capsys)
    resilibench = bound_columns_everywhere("resilibench", tmp_path, capsys)
    for where, text in tiny.items():
        assert "bound" not in text, where
    assert "bound ii %" in resilibench["run table"] and "bound iii %" in resilibench["run table"]
    for where in ("run --json", "report --json"):
        groups = json.loads(resilibench[where])
        groups = groups["groups"] if isinstance(groups, dict) else groups
        assert all({"bound_ii", "bound_iii_mean"} <= set(group) for group in groups), where
    assert "bound ii %" in resilibench["html"] and "bound iii %" in resilibench["html"]
    assert {"score_bound_ii_full_possible", "score_bound_iii_full_probability"} <= set(
        json.loads(resilibench["export"])
    )
