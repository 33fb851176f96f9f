"""One event is one line: characters JSON leaves raw in strings but line readers split at.

Review finding: a model turn whose text held U+2028 was written raw; every reader that split the
trace with `str.splitlines` cut that event in two (`score` refused the trace, the report lost the
episode's workflow metrics, the export counted 0 turns).
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mcp_resili.cli import main
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.store.export import ledger_summary
from mcp_resili.trace import ModelTurnEvent, Trace, trace_lines

BREAKS = "\u2028 \u2029 \x85"


def with_breaks(trace: Trace) -> Trace:
    """``trace`` with the line breaks in every model turn's text."""
    events = tuple(
        e.model_copy(update={"text": f"step done.{BREAKS}next"}) if isinstance(e, ModelTurnEvent) else e
        for e in trace.events
    )
    return Trace(header=trace.header, events=events)


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    db = tmp_path_factory.mktemp("played") / "runs.db"  # rows stream to the store as episodes end

    async def one() -> str:
        result = await execute(
            RunConfig(
                suite="tiny",
                db=db,
                models=("scripted:oracle",),
                trials=1,
                limit=1,
                faults=("none",),
            )
        )
        return result.rows[0].trace

    text = anyio.run(one)
    return with_breaks(Trace.from_lines(trace_lines(text)))


def test_a_trace_writes_each_event_on_one_line_whatever_its_text_holds(played: Trace) -> None:
    text = played.to_jsonl()
    assert len(text.splitlines()) == len(played.events) + 1  # no reader can cut an event in two
    assert not any(c in text for c in BREAKS.split())
    assert Trace.from_lines(text.splitlines()) == played  # the same value: the text is unchanged


def test_a_trace_stored_with_them_raw_is_still_read_and_scored(
    played: Trace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = "".join(
        json.dumps(json.loads(line), ensure_ascii=False) + "\n" for line in played.to_jsonl().splitlines()
    )
    assert "\u2028" in raw and len(raw.splitlines()) > len(played.events) + 1  # as stored before
    assert Trace.from_lines(trace_lines(raw)) == played
    turns = sum(isinstance(e, ModelTurnEvent) for e in played.events)
    assert ledger_summary(raw)["turns"] == turns > 0  # the export counted 0
    path = tmp_path / "old.jsonl"
    path.write_text(raw, encoding="utf-8")
    assert main(["score", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["label"] == "full"
