"""Protocol chaos for 2026-07-28: each modern fault type met by the SDK's default client, and scored.

Every test drives the real ``mcp.Client`` (``mode="auto"`` lands on 2026-07-28; ``"legacy"`` on the
handshake era, which meets each type's equivalent), then reads the coping components of the episode
the server recorded: the fault is met once, and what the client did decides ``recovered`` — a client
that copes and one that does not score differently.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from servers import running_http_server

from mcp_resili.constants import EPISODE_HEADER, META_EPISODE, START_TOOL
from mcp_resili.faults import ALL_PROTOCOL_TYPES, MODERN_TYPES, PROTOCOL_TYPES, ProtocolFaults, parse_plan
from mcp_resili.faults.spec import parse_fault_spec
from mcp_resili.registry.loader import get_suite
from mcp_resili.scoring.coping import coping
from mcp_resili.server.app import ResiliServer
from mcp_resili.server.protocol import NEWER_VERSION
from mcp_resili.trace import ProtocolEvent, Trace, TraceHeader

pytestmark = pytest.mark.anyio

SUITE = get_suite("resilibench")
READER = "file_operations_reader"  # read-only
ARGS = {"source": "data/a.csv"}
META: Any = {META_EPISODE: "ep"}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def one_fault(kind: str, **fields: Any) -> ProtocolFaults:
    """A plan whose only rule fires ``kind`` on the episode's first call."""
    fault: dict[str, Any] = {"type": kind, **fields}
    plan = parse_plan({"kind": "protocol", "rules": [{"fault": fault, "at_call": [1]}]})
    assert isinstance(plan, ProtocolFaults)
    return plan


def scored(server: ResiliServer, kind: str) -> tuple[int, int, list[ProtocolEvent]]:
    """(met, recovered) of ``kind`` in episode ``ep``'s coping components, and its protocol events."""
    live = server.episodes.peek("ep")
    assert live is not None
    header = TraceHeader(
        suite="resilibench",
        task=None,
        episode="ep",
        seed=0,
        fault_plan=server.pipeline.plan_dict,
        fault_key="k",
    )
    components = coping(Trace(header=header, events=tuple(live.events)))
    protocol = [e for e in live.events if isinstance(e, ProtocolEvent)]
    return components[f"coping_{kind}_met"], components[f"coping_{kind}_recovered"], protocol


def test_modern_types_are_data_in_their_own_family_and_profiles() -> None:
    assert set(MODERN_TYPES) == set(ALL_PROTOCOL_TYPES) - set(PROTOCOL_TYPES)
    assert set(MODERN_TYPES) == {
        "stale_listing",
        "handle_expired",
        "input_required",
        "notification_dropped",
        "notification_duplicated",
        "discover_changed",
    }
    for kind in MODERN_TYPES:
        fault = one_fault(kind).rules[0].fault
        assert parse_plan(one_fault(kind).to_dict()).rules[0].fault == fault  # type: ignore[attr-defined]
    modern, mixed = parse_fault_spec("protocol:modern"), parse_fault_spec("protocol:mixed")
    assert isinstance(modern, ProtocolFaults) and isinstance(mixed, ProtocolFaults)
    assert [r.fault.type for r in modern.rules] == list(MODERN_TYPES)  # type: ignore[attr-defined]
    assert [r.fault.type for r in mixed.rules] == list(ALL_PROTOCOL_TYPES)  # type: ignore[attr-defined]
    # The handshake-era profiles draw exactly what they drew before the modern family existed.
    medium = parse_fault_spec("protocol:medium")
    assert isinstance(medium, ProtocolFaults)
    assert [r.fault.type for r in medium.rules] == list(PROTOCOL_TYPES)  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_stale_listing_breaks_the_cache_promise_and_only_a_refetch_recovers(mode: str) -> None:
    for refetch in (False, True):
        server = ResiliServer(SUITE, one_fault("stale_listing"), time_scale=0)
        notices: list[Any] = []

        async def on_message(message: Any, notices: list[Any] = notices) -> None:
            notices.append(message)

        async with Client(server.mcp, mode=mode, message_handler=on_message) as client:
            first = await client.list_tools()
            assert READER in {t.name for t in first.tools}
            if mode == "auto":
                assert first.ttl_ms == 300_000  # the promise the fault breaks
            assert not (await client.call_tool(READER, ARGS, meta=META)).is_error  # served; renamed behind
            cached = await client.list_tools()  # within ttlMs the client trusts its copy
            if mode == "auto":
                assert READER in {t.name for t in cached.tools}
            with pytest.raises(MCPError) as stale:
                await client.call_tool(READER, ARGS, meta=META)
            assert stale.value.error.message == f"Unknown tool: {READER}"
            if refetch:
                fresh = await client.list_tools(meta=META, cache_mode="refresh")
                assert f"{READER}_v2" in {t.name for t in fresh.tools}
                assert not (await client.call_tool(f"{READER}_v2", ARGS, meta=META)).is_error
        assert not any(isinstance(n, types.ToolListChangedNotification) for n in notices)  # silent
        met, recovered, events = scored(server, "stale_listing")
        assert (met, recovered) == (1, int(refetch)), (mode, refetch)
        assert any(e.kind == "silent_change" for e in events)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_dropped_or_duplicated_list_change_notice(mode: str) -> None:
    for kind in ("notification_dropped", "notification_duplicated"):
        for relist in (False, True):
            server = ResiliServer(SUITE, one_fault(kind), time_scale=0)
            notices: list[Any] = []

            async def on_message(message: Any, notices: list[Any] = notices) -> None:
                if isinstance(message, types.ToolListChangedNotification):
                    notices.append(message)

            async with Client(server.mcp, mode=mode, message_handler=on_message) as client:
                await client.list_tools()
                if mode == "auto":
                    async with client.listen(tools_list_changed=True) as subscription:
                        assert not (await client.call_tool(READER, ARGS, meta=META)).is_error
                        if kind == "notification_duplicated":
                            with anyio.fail_after(5):
                                event = await subscription.__anext__()
                            assert type(event).__name__ == "ToolsListChanged"
                else:
                    assert not (await client.call_tool(READER, ARGS, meta=META)).is_error
                if relist:
                    listed = await client.list_tools(meta=META, cache_mode="refresh")
                    assert f"{READER}_next" in {t.name for t in listed.tools}
            met, recovered, events = scored(server, kind)
            assert (met, recovered) == (1, int(relist)), (mode, kind, relist)
            (notified,) = [e for e in events if e.kind == "notified"]
            copies = 2 if kind == "notification_duplicated" else 0
            assert notified.detail["copies"] == copies
            assert len(notices) == copies
            if mode == "auto":  # on the listen stream; the handshake era: on the session
                assert notified.detail["listeners"] == (1 if copies else 0)
                assert all("io.modelcontextprotocol/subscriptionId" in (n.params.meta or {}) for n in notices)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_discovery_answers_change_and_a_client_that_goes_on_recovers(mode: str) -> None:
    for change in ("capabilities", "version"):
        for go_on in (False, True):
            server = ResiliServer(SUITE, one_fault("discover_changed", change=change), time_scale=0)
            async with Client(server.mcp, mode=mode) as client:
                before = client.server_capabilities
                assert before.prompts is not None and before.resources is not None
                assert not (await client.call_tool(READER, ARGS, meta=META)).is_error
                answer = await _rediscover(client)
                if change == "capabilities":
                    assert "prompts" not in answer["capabilities"]
                    assert "resources" not in answer["capabilities"]
                    assert answer["capabilities"]["tools"] == {"listChanged": False}
                elif mode == "auto":
                    assert answer["supportedVersions"][0] == NEWER_VERSION
                    assert "2026-07-28" in answer["supportedVersions"]
                else:  # a new handshake negotiates another, supported version
                    assert answer["protocolVersion"] != client.protocol_version
                    assert answer["protocolVersion"] in HANDSHAKE_PROTOCOL_VERSIONS
                if go_on:
                    assert not (await client.call_tool(READER, ARGS, meta=META)).is_error
            met, recovered, events = scored(server, "discover_changed")
            assert (met, recovered) == (1, int(go_on)), (mode, change, go_on)
            assert [e.detail["change"] for e in events if e.kind == "discover_changed"] == [change]


async def _go_on(client: Client, kind: str, meta: Any) -> None:
    """Cope: discover again after a discovery change, refetch the list, call the tool by its name now."""
    if kind == "discover_changed":
        await _rediscover(client, meta)
    listed = {t.name for t in (await client.list_tools(meta=meta, cache_mode="refresh")).tools}
    name = f"{READER}_v2" if kind == "stale_listing" else READER
    assert name in listed, kind
    assert not (await client.call_tool(name, ARGS, meta=meta)).is_error, kind


async def _rediscover(client: Client, meta: Any = META) -> dict[str, Any]:
    """``server/discover`` (2026-07-28) or a new ``initialize`` (handshake era), in wire form."""
    result: Any
    if client.protocol_version == "2026-07-28":
        request: Any = types.DiscoverRequest(params=types.RequestParams(_meta=meta))
        result = await client.session.send_request(request, types.DiscoverResult)
    else:
        params = types.InitializeRequestParams(
            protocol_version=client.protocol_version,
            capabilities=types.ClientCapabilities(),
            client_info=types.Implementation(name="t", version="1"),
            _meta=meta,
        )
        result = await client.session.send_request(
            types.InitializeRequest(params=params), types.InitializeResult
        )
    dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_input_required_rounds_must_be_answered_well_formed(mode: str) -> None:
    cases = {  # (fault fields, what the client answers) -> recovered
        "good": ({"rounds": 2}, {"confirm": True}, 1),
        "late": ({"rounds": 2, "late": True}, {"confirm": True}, 1),
        "malformed": ({"rounds": 2}, {"confirm": "yes please"}, 0),
        "declined": ({"rounds": 2}, None, 1),  # a clean refusal is an answer
    }
    for name, (fields, content, expected) in cases.items():
        server = ResiliServer(SUITE, one_fault("input_required", **fields), time_scale=0)
        asked = 0

        async def on_elicit(context: Any, params: Any, content: Any = content) -> types.ElicitResult:
            nonlocal asked
            asked += 1
            if content is None:
                return types.ElicitResult(action="decline")
            return types.ElicitResult(action="accept", content=content)

        async with Client(server.mcp, mode=mode, elicitation_callback=on_elicit) as client:
            result = await client.call_tool(READER, ARGS, meta=META)
            assert not result.is_error  # the tool ran; its result comes after the rounds
        met, recovered, events = scored(server, "input_required")
        assert (met, recovered) == (1, expected), (mode, name)
        answers = [e.detail["answer"] for e in events if e.kind == "answered"]
        if name == "good":
            assert asked == 2 and answers == ["accept", "accept", "complete"]
        if name == "late":
            assert answers[0] == ("late" if mode == "auto" else "accept")
            assert answers[-1] == "complete"
        if name == "malformed":
            assert asked == 6 and answers[-1] == "incomplete"  # asked again, up to three times the rounds
        if name == "declined":
            assert asked == 1 and answers == ["decline", "declined"]
    # A client that declared no elicitation capability is never asked.
    server = ResiliServer(SUITE, one_fault("input_required"), time_scale=0)
    async with Client(server.mcp, mode=mode) as client:
        assert not (await client.call_tool(READER, ARGS, meta=META)).is_error
    _, _, events = scored(server, "input_required")
    assert [e.detail["answer"] for e in events if e.kind == "answered"] == ["not_supported"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_handle_expired_without_handles_expires_the_session(mode: str) -> None:
    for reinitialize in (False, True):
        server = ResiliServer(SUITE, one_fault("handle_expired"), time_scale=0)
        async with Client(server.mcp, mode=mode) as client:
            with pytest.raises(MCPError) as first:
                await client.call_tool(READER, ARGS, meta=META)
            assert first.value.error.data["reason"] == "session_expired"
            if reinitialize:
                await _rediscover(client)
                assert not (await client.call_tool(READER, ARGS, meta=META)).is_error
        met, recovered, _ = scored(server, "handle_expired")
        assert (met, recovered) == (1, int(reinitialize)), (mode, reinitialize)


async def test_a_revoked_handle_is_an_is_error_and_start_episode_resumes_the_episode(tmp_path: Path) -> None:
    rules = [
        {
            "fault": {"type": "handle_expired", "unknown": unknown},
            "at_call": [2],
            "fault_key": f"{TASK}/{trial}",
        }
        for trial, unknown in ((1, False), (2, True), (3, False))
    ]
    faults = tmp_path / "faults.json"
    faults.write_text(_json({"kind": "protocol", "rules": rules}), encoding="utf-8")
    trace_dir = tmp_path / "traces"
    args = ("--faults", str(faults), "--time-scale", "0", "--trace-dir", str(trace_dir))
    call = ("network_fetcher", {"source": "https://api.example.com/orders/676"})
    async with running_http_server(*args, workdir=tmp_path) as server, Client(server.url) as client:
        for trial, resume in ((1, True), (2, True), (3, False)):
            handle = await _start(client, trial)
            assert not (await client.call_tool(call[0], {**call[1], "episode_handle": handle})).is_error
            refused = await client.call_tool(call[0], {**call[1], "episode_handle": handle})
            assert refused.is_error is True
            text = refused.content[0].text  # type: ignore[union-attr]
            assert text.startswith("Error EPISODE_EXPIRED" if trial != 2 else "Error INVALID_HANDLE")
            assert START_TOOL in text
            again = await client.call_tool(call[0], {**call[1], "episode_handle": handle})
            assert again.is_error is True  # the old handle stays dead
            if resume:
                new = await _start(client, trial)
                assert new != handle
                assert not (await client.call_tool(call[0], {**call[1], "episode_handle": new})).is_error
    by_trial: dict[Any, Trace] = {
        t.header.trial: t for t in (Trace.read(p) for p in trace_dir.glob("*.jsonl"))
    }
    assert sorted(by_trial) == [1, 2, 3]  # a resumed episode is the same episode, one trace each
    for trial, trace in by_trial.items():
        components = coping(trace)
        assert components["coping_handle_expired_met"] == 1
        assert components["coping_handle_expired_recovered"] == (0 if trial == 3 else 1), trial
        assert components["coping_reinitialized"] is (trial != 3)


TASK = "task_ada1c6bc"


async def _start(client: Client, trial: int) -> str:
    started = await client.call_tool(START_TOOL, {"task": TASK, "trial": trial})
    assert started.is_error is not True
    handle = (started.structured_content or {}).get("episode_handle")
    assert isinstance(handle, str)
    return handle


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


# --- the proxy applies them in front of any server, in either era -------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_proxy_applies_every_modern_fault_in_front_of_a_server(mode: str) -> None:
    from mcp_resili.faults import NoFaults
    from mcp_resili.proxy import ProxyServer

    met: dict[str, Any] = {}
    for kind in MODERN_TYPES:
        upstream = ResiliServer(SUITE, NoFaults())
        notices: list[Any] = []
        asked: list[Any] = []

        async def on_message(message: Any, notices: list[Any] = notices) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                notices.append(message)

        async def on_elicit(context: Any, params: Any, asked: list[Any] = asked) -> types.ElicitResult:
            asked.append(params)
            return types.ElicitResult(action="accept", content={"confirm": True})

        options: dict[str, Any] = {"message_handler": on_message, "elicitation_callback": on_elicit}
        async with Client(upstream.mcp) as direct:
            proxy = await ProxyServer.create(direct, one_fault(kind), upstream="in-memory")
            async with Client(proxy.mcp, mode=mode, **options) as client:
                listing = await client.list_tools()
                try:
                    first: Any = await client.call_tool(READER, ARGS, meta=META)
                except MCPError as exc:
                    first = exc
                if kind == "discover_changed":
                    first = await _rediscover(client)
                if kind == "handle_expired":
                    await _rediscover(client)  # the way back into an expired session
                listed = {t.name for t in (await client.list_tools(meta=META, cache_mode="refresh")).tools}
        live = proxy._episodes.peek("ep")
        assert live is not None
        plan = proxy.pipeline.plan_dict
        header = TraceHeader(suite="proxy", task=None, episode="ep", seed=0, fault_plan=plan, fault_key="k")
        components = coping(Trace(header=header, events=tuple(live.events)))
        assert components[f"coping_{kind}_met"] == 1, kind
        met[kind] = (listing.ttl_ms, first, listed, len(notices), len(asked))
    assert met["stale_listing"][0] == (300_000 if mode == "auto" else 0)  # no promise before 2026
    assert f"{READER}_v2" in met["stale_listing"][2] and met["stale_listing"][3] == 0
    assert isinstance(met["handle_expired"][1], MCPError)  # no handles behind a proxy: the session expires
    assert met["input_required"][4] == 2 and not met["input_required"][1].is_error
    assert f"{READER}_next" in met["notification_dropped"][2] and met["notification_dropped"][3] == 0
    assert met["notification_duplicated"][3] == 2
    assert "prompts" not in met["discover_changed"][1]["capabilities"]


# --- the runner meets the modern profile; reports show every type -----------------------------------


def test_the_runner_meets_the_modern_profile_and_reports_coping_per_type(tmp_path: Path) -> None:
    from mcp_resili.client.runner import RunConfig, execute
    from mcp_resili.report.coping import coping_data

    config = RunConfig(
        models=("scripted:oracle",),
        faults=("protocol:modern",),
        trials=2,
        limit=20,
        time_scale=0,
        seed=1,  # with this seed the 40 episodes meet all six types (a property of the draws)
        db=tmp_path / "runs.db",
    )
    result = anyio.run(execute, config)
    assert all(row.termination != "infrastructure_error" for row in result.rows)
    data = next(iter(coping_data(result.rows).values()))["types"]
    assert {kind for kind, entry in data.items() if entry["met"] and kind != "all"} == set(MODERN_TYPES)
    rate = {kind: data[kind]["recovery"]["rate"] for kind in MODERN_TYPES}
    # The loop re-initializes, answers (declines) input requests, relists on a notice and goes on ...
    for kind in ("handle_expired", "input_required", "notification_duplicated", "discover_changed"):
        assert rate[kind] == 1.0, (kind, rate)
    # ... but never refetches a list no notice invalidated: the silent changes catch it.
    assert rate["notification_dropped"] == 0.0 and rate["stale_listing"] < 0.5


async def test_a_list_change_is_announced_on_its_own_clients_listen_stream_only() -> None:
    server = ResiliServer(SUITE, one_fault("notification_duplicated"), time_scale=0)
    heard: dict[str, list[Any]] = {"player": [], "bystander": []}

    def handler(name: str) -> Any:
        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                heard[name].append(message)

        return on_message

    async with (
        Client(server.mcp, message_handler=handler("player")) as player,
        Client(server.mcp, message_handler=handler("bystander")) as bystander,
        player.listen(tools_list_changed=True),
        bystander.listen(tools_list_changed=True),
    ):
        assert not (await player.call_tool(READER, ARGS, meta=META)).is_error
        assert len(heard["player"]) == 2  # both copies came before the player's result
        await bystander.list_tools()  # a round trip of the bystander's after the notices went out
    assert len(heard["player"]) == 2 and heard["bystander"] == []


# --- over Streamable HTTP: one server, both eras, every modern type ------------------------------------


async def test_over_http_both_eras_meet_every_modern_type_from_one_plan(tmp_path: Path) -> None:
    import json

    eras = {"auto": 0, "legacy": 100}  # trial offsets: each (era, type) has its own fault key
    rules = [
        {"fault": {"type": kind}, "at_call": [1], "fault_key": f"untasked/{base + i}"}
        for base in eras.values()
        for i, kind in enumerate(MODERN_TYPES)
    ]
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"kind": "protocol", "rules": rules}), encoding="utf-8")
    trace_dir = tmp_path / "traces"
    args = ("--faults", str(faults), "--time-scale", "0", "--trace-dir", str(trace_dir))
    heard: dict[str, int] = {}
    async with running_http_server(*args, workdir=tmp_path) as server:
        for mode, base in eras.items():
            for i, kind in enumerate(MODERN_TYPES):
                episode = json.dumps({"id": f"{mode}-{kind}", "trial": base + i})
                heard[f"{mode}-{kind}"] = await _play_over_http(server.url, mode, kind, episode)
    traces = {t.header.episode: t for t in (Trace.read(p) for p in trace_dir.glob("*.jsonl"))}
    for mode in eras:
        for kind in MODERN_TYPES:
            components = coping(traces[f"{mode}-{kind}"])
            assert components[f"coping_{kind}_met"] == 1, (mode, kind)
            assert components[f"coping_{kind}_recovered"] == 1, (mode, kind)  # this client copes
    assert heard["auto-notification_duplicated"] == heard["legacy-notification_duplicated"] == 2
    assert heard["auto-notification_dropped"] == heard["legacy-notification_dropped"] == 0
    listened = [e for e in traces["auto-notification_duplicated"].events if isinstance(e, ProtocolEvent)]
    assert [e.detail.get("listeners") for e in listened if e.kind == "notified"] == [1]


async def _play_over_http(url: str, mode: str, kind: str, episode: str) -> int:
    """One client meets ``kind`` on its first call and copes; how many list-change notices it heard.

    It names its episode in our header, which its handshake (SDK-sent) carries too: a handshake
    client whose session expired continues the episode in a new session.
    """
    meta = None
    notices = 0

    async def on_message(message: Any) -> None:
        nonlocal notices
        if isinstance(message, types.ToolListChangedNotification):
            notices += 1

    async def on_elicit(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"confirm": True})

    options: dict[str, Any] = {"mode": mode, "message_handler": on_message, "elicitation_callback": on_elicit}

    @contextlib.asynccontextmanager
    async def connect() -> AsyncIterator[Client]:
        http = httpx2.AsyncClient(headers={EPISODE_HEADER: episode}, timeout=30)
        async with http, Client(streamable_http_client(url, http_client=http), **options) as client:
            yield client

    expired = False
    async with connect() as client:
        listening = client.listen(tools_list_changed=True) if mode == "auto" else None
        async with listening if listening is not None else _nothing():
            try:
                await client.call_tool(READER, ARGS, meta=meta)
            except MCPError:
                expired = True  # handle_expired without handles: the session expired
                if mode == "auto":
                    await _rediscover(client, meta)  # 2026-07-28 has no session to replace
            if not expired or mode == "auto":
                await _go_on(client, kind, meta)
    if expired and mode == "legacy":
        async with connect() as client:  # a handshake session that expired is gone for good
            await _go_on(client, kind, meta)
    return notices


@contextlib.asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield
