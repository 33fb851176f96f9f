"""`InProcessClient`: the runner's in-process connection answers exactly as the SDK's own does.

Every check runs the same requests through ``mcp.Client(server)`` (the SDK's direct dispatcher) and
through `InProcessClient(server)`, and compares what came back: results, errors (code and message),
timeouts, notifications, progress reports and cancellation.
"""

from __future__ import annotations

import copy
from typing import Any

import anyio
import mcp.server.runner as mcp_runner
import mcp_types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client, MCPError
from mcp.server import Server, ServerRequestContext
from pydantic import BaseModel
from tiny_suite import suite as tiny_suite

import mcp_resili.client.session as runner_session
from mcp_resili.client.inprocess import InProcessClient, InProcessDispatcher
from mcp_resili.client.plan import RunConfig
from mcp_resili.client.runner import execute
from mcp_resili.constants import META_EPISODE
from mcp_resili.faults import parse_fault_spec
from mcp_resili.server.app import ResiliServer

pytestmark = pytest.mark.anyio

CLIENTS = [Client, InProcessClient]


class _Strict(BaseModel):
    count: int


def probe_server(cancelled: list[str]) -> Server[Any]:
    """A server whose tools answer, fail in each way a handler can, talk back, or never answer."""
    tools = [
        types.Tool(name=name, input_schema={"type": "object"})
        for name in ("echo", "crash", "refuse", "invalid", "chatty", "forever")
    ]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = params.arguments or {}
        if params.name == "crash":
            raise RuntimeError("a secret the wire must not show")
        if params.name == "refuse":
            raise MCPError(code=-32001, message="refused on purpose", data={"why": "test"})
        if params.name == "invalid":
            _Strict.model_validate({"count": "many"})
        if params.name == "chatty":
            await ctx.session.report_progress(1, 2, "half way")
            await ctx.session.send_notification(
                types.ToolListChangedNotification(params=types.NotificationParams(_meta={"who": "chatty"})),
                related_request_id=ctx.request_id,
            )
        if params.name == "forever":
            try:
                await anyio.Event().wait()
            finally:
                cancelled.append("forever")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"{params.name}: {arguments}")],
            structured_content={"name": params.name, "arguments": arguments},
        )

    return Server("probe", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def outcome(client: Client, tool: str, **options: Any) -> Any:
    """What a call came back with: the result's dump, or the error's code, message and data."""
    try:
        result = await client.call_tool(tool, {"n": 1}, **options)
    except MCPError as exc:
        return ("error", exc.error.code, exc.error.message, exc.error.data)
    return result.model_dump(mode="json", by_alias=True)


@pytest.mark.parametrize("raise_exceptions", [False, True])
async def test_results_and_every_kind_of_handler_failure_come_back_as_over_the_sdks_path(
    raise_exceptions: bool,
) -> None:
    seen: dict[type[Client], list[Any]] = {}
    for kind in CLIENTS:
        async with kind(probe_server([]), raise_exceptions=raise_exceptions) as client:
            listed = (await client.list_tools()).model_dump(mode="json", by_alias=True)
            seen[kind] = [listed] + [
                await outcome(client, tool) for tool in ("echo", "crash", "refuse", "invalid", "nope")
            ]
    assert seen[InProcessClient] == seen[Client]
    crash = seen[InProcessClient][2]
    assert crash[:2] == ("error", types.INTERNAL_ERROR)
    # The handler's own words reach the caller only when it asked for them.
    assert ("secret" in crash[2]) is raise_exceptions
    assert seen[InProcessClient][3] == ("error", -32001, "refused on purpose", {"why": "test"})
    assert seen[InProcessClient][4][:3] == ("error", types.INVALID_PARAMS, "Invalid request parameters")


async def test_a_call_that_outlasts_its_timeout_fails_as_a_timeout_and_its_handler_is_cancelled() -> None:
    seen: dict[type[Client], Any] = {}
    for kind in CLIENTS:
        cancelled: list[str] = []
        async with kind(probe_server(cancelled)) as client:
            with anyio.move_on_after(30) as guard:  # a timeout that never fires fails here, not hangs
                seen[kind] = await outcome(client, "forever", read_timeout_seconds=0.05)
            assert not guard.cancelled_caught, f"{kind.__name__}: the call's own timeout never fired"
            assert (await outcome(client, "echo"))["structuredContent"]["name"] == "echo"  # still serving
        assert cancelled == ["forever"]
    assert seen[InProcessClient] == seen[Client]
    assert seen[InProcessClient][:2] == ("error", types.REQUEST_TIMEOUT)


async def test_cancelling_the_caller_cancels_the_handler_and_the_client_keeps_serving() -> None:
    for kind in CLIENTS:
        cancelled: list[str] = []
        async with kind(probe_server(cancelled)) as client:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(client.call_tool, "forever", {})
                    await anyio.wait_all_tasks_blocked()
                    scope.cancel()
            assert cancelled == ["forever"], kind
            assert (await outcome(client, "echo"))["structuredContent"]["name"] == "echo"


async def chatty_call(kind: type[Client]) -> tuple[list[Any], list[Any], Any]:
    """What the callbacks got during the ``chatty`` call (progress, messages), and its answer."""
    progress: list[Any] = []
    messages: list[Any] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def on_message(message: Any) -> None:
        messages.append(
            message.model_dump(mode="json", by_alias=True) if isinstance(message, BaseModel) else message
        )

    async with kind(probe_server([]), message_handler=on_message) as client:
        answer = await outcome(client, "chatty", progress_callback=on_progress)
    return progress, messages, answer


async def test_progress_and_notifications_a_handler_sends_reach_the_clients_callbacks() -> None:
    assert await chatty_call(InProcessClient) == await chatty_call(Client)
    progress, messages, _ = await chatty_call(InProcessClient)
    assert progress == [(1, 2, "half way")]
    assert [m["method"] for m in messages] == ["notifications/tools/list_changed"]


async def test_the_runners_server_answers_a_faulted_episode_the_same_over_both_clients() -> None:
    """ResiliServer under the tiny suite's own failure model: same results, errors and recorded events."""
    suite = tiny_suite()
    task = suite.task("tiny-4")
    seen: dict[type[Client], list[Any]] = {}
    for kind in CLIENTS:
        server = ResiliServer(suite, parse_fault_spec("tiny", suite.spec_scope), seed=7)
        meta = {META_EPISODE: {"id": "ep-1", "task": task.id, "seed": 7}}
        look = ("lookup", {"key": task.inputs["key"]})
        say = ("echo", {"text": task.inputs["label"]})
        calls = [look, say] * 6 + [("lookup", {}), ("no_such_tool", {})]
        async with kind(server.mcp) as client:
            answers = [await client.call_tool(name, arguments, meta=meta) for name, arguments in calls]
            bad = await outcome(client, "finish")  # the finish tool without its arguments
        events = [e.model_dump(mode="json", by_alias=True) for e in server.take_events("ep-1")]
        seen[kind] = [[a.model_dump(mode="json", by_alias=True) for a in answers], bad, events]
    assert seen[InProcessClient] == seen[Client]
    answers, _, events = seen[InProcessClient]
    texts = [a["content"][0]["text"] for a in answers]
    assert sum(not a["isError"] for a in answers) >= 6  # real results
    assert any(t.startswith("Error ") and "INVALID_INPUT" not in t for t in texts[:12])  # injected faults
    assert "INVALID_INPUT" in texts[12] and "unknown tool" in texts[13]
    assert len(events) == len(answers)


async def test_the_runner_uses_the_lean_dispatcher_and_legacy_mode_keeps_the_sdks_streams() -> None:
    async with InProcessClient(probe_server([])) as client:
        assert isinstance(client.session._dispatcher, InProcessDispatcher)
        assert (await outcome(client, "echo"))["structuredContent"]["name"] == "echo"
    async with InProcessClient(probe_server([]), mode="legacy") as client:
        assert not isinstance(client.session._dispatcher, InProcessDispatcher)
        assert (await outcome(client, "echo"))["structuredContent"]["name"] == "echo"


@pytest.mark.parametrize(
    "meta",
    [None, {"mine": 1}, {"io.modelcontextprotocol/logLevel": "error", "x": 2}, {"progressToken": "t"}],
)
async def test_every_call_carries_the_sessions_own_stamp_on_its_meta(
    monkeypatch: pytest.MonkeyPatch, meta: dict[str, Any] | None
) -> None:
    """The envelope the lean hop adds is the one the session's stamp would add, key for key, in order."""
    sent: list[dict[str, Any]] = []
    send = InProcessDispatcher.send_raw_request

    async def recording(self: Any, method: str, params: Any, opts: Any = None, **kwargs: Any) -> Any:
        if method == "tools/call":
            sent.append(copy.deepcopy(params))  # as sent: a server may change its request in place
        return await send(self, method, params, opts, **kwargs)

    monkeypatch.setattr(InProcessDispatcher, "send_raw_request", recording)
    async with InProcessClient(probe_server([]), log_level="warning") as client:
        for arguments in ({"n": 1}, {"n": 2, "text": "other"}):
            await client.call_tool("echo", arguments, meta=meta)  # type: ignore[arg-type]
            expected = {"name": "echo", "arguments": arguments}
            if meta is not None:
                expected["_meta"] = dict(meta)
            client.session._stamp({"method": "tools/call", "params": expected}, {})
            assert list(sent[-1]["_meta"].items()) == list(expected["_meta"].items())
            assert sent[-1]["_meta"]["io.modelcontextprotocol/protocolVersion"]


async def test_a_dispatcher_refuses_requests_before_it_runs_and_once_it_is_closed() -> None:
    async def answer(ctx: Any, method: str, params: Any) -> dict[str, Any]:
        return {"method": method}

    async def ignore(ctx: Any, method: str, params: Any) -> None:
        return None

    dispatcher = InProcessDispatcher(answer)
    with pytest.raises(RuntimeError, match="before run"):
        await dispatcher.send_raw_request("ping", None)
    async with anyio.create_task_group() as tg:
        await tg.start(dispatcher.run, answer, ignore)
        assert await dispatcher.send_raw_request("ping", None) == {"method": "ping"}
        dispatcher.close()
    with pytest.raises(MCPError) as closed:
        await dispatcher.send_raw_request("ping", None)
    assert closed.value.error.code == types.CONNECTION_CLOSED
    with pytest.raises(RuntimeError, match="closed"):
        await dispatcher.run(answer, ignore)


def _sdk_client(server: Server[Any], *, on_request: Any = None, **options: Any) -> Client:
    """``mcp.Client`` where the runner builds its in-process client (which alone takes ``on_request``)."""
    return Client(server, **options)


def stored(result: Any) -> list[tuple[str, ...]]:
    """Every stored field of every episode, with the run id (which differs between runs) masked."""
    fields = ("episode_id", "termination", "label", "value", "score", "trace", "stop_rule")
    return sorted(
        tuple(str(getattr(row, f)).replace(result.run_id, "RUN") for f in fields) for row in result.rows
    )


@pytest.mark.parametrize(
    ("suite", "faults"),
    [
        ("tiny", "protocol:heavy+tiny"),
        # Each benchmark too: their own fault machinery (ResiliBench's failure model and discovery,
        # ToolMaze's deterministic faults, ReliabilityBench's chaos) crosses the hop differently.
        ("resilibench", "protocol:heavy+resilibench"),
        ("toolmaze", "toolmaze:P3"),
        ("reliabilitybench", "lambda=0.3"),
    ],
)
async def test_a_run_stores_the_same_episodes_over_the_lean_hop_as_over_the_sdks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, suite: str, faults: str
) -> None:
    def config(name: str) -> RunConfig:
        return RunConfig(
            suite=suite,
            models=("scripted:oracle", "scripted:naive"),
            faults=(faults,),
            trials=2,
            limit=4,
            time_scale=0.0,
            db=tmp_path / f"{name}.db",
        )

    lean = await execute(config("lean"))
    with monkeypatch.context() as patch:
        # The SDK's client, served by the SDK's kernel: no lean client, no direct answer.
        patch.setattr(runner_session, "InProcessClient", _sdk_client)
        sdk = await execute(config("sdk"))
    assert len(lean.rows) == 16
    assert stored(lean) == stored(sdk)
    assert {row.label for row in lean.rows} - {None}  # episodes were scored


@pytest.mark.parametrize(
    ("faults", "sdk_serves_calls"), [("toolmaze:P3", False), ("protocol:heavy+toolmaze:P3", True)]
)
async def test_the_runners_calls_skip_the_sdks_kernel_unless_a_middleware_must_see_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, faults: str, sdk_serves_calls: bool
) -> None:
    """The direct answer takes every ``tools/call`` of a plain run; the protocol-fault layer gets them all."""
    served: list[str] = []
    serve_one = mcp_runner.serve_one

    async def counting(server: Any, dctx: Any, method: str, params: Any, **kwargs: Any) -> Any:
        served.append(method)
        return await serve_one(server, dctx, method, params, **kwargs)

    monkeypatch.setattr(mcp_runner, "serve_one", counting)
    config = RunConfig(
        suite="toolmaze",
        models=("scripted:oracle",),
        faults=(faults,),
        limit=2,
        time_scale=0.0,
        db=tmp_path / "r.db",
    )
    result = await execute(config)
    assert result.rows and all(row.label is not None for row in result.rows)
    assert served  # the episodes' other requests (discovery, listing) still go the SDK's way
    assert ("tools/call" in served) is sdk_serves_calls


async def test_the_direct_answer_builds_a_session_only_for_a_call_that_talks_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The direct answer: no `Connection` for a quiet call; a log message still reaches the client."""
    from mcp.server.connection import Connection

    from mcp_resili.client.session import without_idle_tracing
    from mcp_resili.server.direct import direct_on_request

    built: list[Connection] = []
    original_init = Connection.__init__

    def counting_init(self: Connection, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(Connection, "__init__", counting_init)
    server = ResiliServer(tiny_suite(), parse_fault_spec("none"))
    without_idle_tracing(server.mcp)
    messages: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        messages.append(params.data)

    meta = {META_EPISODE: "quiet"}
    async with InProcessClient(
        server.mcp, on_request=lambda state: direct_on_request(server, state)
    ) as quiet:
        await quiet.call_tool("echo", {"text": "hi"}, meta=meta)  # lists the tools first (SDK path)
        before = len(built)
        result = await quiet.call_tool("echo", {"text": "hi"}, meta=meta)
        assert not result.is_error and len(built) == before  # nothing asked for the session
    async with InProcessClient(
        server.mcp,
        on_request=lambda state: direct_on_request(server, state),
        log_level="debug",
        logging_callback=on_log,
    ) as chatty:
        await chatty.call_tool("echo", {"text": "hi"}, meta={META_EPISODE: "chatty"})
        before = len(built)
        result = await chatty.call_tool("echo", {"text": "hi"}, meta={META_EPISODE: "chatty"})
        assert not result.is_error
    assert messages == [{"tool": "echo", "outcome": "ok"}] * 2
    assert len(built) == before + 1  # one session, for the one call that logged


async def test_a_request_meets_its_deadline_only_where_its_handler_waits() -> None:
    """No timer for an answer given without waiting; a wait past the deadline times out; the handler's
    own TimeoutError stays its own error."""
    waited: list[str] = []

    async def answer(ctx: Any, method: str, params: Any) -> dict[str, Any]:
        if method == "at_once":
            return {"answered": method}
        if method == "own_timeout":
            await anyio.sleep(0)
            raise TimeoutError("the handler's own")
        try:
            await anyio.sleep(0 if method == "brief" else 3600)
        except BaseException:
            waited.append(method)  # cancelled where it waited
            raise
        return {"answered": method}

    async def ignore(ctx: Any, method: str, params: Any) -> None:
        return None

    dispatcher = InProcessDispatcher(answer)
    async with anyio.create_task_group() as tg:
        await tg.start(dispatcher.run, answer, ignore)
        # A deadline already past: the answer that needs no wait still comes.
        assert await dispatcher.send_raw_request("at_once", None, {"timeout": 0}) == {"answered": "at_once"}
        assert await dispatcher.send_raw_request("brief", None, {"timeout": 60}) == {"answered": "brief"}
        for method, timeout in (("brief", 0), ("long", 0.01)):
            with anyio.fail_after(30):  # a deadline that never fires fails here, not hangs
                with pytest.raises(MCPError) as late:
                    await dispatcher.send_raw_request(method, None, {"timeout": timeout})
            assert late.value.error.code == types.REQUEST_TIMEOUT, method
        with pytest.raises(MCPError) as own:
            await dispatcher.send_raw_request("own_timeout", None, {"timeout": 60})
        assert own.value.error.code == types.INTERNAL_ERROR
        # The next request on the same task is not hit by a stale cancellation.
        assert await dispatcher.send_raw_request("brief", None, {"timeout": 60}) == {"answered": "brief"}
        dispatcher.close()
    assert waited == ["brief", "long"]


async def test_a_handlers_own_timeout_error_after_it_waited_is_not_taken_for_the_deadline() -> None:
    from mcp_resili.client.inprocess import timed_if_suspended

    async def raises_its_own() -> None:
        await anyio.sleep(0)
        raise TimeoutError("the handler's own")

    async def returns_after_waiting() -> str:
        await anyio.sleep(0)
        return "done"

    with pytest.raises(TimeoutError, match="the handler's own"):
        await timed_if_suspended(raises_its_own(), 60)
    assert await timed_if_suspended(returns_after_waiting(), 60) == "done"


_answers = st.fixed_dictionaries(
    {"content": st.just([{"type": "text", "text": "ok"}])},
    optional={
        "isError": st.one_of(st.booleans(), st.just("no")),
        "structuredContent": st.one_of(st.dictionaries(st.text(max_size=3), st.integers()), st.just(3)),
        "resultType": st.sampled_from(["complete", "input_required", "other"]),
        "_meta": st.one_of(st.just({"x": 1}), st.just(5)),
        "inputRequests": st.just({"r": {"method": "elicitation/create", "params": {}}}),
    },
) | st.just({"content": "not a list"})


@settings(max_examples=300, derandomize=True, deadline=None)
@given(raw=_answers)
def test_a_calls_answer_reads_as_the_sdks_adapter_reads_it(raw: dict[str, Any]) -> None:
    import mcp.client.session as sdk_session
    from pydantic import ValidationError

    from mcp_resili.client.inprocess import _call_result

    adapter = sdk_session._CallToolResultAdapter
    try:
        expected = adapter.validate_python(copy.deepcopy(raw), by_name=False)
    except ValidationError as exc:
        with pytest.raises(ValidationError) as ours:
            _call_result(adapter, copy.deepcopy(raw))
        assert str(ours.value) == str(exc)
        return
    got = _call_result(adapter, copy.deepcopy(raw))
    assert type(got) is type(expected) and got == expected
    assert got.model_fields_set == expected.model_fields_set
