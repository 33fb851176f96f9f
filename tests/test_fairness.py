"""No client takes the server from the others: per-client shares, heavy work after light, work off loop."""

from __future__ import annotations

import functools
import threading
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_resili.client.inprocess import InProcessClient
from mcp_resili.client.session import without_idle_tracing
from mcp_resili.constants import META_EPISODE
from mcp_resili.faults import parse_fault_spec
from mcp_resili.registry.loader import get_suite
from mcp_resili.server import pipeline
from mcp_resili.server.app import ResiliServer
from mcp_resili.server.budget import MemoryBudget
from mcp_resili.server.direct import direct_on_request
from mcp_resili.server.fairness import FairLimits, FairShare, client_key
from mcp_resili.tools import ToolLibrary, ToolSpec
from mcp_resili.tools.validator import GATHERED_PROBLEMS, argument_problems, compiled
from mcp_resili.trace.codes import EPISODE_BUSY, RESULT_TOO_LARGE

pytestmark = pytest.mark.anyio


class Gated:
    """An ASGI app whose every request waits for its own gate; records the order they started in."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, anyio.Event] = {}
        self.arrived: dict[str, anyio.Event] = {}
        self.answer = b"{}"

    def expect(self, name: str) -> None:
        self.gates[name] = anyio.Event()
        self.arrived[name] = anyio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        name = dict(scope["headers"])[b"x-name"].decode()
        self.started.append(name)
        self.arrived[name].set()
        await self.gates[name].wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": self.answer})


def scope(name: str, session: str, length: int = 100) -> dict[str, Any]:
    headers = [(b"x-name", name.encode()), (b"mcp-session-id", session.encode())]
    headers.append((b"content-length", str(length).encode()))
    return {"type": "http", "method": "POST", "headers": headers, "client": ("127.0.0.1", 5000)}


async def call(app: FairShare, request: dict[str, Any], statuses: dict[str, int]) -> None:
    name = dict(request["headers"])[b"x-name"].decode()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses[name] = message["status"]

    await app(request, receive, send)


async def test_a_client_gets_its_share_at_once_and_the_rest_waits_or_is_told_to_slow_down() -> None:
    inner = Gated()
    app = FairShare(inner, FairLimits(per_client=2, queue=1))
    statuses: dict[str, int] = {}
    for name in ("a1", "a2", "a3", "a4", "b1"):
        inner.expect(name)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for name in ("a1", "a2"):
                tg.start_soon(call, app, scope(name, "A"), statuses)
                await inner.arrived[name].wait()
            tg.start_soon(call, app, scope("a3", "A"), statuses)  # waits: A has 2 running
            await anyio.wait_all_tasks_blocked()
            await call(app, scope("a4", "A"), statuses)  # the queue (1) is full: refused at once
            assert statuses == {"a4": 429}
            tg.start_soon(call, app, scope("b1", "B"), statuses)  # another client: served at once
            await inner.arrived["b1"].wait()
            assert inner.started == ["a1", "a2", "b1"]
            inner.gates["a1"].set()  # a1 ends: its slot goes to a3
            await inner.arrived["a3"].wait()
            for name in ("a2", "a3", "b1"):
                inner.gates[name].set()
    assert inner.started == ["a1", "a2", "b1", "a3"]
    assert statuses == {"a1": 200, "a2": 200, "a3": 200, "a4": 429, "b1": 200} and app.refused == 1


async def test_heavy_requests_wait_for_light_ones_and_take_turns() -> None:
    inner = Gated()
    limits = FairLimits(heavy_bytes=1000, quiet_seconds=0, starve_seconds=60, duty=1.0)
    app = FairShare(inner, limits)
    statuses: dict[str, int] = {}
    for name in ("light", "h1", "h2", "h3"):
        inner.expect(name)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, app, scope("light", "L"), statuses)
            await inner.arrived["light"].wait()
            for name, session in (("h1", "H1"), ("h2", "H2"), ("h3", "H1")):
                tg.start_soon(call, app, scope(name, session, length=5000), statuses)
            await anyio.wait_all_tasks_blocked()
            assert inner.started == ["light"]  # every heavy request waits while light work runs
            inner.gates["light"].set()
            await inner.arrived["h1"].wait()
            await anyio.wait_all_tasks_blocked()
            assert inner.started == ["light", "h1"]  # one heavy request at a time
            inner.gates["h1"].set()
            await inner.arrived["h2"].wait()
            inner.gates["h2"].set()
            await inner.arrived["h3"].wait()
            inner.gates["h3"].set()
    assert inner.started == ["light", "h1", "h2", "h3"]


async def test_a_client_whose_answers_are_big_becomes_heavy_until_they_are_small_again() -> None:
    inner = Gated()
    app = FairShare(inner, FairLimits(heavy_bytes=1000, quiet_seconds=0, starve_seconds=60, duty=1.0))
    statuses: dict[str, int] = {}
    inner.answer = b"x" * 5000
    inner.expect("big")
    inner.gates["big"].set()
    await call(app, scope("big", "S"), statuses)
    inner.answer = b"{}"
    for name in ("light", "next"):
        inner.expect(name)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, app, scope("light", "L"), statuses)
            await inner.arrived["light"].wait()
            tg.start_soon(call, app, scope("next", "S"), statuses)  # a small body, but S answered big
            await anyio.wait_all_tasks_blocked()
            assert "next" not in inner.started
            inner.gates["light"].set()
            await inner.arrived["next"].wait()
            inner.gates["next"].set()
    assert "s:S" not in app._clients  # small again: forgotten


def test_clients_are_told_apart_by_session_episode_header_token_then_connection() -> None:
    base = {"type": "http", "client": ("10.0.0.1", 4242)}
    assert client_key({**base, "headers": [(b"mcp-session-id", b"abc")]}) == "s:abc"
    named = client_key({**base, "headers": [(b"x-mcp-resili-episode", b"ep")]})
    token = client_key({**base, "headers": [(b"authorization", b"Bearer t")]})
    assert named.startswith("e:") and token.startswith("t:") and named != token
    assert client_key({**base, "headers": []}) == "c:10.0.0.1:4242"


SUITE = get_suite("resilibench")


async def test_large_arguments_are_measured_and_checked_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[int] = []
    check = pipeline._argument_problem

    def recording(*args: Any) -> str | None:
        seen.append(threading.get_ident())
        return check(*args)

    monkeypatch.setattr(pipeline, "_argument_problem", recording)
    server = ResiliServer(SUITE, parse_fault_spec("none"))
    loop_thread = threading.get_ident()
    async with Client(server.mcp) as client:
        small = await client.call_tool(
            "utility_logger", {"data": {"message": "hi"}}, meta={META_EPISODE: "e"}
        )
        big = {"data": {"records": [{"id": "x"}] * 30_000}}  # ~300 kB, every item wrong
        refused = await client.call_tool("data_processing_validator", big, meta={META_EPISODE: "e"})
    assert not small.is_error and refused.is_error and "INVALID_INPUT" in refused.content[0].text
    assert seen[0] == loop_thread and seen[1] != loop_thread


async def test_the_runners_own_calls_are_measured_without_the_walk_and_big_ones_still_checked_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A remote client's arguments are walked before they are encoded; the runner's in-process ones not."""
    walked: list[int] = []
    checked: list[int] = []
    walk, check = pipeline.larger_than, pipeline._argument_problem

    def counting_walk(value: Any, limit: int) -> bool:
        walked.append(limit)
        return walk(value, limit)

    def recording(*args: Any) -> str | None:
        checked.append(threading.get_ident())
        return check(*args)

    monkeypatch.setattr(pipeline, "larger_than", counting_walk)
    monkeypatch.setattr(pipeline, "_argument_problem", recording)
    server = ResiliServer(SUITE, parse_fault_spec("none"))
    loop_thread = threading.get_ident()
    big = {"data": {"records": [{"id": "x"}] * 30_000}}  # ~300 kB, every item wrong
    without_idle_tracing(server.mcp)  # as the runner serves it: our answer is its only middleware
    answer = functools.partial(direct_on_request, server)
    async with InProcessClient(server.mcp, on_request=answer) as client:
        small = await client.call_tool(
            "utility_logger", {"data": {"message": "hi"}}, meta={META_EPISODE: "e"}
        )
        refused = await client.call_tool("data_processing_validator", big, meta={META_EPISODE: "e"})
    assert not small.is_error and refused.is_error and "INVALID_INPUT" in refused.content[0].text
    assert walked == []  # both measured by their encoding
    assert checked[0] == loop_thread and checked[1] != loop_thread  # the big one still checked off the loop
    async with Client(server.mcp) as remote:  # the SDK's own hop: a request the runner did not build
        await remote.call_tool("utility_logger", {"data": {"message": "hi"}}, meta={META_EPISODE: "f"})
    assert walked == [pipeline.OFF_LOOP_BYTES]


def test_explaining_invalid_arguments_gathers_a_bounded_number_of_problems() -> None:
    schema = compiled({"type": "array", "items": {"type": "integer"}})
    consumed = 0
    iter_errors = schema.iter_errors

    def counting(instance: Any) -> Any:
        nonlocal consumed
        for error in iter_errors(instance):
            consumed += 1
            yield error

    schema.iter_errors = counting  # type: ignore[method-assign]
    problems = argument_problems(schema, ["x"] * 50_000)
    assert problems is not None and problems.startswith("0: 'x' is not of type 'integer'")
    assert consumed == GATHERED_PROBLEMS


def _slow_library(release: threading.Event) -> ToolLibrary:
    spec = ToolSpec(name="slow", description="waits", input_schema={"type": "object"})
    big = ToolSpec(
        name="big",
        description="answers n bytes",
        input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
    )

    def slow(args: Any, state: Any) -> dict[str, Any]:
        release.wait(10)
        return {"ok": True}

    def answer(args: Any, state: Any) -> dict[str, Any]:
        return {"text": "y" * int(args.get("n", 1))}

    return ToolLibrary("t", (spec, big), {"slow": slow, "big": answer})


async def test_an_episode_with_too_many_calls_waiting_is_refused_at_once_and_the_rest_run() -> None:
    import dataclasses

    release = threading.Event()
    suite = dataclasses.replace(SUITE, name="t", library=_slow_library(release), dependency_gate=None)
    server = ResiliServer(suite, parse_fault_spec("none"), call_time_limit=30)
    results: list[Any] = []
    meta = {META_EPISODE: "busy"}
    total = pipeline.MAX_WAITING_CALLS + 4
    refused_all = anyio.Event()
    with anyio.fail_after(20):
        async with Client(server.mcp) as client, anyio.create_task_group() as tg:

            async def one() -> None:
                results.append(await client.call_tool("slow", {}, meta=meta))
                if len(results) == 3:  # one runs, MAX_WAITING_CALLS wait: the other 3 are refused
                    refused_all.set()

            for _ in range(total):
                tg.start_soon(one)
            await refused_all.wait()
            release.set()
    busy = [r for r in results if r.is_error]
    assert len(busy) == total - 1 - pipeline.MAX_WAITING_CALLS
    assert all(EPISODE_BUSY in r.content[0].text for r in busy)
    assert sum(not r.is_error for r in results) == 1 + pipeline.MAX_WAITING_CALLS


async def test_a_result_over_the_limit_is_not_sent_and_says_so() -> None:
    import dataclasses

    suite = dataclasses.replace(
        SUITE, name="t", library=_slow_library(threading.Event()), dependency_gate=None
    )
    server = ResiliServer(suite, parse_fault_spec("none"), memory=MemoryBudget(result_bytes=10_000))
    async with Client(server.mcp) as client:
        fits = await client.call_tool("big", {"n": 9_000}, meta={META_EPISODE: "r"})
        over = await client.call_tool("big", {"n": 20_000}, meta={META_EPISODE: "r"})
    assert not fits.is_error
    assert (
        over.is_error
        and RESULT_TOO_LARGE in over.content[0].text
        and "--max-result-memory" in over.content[0].text
    )
    calls = server.take_events("r")
    assert [c.error_code for c in calls] == [None, RESULT_TOO_LARGE]  # type: ignore[union-attr]
