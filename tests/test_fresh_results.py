"""Recording a result without copying it: a library's promise of fresh results, and its check.

A library that declares `ToolLibrary.fresh_results` has its results recorded as they are; every other
library's are recorded as a JSON copy, so a tool state that changes later never changes the trace.
The test suite runs with the promise checked on every call (``MCP_RESILI_CHECK_FRESH_RESULTS=1``,
tests/conftest.py): these tests show the check catching each way a result can break it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from tiny_suite import library as tiny_library

from mcp_resili.constants import META_EPISODE
from mcp_resili.faults import NoFaults
from mcp_resili.faults.chaos import HighLatency
from mcp_resili.registry.suites import Suite
from mcp_resili.server import backend
from mcp_resili.server.app import ResiliServer
from mcp_resili.server.backend import NotFreshError, SimulatedBackend
from mcp_resili.server.pipeline import result_text
from mcp_resili.tools import ToolLibrary, ToolSpec
from mcp_resili.trace import ToolCallEvent

pytestmark = pytest.mark.anyio

#: Module-level, as a tool's cache would be: every call returns (part of) the same objects.
CACHED_ROW = {"id": 1, "tags": ["a"]}


def _stored(arguments: Any, state: dict[str, Any]) -> dict[str, Any]:
    rows = state.setdefault("rows", [])
    rows.append(dict(arguments))
    return {"rows": rows}  # the state's own list


SIMULATORS: dict[str, Any] = {
    "fresh": lambda arguments, state: {"rows": [{"id": 1, "tags": ["a"]}], "n": 2.5, "ok": True},
    "from_state": _stored,
    "from_arguments": lambda arguments, state: {"echo": arguments["data"]},
    "cached_whole": lambda arguments, state: CACHED_ROW,
    "cached_deep": lambda arguments, state: {"rows": [{"id": 2}, CACHED_ROW]},
    "with_tuple": lambda arguments, state: {"pair": (1, 2)},
    "with_int_keys": lambda arguments, state: {"by_id": {1: "a"}},
}
ANY_OBJECT = {"type": "object"}


def library(*, fresh: bool) -> ToolLibrary:
    specs = tuple(
        ToolSpec(name=name, description=name, input_schema=ANY_OBJECT, output_schema=ANY_OBJECT)
        for name in SIMULATORS
    )
    return ToolLibrary("hand-made", specs, SIMULATORS, fresh_results=fresh)


def simulate(lib: ToolLibrary, tool: str, arguments: dict[str, Any], state: dict[str, Any]) -> Any:
    return SimulatedBackend(lib)._simulate(lib.spec(tool), arguments, state)


def test_the_test_suite_checks_every_fresh_result() -> None:
    assert backend.verify_fresh_results


@pytest.mark.parametrize(
    ("tool", "where"),
    [
        ("from_state", "/rows"),
        ("from_arguments", "/echo"),
        ("cached_whole", "(result)"),
        ("cached_deep", "/rows/1"),
        ("with_tuple", "/pair"),
        ("with_int_keys", "/by_id"),
    ],
)
def test_the_check_names_where_a_result_is_shared_or_not_plain_json(tool: str, where: str) -> None:
    said = re.escape(f"{tool} returned a result whose {where} is held elsewhere")
    with pytest.raises(NotFreshError, match=said):
        simulate(library(fresh=True), tool, {"data": {"x": [1]}}, {})


def test_a_fresh_result_passes_the_check_with_its_values_intact() -> None:
    outcome = simulate(library(fresh=True), "fresh", {}, {})
    assert outcome.structured == {"rows": [{"id": 1, "tags": ["a"]}], "n": 2.5, "ok": True}


def test_without_the_check_a_declared_fresh_result_is_not_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "verify_fresh_results", False)
    state: dict[str, Any] = {}
    outcome = simulate(library(fresh=True), "from_state", {"id": 1}, state)
    # What the promise buys: no copy. Hence the check: a broken promise would show up in the trace.
    assert outcome.structured["rows"] is state["rows"]


def test_a_library_without_the_promise_records_a_copy_later_calls_cannot_change() -> None:
    lib, state = library(fresh=False), {}
    first = simulate(lib, "from_state", {"id": 1}, state)
    simulate(lib, "from_state", {"id": 2}, state)
    assert first.structured == {"rows": [{"id": 1}]}  # as it was at the first call
    assert state["rows"] == [{"id": 1}, {"id": 2}]
    assert simulate(lib, "with_tuple", {}, {}).structured == {"pair": [1, 2]}  # what the wire gives


async def test_a_broken_promise_fails_the_call_loudly_and_is_never_recorded_as_a_tool_crash() -> None:
    suite = Suite(
        name="hand-made",
        description="tools that break the fresh-results promise",
        library=library(fresh=True),
        load_tasks=tuple,
        render_prompt=lambda task, variant: "",
        score=lambda task, trace: None,
    )
    server = ResiliServer(suite, NoFaults())
    async with Client(server.mcp) as client:
        with pytest.raises(MCPError):
            await client.call_tool("from_state", {"id": 1}, meta={META_EPISODE: "e"})
        served = await client.call_tool("fresh", {}, meta={META_EPISODE: "e"})
    assert not served.is_error
    assert [event.tool for event in server.take_events("e")] == ["fresh"]


def test_a_suites_tools_that_hand_back_state_return_copies() -> None:
    """The tiny suite promises fresh results: ``list_records`` hands back copies of the records
    ``record`` filed, and ``echo`` a string (which nothing can change)."""
    lib = tiny_library()
    assert lib.fresh_results
    state: dict[str, Any] = {"records": []}
    for label, value in (("a", 1), ("b", 2)):
        assert simulate(lib, "record", {"label": label, "value": value}, state).error_code is None
    listed = simulate(lib, "list_records", {}, state)  # the check runs: a shared container raises
    assert listed.error_code is None, listed.message
    assert listed.structured == {
        "records": [{"label": "a", "value": 1}, {"label": "b", "value": 2}],
        "count": 2,
    }
    listed.structured["records"][0]["value"] = 99
    assert state["records"][0] == {"label": "a", "value": 1}  # the episode's own records are untouched
    assert simulate(lib, "echo", {"text": "hi"}, state).structured == {"text": "hi"}


def test_a_fresh_result_that_utf8_cannot_carry_is_a_tool_crash_as_with_a_copy() -> None:
    lone_surrogate = {"name": "x\ud800"}
    sims = {
        "odd": lambda arguments, state: dict(lone_surrogate),
        "emoji": lambda a, s: {"name": "\U0001f600"},
    }
    specs = tuple(ToolSpec(name=n, description=n, input_schema=ANY_OBJECT) for n in sims)
    for fresh in (True, False):
        lib = ToolLibrary("hand-made", specs, sims, fresh_results=fresh)
        assert simulate(lib, "odd", {}, {}).error_code == "TOOL_CRASHED"
        assert simulate(lib, "emoji", {}, {}).structured == {"name": "\U0001f600"}


def test_a_result_that_contains_itself_is_a_tool_crash_whether_fresh_or_copied() -> None:
    def looped(arguments: Any, state: Any) -> dict[str, Any]:
        result: dict[str, Any] = {"rows": []}
        result["rows"].append(result)
        return result

    sims = {"looped": looped, "fine": lambda a, s: {"rows": [{"id": 1}]}}
    specs = tuple(ToolSpec(name=n, description=n, input_schema=ANY_OBJECT) for n in sims)
    for fresh in (True, False):
        lib = ToolLibrary("hand-made", specs, sims, fresh_results=fresh)
        crashed = simulate(lib, "looped", {}, {})
        assert (crashed.error_code, crashed.structured) == ("TOOL_CRASHED", None)
        assert "looped failed unexpectedly" in (crashed.message or "")
        assert simulate(lib, "fine", {}, {}).structured == {"rows": [{"id": 1}]}  # the library goes on


def test_the_backends_text_is_the_agents_only_while_no_fault_touched_the_call() -> None:
    outcome = simulate(library(fresh=True), "fresh", {}, {})
    assert outcome.text == json.dumps(outcome.structured, sort_keys=True)
    untouched = ToolCallEvent(episode="e", seq=1, tool="fresh", arguments={}, is_error=False, result={"n": 1})
    assert result_text(untouched, outcome) == outcome.text
    # A fault may have changed the result in place and handed the same outcome on: the text is made anew.
    touched = untouched.model_copy(update={"fault": HighLatency(delay_seconds=1.0)})
    assert result_text(touched, outcome) == '{"n": 1}'
