"""Protocol faults: data, schedules and seeds, what the SDK client meets in process, and the runner coping.

The server plays the tiny suite (tests/tiny_suite): ``lookup`` is its read-only tool, ``record`` a write.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from tiny_suite import suite as tiny_suite

from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.constants import META_EPISODE
from mcp_resili.faults import (
    PROTOCOL_TYPES,
    CallContext,
    CallOutcome,
    FaultInjector,
    FaultSpecError,
    ProtocolFaults,
    RuleFaults,
    load_fault_file,
    parse_fault,
    parse_fault_spec,
    parse_plan,
)
from mcp_resili.faults.protocol import PROFILES
from mcp_resili.report.coping import coping_data
from mcp_resili.scoring.coping import coping
from mcp_resili.server.app import ResiliServer
from mcp_resili.store import StoredRows
from mcp_resili.trace import ProtocolEvent, ToolCallEvent, Trace

SUITE = tiny_suite()
READER = "lookup"  # read-only
ARGS = {"key": "apple"}


def one_fault(kind: str, **fields: Any) -> ProtocolFaults:
    """A plan whose only rule fires ``kind`` on the episode's first call."""
    plan = parse_plan({"kind": "protocol", "rules": [{"fault": {"type": kind, **fields}, "at_call": [1]}]})
    assert isinstance(plan, ProtocolFaults)
    return plan


def meta(episode: str = "ep") -> dict[str, Any]:
    return {META_EPISODE: episode}


# --- data, schedules, seeds --------------------------------------------------------------------------


def test_every_protocol_fault_type_parses_from_its_json_form() -> None:
    for kind in PROTOCOL_TYPES:
        fault = parse_fault({"type": kind})
        assert parse_fault(fault.model_dump(mode="json")) == fault
    with pytest.raises(FaultSpecError, match="megabytes"):
        parse_fault({"type": "oversized_result", "megabytes": 0})


def test_one_fault_file_mixes_result_faults_and_protocol_faults(tmp_path: Path) -> None:
    path = tmp_path / "mixed.toml"
    path.write_text(
        'kind = "rules"\n'
        '[[rules]]\ntool = "e*"\nfault = { type = "error", code = "RATE_LIMITED" }\n'
        '[[rules]]\ncalls = [2]\nfault = { type = "tool_removed" }\n',
        encoding="utf-8",
    )
    plan = load_fault_file(path)
    assert isinstance(plan, RuleFaults)
    assert [rule.fault.type for rule in plan.rules] == ["error", "tool_removed"]  # type: ignore[attr-defined]
    # The same file serves both our server and the proxy (which has no suite).
    assert parse_fault_spec(str(path)) == parse_fault_spec(str(path), SUITE.spec_scope)


def test_protocol_profiles_cover_every_type_at_medium_and_heavy_and_refuse_unknown_levels() -> None:
    for level in ("medium", "heavy"):
        plan = parse_fault_spec(f"protocol:{level}")
        assert isinstance(plan, ProtocolFaults)
        assert [rule.fault.type for rule in plan.rules] == list(PROTOCOL_TYPES)  # type: ignore[attr-defined]
    light = parse_fault_spec("protocol:light")
    assert isinstance(light, ProtocolFaults) and len(light.rules) == len(PROFILES["light"][2]) < len(
        PROTOCOL_TYPES
    )
    with pytest.raises(FaultSpecError, match="light, medium, heavy"):
        parse_fault_spec("protocol:extreme")
    with pytest.raises(FaultSpecError, match="after"):
        parse_fault_spec("protocol:light+")


def _ledger(
    plan: ProtocolFaults, seed: int, episodes: int = 40, calls: int = 12
) -> list[tuple[str, int, str]]:
    injector = FaultInjector(plan, seed)
    spec = SUITE.library.spec(READER)
    fired = []
    for episode in range(episodes):
        state: dict[str, Any] = {}
        history: list[CallOutcome] = []
        for ordinal in range(calls):
            decision = injector.decide(
                CallContext(f"task/{episode}", spec, ordinal, tuple(history), state=state)
            )
            if decision.fault is not None:
                fired.append((f"task/{episode}", ordinal, decision.fault.type))  # type: ignore[attr-defined]
            history.append(CallOutcome(READER, True))
    return fired


def test_the_same_seed_gives_the_same_protocol_faults_and_another_seed_others() -> None:
    plan = parse_fault_spec("protocol:heavy")
    assert isinstance(plan, ProtocolFaults)
    first, again, other = _ledger(plan, 7), _ledger(plan, 7), _ledger(plan, 8)
    assert first == again
    assert first != other
    # The episode cap holds, and over enough episodes every type fires.
    per_episode: dict[str, int] = {}
    for key, _, _ in first:
        per_episode[key] = per_episode.get(key, 0) + 1
    assert max(per_episode.values()) <= (plan.max_per_episode or 0)
    assert {kind for _, _, kind in _ledger(plan, 7, episodes=400)} == set(PROTOCOL_TYPES)


def test_at_call_after_tool_and_once_decide_when_a_rule_fires() -> None:
    plan = parse_plan(
        {
            "kind": "protocol",
            "rules": [
                {"fault": {"type": "log_flood"}, "after_tool": "e*"},
                {"fault": {"type": "tool_added"}, "at_call": [3], "once": False},
            ],
        }
    )
    injector = FaultInjector(plan, 0)
    reader, fetcher = SUITE.library.spec(READER), SUITE.library.spec("echo")
    state: dict[str, Any] = {}
    seen = []
    history: list[CallOutcome] = []
    for ordinal, spec in enumerate([reader, fetcher, reader, fetcher, reader]):
        decision = injector.decide(CallContext("k/0", spec, ordinal, tuple(history), state=state))
        seen.append(None if decision.fault is None else decision.fault.type)  # type: ignore[attr-defined]
        history.append(CallOutcome(spec.name, True))
    # Call 3 follows echo (log_flood, once); call 5 follows it again but log_flood is spent.
    assert seen == [None, None, "log_flood", None, None]


def test_a_base_plan_under_protocol_rules_draws_exactly_as_it_does_alone() -> None:
    base = parse_plan(
        {"kind": "rules", "rules": [{"probability": 0.5, "fault": {"type": "error", "code": "X"}}]}
    )
    layered = parse_plan(
        {
            "kind": "protocol",
            "rules": [{"fault": {"type": "log_flood"}, "probability": 0.3, "once": False}],
            "base": base.to_dict(),
        }
    )
    spec = SUITE.library.spec(READER)
    for ordinal in range(60):
        call = CallContext("t/1", spec, ordinal, ())
        alone = FaultInjector(base, 3).decide(call)
        both = FaultInjector(layered, 3).decide(CallContext("t/1", spec, ordinal, (), state={}))
        if both.fault is not None and both.fault.type == "log_flood":  # type: ignore[attr-defined]
            continue  # the protocol rule took the call
        assert both.fault == alone.fault and both.roll == alone.roll


def test_protocol_spec_over_a_suite_plan_keeps_that_plan_as_its_base() -> None:
    plan = parse_fault_spec("protocol:light+tiny:p=0.2", SUITE.spec_scope)
    assert isinstance(plan, ProtocolFaults)
    assert plan.base == {"kind": "tiny", "failure": 0.2}
    assert parse_plan(plan.to_dict()) == plan


# --- what the SDK client meets, in process, in both protocol eras -----------------------------------


class Seen:
    def __init__(self) -> None:
        self.list_changed = 0
        self.logs = 0
        self.progress = 0
        self.elicited = 0

    def options(self) -> dict[str, Any]:
        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                self.list_changed += 1
            elif isinstance(message, types.LoggingMessageNotification):
                self.logs += 1

        async def on_elicit(context: Any, params: Any) -> types.ElicitResult:
            self.elicited += 1
            return types.ElicitResult(action="decline")

        return {"message_handler": on_message, "elicitation_callback": on_elicit}


async def _reinitialize(client: Client, episode: str) -> None:
    if client.protocol_version == "2026-07-28":
        request: Any = types.DiscoverRequest(params=types.RequestParams(_meta=meta(episode)))  # type: ignore[arg-type]
        await client.session.send_request(request, types.DiscoverResult)
    else:
        params = types.InitializeRequestParams(
            protocol_version=client.protocol_version,
            capabilities=types.ClientCapabilities(),
            client_info=types.Implementation(name="t", version="1"),
            _meta=meta(episode),  # type: ignore[arg-type]
        )
        await client.session.send_request(types.InitializeRequest(params=params), types.InitializeResult)


def _protocol_kinds(server: ResiliServer, episode: str = "ep") -> list[str]:
    live = server.episodes.peek(episode)
    assert live is not None
    return [e.kind for e in live.pending if isinstance(e, ProtocolEvent)]  # nothing taken them


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_catalogue_changes_notify_and_refuse_the_old_form_like_a_real_server(mode: str) -> None:
    for kind in ("tool_removed", "tool_renamed", "schema_changed", "tool_added"):
        server = ResiliServer(SUITE, one_fault(kind), time_scale=0)
        seen = Seen()
        async with Client(server.mcp, mode=mode, **seen.options()) as client:
            first: Any
            try:
                first = await client.call_tool(READER, ARGS, meta=meta())
            except MCPError as exc:
                first = exc
            listed = {t.name: t for t in (await client.list_tools(meta=meta(), cache_mode="refresh")).tools}
            assert seen.list_changed == 1, kind
            if kind in ("tool_removed", "tool_renamed"):
                assert isinstance(first, MCPError) and first.code == types.INVALID_PARAMS
                assert READER not in listed
                with pytest.raises(MCPError) as again:
                    await client.call_tool(READER, ARGS, meta=meta())
                assert again.value.error.message == f"Unknown tool: {READER}"
            if kind == "tool_renamed":
                renamed = await client.call_tool(f"{READER}_v2", ARGS, meta=meta())
                assert not renamed.is_error and "renamed_call" in _protocol_kinds(server)
            if kind == "schema_changed":
                assert first.is_error and "schema_version" in first.content[0].text
                assert "schema_version" in listed[READER].input_schema["required"]
                fixed = await client.call_tool(READER, {**ARGS, "schema_version": "2"}, meta=meta())
                assert not fixed.is_error
            if kind == "tool_added":
                assert not first.is_error and f"{READER}_next" in listed
        assert _protocol_kinds(server)[:1] == ["notified"]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_session_faults_refuse_every_request_until_the_client_initializes_again(mode: str) -> None:
    for kind in ("session_expired", "unauthorized", "server_restart"):
        server = ResiliServer(SUITE, one_fault(kind), time_scale=0)
        async with Client(server.mcp, mode=mode) as client:
            with pytest.raises(MCPError) as first:
                await client.call_tool(READER, ARGS, meta=meta())
            assert first.value.error.data["reason"] == kind  # type: ignore[index]
            with pytest.raises(MCPError) as listing:
                await client.list_tools(meta=meta(), cache_mode="refresh")
            assert listing.value.code == types.INVALID_REQUEST
            await _reinitialize(client, "ep")
            assert not (await client.call_tool(READER, ARGS, meta=meta())).is_error
        kinds = _protocol_kinds(server)
        assert kinds.count("refused") == 1 and "initialize" in kinds


@pytest.mark.anyio
async def test_a_restart_loses_the_episode_state_unless_configured_to_keep_it() -> None:
    for keep in (False, True):
        server = ResiliServer(SUITE, one_fault("server_restart", keep_state=keep), time_scale=0)
        async with Client(server.mcp) as client:
            episode = server.episodes.get(server_request("ep"))
            episode.tool_state["marker"] = 1
            episode.state_ready = True
            with pytest.raises(MCPError):
                await client.call_tool(READER, ARGS, meta=meta())
        assert ("marker" in episode.tool_state) is keep


def server_request(episode: str) -> Any:
    from mcp_resili.server.episodes import EpisodeRequest

    return EpisodeRequest(id=episode)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_transport_and_pressure_faults_reach_the_sdk_client_as_documented(mode: str) -> None:
    met: dict[str, Any] = {}
    for kind in (
        "response_delayed",
        "response_dropped",
        "stream_stalled",
        "transport_reset",
        "response_duplicated",
        "oversized_result",
        "log_flood",
        "progress_flood",
        "elicitation_request",
        "sampling_request",
    ):
        fields = (
            {"count": 25}
            if kind.endswith("flood")
            else {"megabytes": 2}
            if kind == "oversized_result"
            else {}
        )
        server = ResiliServer(SUITE, one_fault(kind, **fields), time_scale=0)
        seen = Seen()
        progress: list[float] = []

        async def on_progress(
            value: float, total: float | None, message: str | None, progress: list[float] = progress
        ) -> None:
            progress.append(value)

        async with Client(server.mcp, mode=mode, **seen.options()) as client:
            try:
                result = await client.call_tool(READER, ARGS, progress_callback=on_progress, meta=meta())
                met[kind] = (
                    "result",
                    sum(len(c.text) for c in result.content if isinstance(c, types.TextContent)),
                )
            except MCPError as exc:
                met[kind] = ("error", exc.code)
            # Every fault here is transient: the next call is served as usual.
            assert not (await client.call_tool(READER, ARGS, meta=meta())).is_error
        met[kind] += (seen.logs, len(progress), seen.elicited, _protocol_kinds(server))
    assert met["response_delayed"][:2] == met["response_dropped"][:2] == ("error", types.REQUEST_TIMEOUT)
    assert met["stream_stalled"][:2] == ("error", types.REQUEST_TIMEOUT) and met["stream_stalled"][3] == 3
    assert met["transport_reset"][:2] == ("error", types.CONNECTION_CLOSED)
    assert met["response_duplicated"][0] == "result"  # in process there is no wire to send it twice on
    assert met["oversized_result"][1] > 2_000_000
    assert met["log_flood"][2] == 25 and met["progress_flood"][3] == 25
    assert met["elicitation_request"][4] == 1 and met["elicitation_request"][5][0] == "answered"
    assert met["sampling_request"][5][0] == "answered"  # no sampling capability: not asked, recorded


# --- the runner's agent loop copes, and the coping scores say so ------------------------------------


def test_the_runner_copes_with_every_protocol_fault_type_and_reports_recovery(tmp_path: Path) -> None:
    config = RunConfig(
        suite="tiny",
        models=("scripted:oracle",),
        faults=("protocol:heavy",),
        trials=7,
        time_scale=0,
        seed=0,  # with this seed the 42 episodes meet all 17 types (a property of the draws, checked here)
        db=tmp_path / "runs.db",
    )
    result = anyio.run(execute, config)
    assert all(row.termination != "infrastructure_error" for row in result.rows)
    data = next(iter(coping_data(result.rows).values()))
    # Read from the store, the pass is taken (the store knows the scores have coping components).
    assert coping_data(StoredRows(config.db, result.run_id)) == coping_data(result.rows)
    met = {kind: entry["met"] for kind, entry in data["types"].items() if kind != "all"}
    assert set(PROTOCOL_TYPES) == {kind for kind, n in met.items() if n}, met
    recovered = {kind: entry["recovery"]["rate"] for kind, entry in data["types"].items() if entry["met"]}
    # The loop's own coping: re-list on list_changed, re-initialize after an expired session or a
    # revoked token, never retry a write whose outcome is unknown, answer what the server asks.
    for kind in (
        "tool_added",
        "session_expired",
        "unauthorized",
        "response_duplicated",
        "oversized_result",
        "log_flood",
        "progress_flood",
        "elicitation_request",
        "sampling_request",
    ):
        assert recovered[kind] == 1.0, (kind, recovered)
    traces = [Trace.from_lines(row.trace.splitlines()) for row in result.rows]
    relisted = [t for t in traces if coping(t)["coping_tool_added_met"]]
    assert relisted and all(coping(t)["coping_relisted"] for t in relisted)
    # A rerun with the same seed meets the same faults, call for call.
    again = anyio.run(execute, config)
    ledger = sorted(
        (row.episode_id.split("/", 1)[1], e.seq, e.fault.type)  # type: ignore[union-attr]
        for row in result.rows
        for e in Trace.from_lines(row.trace.splitlines()).events
        if isinstance(e, ToolCallEvent) and e.fault is not None
    )
    ledger_again = sorted(
        (row.episode_id.split("/", 1)[1], e.seq, e.fault.type)  # type: ignore[union-attr]
        for row in again.rows
        for e in Trace.from_lines(row.trace.splitlines()).events
        if isinstance(e, ToolCallEvent) and e.fault is not None
    )
    assert ledger == ledger_again


@pytest.mark.anyio
async def test_the_loop_retries_a_lost_response_only_for_a_read_only_tool() -> None:
    from mcp_resili.agents.model import ToolCall
    from mcp_resili.client.episode import EpisodeSpec
    from mcp_resili.client.loop import call_tool
    from mcp_resili.client.recorded import RecordedEvents

    # Dependencies unenforced: the write is the episode's first call, which the fault is scheduled on.
    suite = replace(SUITE, enforce_dependencies=False)
    for tool, arguments, read_only in (
        (READER, ARGS, frozenset({READER})),
        ("record", {"label": "x", "value": 1}, frozenset()),
    ):
        server = ResiliServer(suite, one_fault("response_dropped"), time_scale=0)
        spec = EpisodeSpec(id="ep", fault_key="k/0", seed=0, task=None, prompt="")
        taken: list[Any] = []

        def take(episode_id: str, server: ResiliServer = server, taken: list[Any] = taken) -> list[Any]:
            events = server.take_events(episode_id)
            taken.extend(events)  # the server hands each event over once, and keeps none
            return events

        async with Client(server.mcp) as client:
            protocol: list[Any] = []
            result, _event, _ = await call_tool(
                client,
                spec,
                ToolCall("c1", tool, arguments),
                1,
                RecordedEvents(after_call=take),
                read_only=read_only,
                protocol=protocol,
            )
        assert server.episodes.peek("ep") is not None
        calls = [e for e in taken if isinstance(e, ToolCallEvent)]
        if read_only:
            assert len(calls) == 2 and not result.is_error  # retried once, served
        else:
            assert len(calls) == 1 and result.is_error  # the write may have happened: not repeated
            assert "-32001" in result.text


def test_runs_without_protocol_faults_carry_no_coping_components(tmp_path: Path) -> None:
    config = RunConfig(suite="tiny", models=("scripted:oracle",), trials=1, limit=2, db=tmp_path / "runs.db")
    result = anyio.run(execute, config)
    for row in result.rows:
        assert not any(name.startswith("coping_") for name in (row.score or {})["components"])
        assert '"event":"protocol"' not in row.trace.replace(" ", "")
    assert json.dumps(coping_data(result.rows)) == "{}"


# --- over a real wire the server reports nothing for the faults it injects ---------------------------


@pytest.mark.anyio
async def test_injected_http_resets_and_duplicates_leave_no_traceback_on_the_servers_stderr(
    tmp_path: Path,
) -> None:
    """uvicorn printed "Exception in ASGI application" and a traceback for each (review finding)."""
    import httpx2
    from servers import running_http_server

    plan = {
        "kind": "protocol",
        "rules": [
            {"fault": {"type": "transport_reset"}, "at_call": [1]},
            {"fault": {"type": "response_duplicated"}, "at_call": [2]},
        ],
    }
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps(plan), encoding="utf-8")
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    outcomes = []
    serve_args = ("--suite", "tiny", "--faults", str(faults), "--time-scale", "0")
    async with running_http_server(*serve_args, workdir=tmp_path) as server:
        async with httpx2.AsyncClient(timeout=30) as http:
            opened = await http.post(server.url, content=json.dumps(initialize), headers=headers)
            session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
            for n in range(1, 4):
                call = {"name": READER, "arguments": ARGS, "_meta": {META_EPISODE: "wire"}}
                body = json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": call})
                try:
                    response = await http.post(server.url, content=body, headers=session)
                except httpx2.HTTPError as exc:
                    outcomes.append(type(exc).__name__)
                    continue
                data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
                outcomes.append([json.loads(d)["id"] for d in data] or [json.loads(response.text)["id"]])
        stderr = server.stderr_path.read_text()
    assert outcomes[0] == "RemoteProtocolError"  # the connection closed, no answer
    assert outcomes[1] in ([2], [2, 2])  # a stream carries it twice; a JSON body once
    assert outcomes[2] == [3]
    assert "Traceback" not in stderr and "Exception in ASGI" not in stderr and "ERROR" not in stderr


@pytest.mark.anyio
async def test_a_reset_after_the_answers_headers_fails_that_call_not_the_run(tmp_path: Path) -> None:
    """The reset drops a JSON answer's body after its headers went out: the SDK met that outside any
    request, and `run --server URL` under protocol:heavy ended in a traceback (found trying it)."""
    from servers import running_http_server

    plan = {"kind": "protocol", "rules": [{"fault": {"type": "transport_reset"}, "at_call": [1]}]}
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps(plan), encoding="utf-8")
    serve_args = ("--suite", "tiny", "--faults", str(faults), "--time-scale", "0")
    async with running_http_server(*serve_args, workdir=tmp_path) as server:
        config = RunConfig(
            suite="tiny",
            server=server.url,
            models=("scripted:oracle",),
            trials=1,
            limit=3,
            db=tmp_path / "runs.db",
        )
        result = await execute(config)
    assert len(result.rows) == 3  # the run went on: every episode stored
    for row in result.rows:
        events = Trace.from_lines(row.trace.splitlines()).events
        first = next(e for e in events if isinstance(e, ToolCallEvent))
        assert first.is_error and first.error_code == "CONNECTION_RESET"  # that call failed, alone
        assert row.termination != "infrastructure_error"
