"""Reports read each trace once: msgspec reads JSON as `json.loads` does, and the one-pass episode details
(`DetailSpool`) are the very details the writer would make by reading the traces again."""

import json

import pytest
from tiny_suite.synthetic import write_synthetic_run

from mcp_resili.fastjson import loads
from mcp_resili.registry.loader import find_suite
from mcp_resili.report.build import load_report, parse_trace
from mcp_resili.report.episodes import DetailSpool, unpack
from mcp_resili.report.html import render_html, write_folder
from mcp_resili.store import Store, StoredRows


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1,"a":2}',
        "[NaN, Infinity, -Infinity]",
        '"\\ud800 lone surrogate"',
        "123456789012345678901234567890",
        "[1e400, 1e-400, -0.0, 1E5]",
        '{"k": [true, null, "\\u00e9\\t"]}',
        '"a\u2028b"',
    ],
)
def test_fast_json_reads_what_json_loads_reads(text):
    assert repr(loads(text)) == repr(json.loads(text))


@pytest.mark.parametrize("text", ["{", "", "nan", "[1,]", '"\x01"', '{"a":1}x'])
def test_fast_json_refuses_what_json_loads_refuses(text):
    with pytest.raises(json.JSONDecodeError):
        loads(text)


def test_parse_trace_reads_the_executed_tools_and_every_line_once():
    trace = "\n".join(
        [
            '{"event":"header"}',
            '{"event":"tool_call","tool":"a","is_error":false}',
            "  ",
            '{"event":"tool_call","tool":"b","is_error":true}',
            "not json",
            '{"event":"tool_call","tool":"c"}',
        ]
    )
    tools, lines = parse_trace(trace)
    assert tools == ("a", "c")
    assert [event for _, event in lines][-2:] == [None, {"event": "tool_call", "tool": "c"}]
    assert len(lines) == 4  # the header and the blank line are not events


@pytest.fixture(scope="module")
def damaged_db(tmp_path_factory):
    """A synthetic run of 230 episodes (three chunks) with one trace line made unreadable."""
    db = tmp_path_factory.mktemp("one-pass") / "r.db"
    write_synthetic_run(db, 230, run_id="r", seed=4)
    store = Store(db)
    try:
        (episode_id, trace) = store._db.execute(
            "SELECT episode_id, trace FROM episodes ORDER BY episode_id LIMIT 1"
        ).fetchone()
        lines = trace.split("\n")
        lines[1] = lines[1][:-3]  # cut: no longer JSON
        store._db.execute(
            "UPDATE episodes SET trace = ? WHERE episode_id = ?", ("\n".join(lines), episode_id)
        )
        store._db.commit()
    finally:
        store.close()
    return db


def test_details_made_in_the_one_pass_are_those_made_by_reading_the_traces_again(damaged_db, tmp_path):
    spooled = load_report(damaged_db, "r", find_suite=find_suite, observer=DetailSpool())
    again = load_report(damaged_db, "r", find_suite=find_suite)
    assert spooled.observer is not None and again.observer is None
    assert spooled.workflow == again.workflow and len(spooled.workflow) > 0
    one = write_folder(spooled, tmp_path / "one").parent
    two = write_folder(again, tmp_path / "two").parent
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert len(files) == 1 + 1 + 3  # the page, the index, three chunks
    assert files == sorted(p.relative_to(two) for p in two.rglob("*") if p.is_file())
    for name in files:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
    unreadable = [
        event
        for name in files
        if name.name.startswith("chunk-")
        for detail in unpack((one / name).read_text().split('"')[1])
        for event in detail["events"]
        if event["event"] == "unreadable"
    ]
    assert len(unreadable) == 1  # the damaged line, shown as such in both
    assert render_html(spooled) == render_html(again)


def test_held_rows_are_read_from_the_store_once_and_are_the_same_rows(damaged_db):
    streamed = StoredRows(damaged_db, "r")
    held = StoredRows(damaged_db, "r", hold=1_000)
    first = list(held)
    assert held._held is not None and [r.episode_id for r in first] == [r.episode_id for r in streamed]
    assert list(held) == first == list(streamed)
    assert StoredRows(damaged_db, "r", hold=100)._held is None
    small = StoredRows(damaged_db, "r", hold=100)
    list(small)
    assert small._held is None  # 230 episodes: more than it may hold, read at every pass
