"""`mcp-resili llm-proxy`: every model-API fault as the real openai and anthropic SDKs meet it.

The gateway sits in front of the scripted model server on loopback; each fault is shown streamed and
whole. Delays are scaled (``time_scale``) and, where a test must see what happens while one lasts,
waited on a sleeper the test controls: nothing here sleeps or reads a clock.
"""

import contextlib
import json
import logging
import re

import anthropic
import anyio
import httpx2
import openai
import pytest
from llm_support import anthropic_client, gateway, model_server, openai_client, serving
from servers import REPO_ROOT

from mcp_resili.constants import EPISODE_HEADER
from mcp_resili.faults.base import FaultSpecError
from mcp_resili.faults.model_api import MODEL_FAULT_PROFILES, parse_model_fault_spec
from mcp_resili.modelapi import TRACE_SUFFIX, read_model_events
from mcp_resili.modelapi.gateway import SLOW_PIECES, TOKEN_HEADER
from mcp_resili.modelserver import ModelServer
from mcp_resili.registry.loader import get_suite
from mcp_resili.trace import ModelFaultEvent, event_from_dict
from mcp_resili.trace.model import trace_stem

pytestmark = pytest.mark.anyio
SCALE = 0.001
COMBINATIONS = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]


def prompt_and_tools():
    suite = get_suite("resilibench")
    prompt = suite.prompt(suite.default_tasks[0])
    openai_tools = [
        {"type": "function", "function": {"name": t.name, "parameters": t.input_schema}}
        for t in suite.library
    ]
    anthropic_tools = [{"name": t.name, "input_schema": t.input_schema} for t in suite.library]
    return prompt, openai_tools, anthropic_tools


class Sleeps:
    """The gateway's sleeper: records each delay; with ``hold``, waits until the test releases it."""

    def __init__(self, hold=False):
        self.waits = []
        self.called = anyio.Event()
        self.release = anyio.Event()
        self.hold = hold

    async def __call__(self, seconds):
        self.waits.append(seconds)
        self.called.set()
        if self.hold:
            await self.release.wait()
        else:
            await anyio.lowlevel.checkpoint()


async def ask(url, api, stream, episode=None, **options):
    """One model call through the SDK: the answer (a message, or the stream's items), or the error."""
    prompt, openai_tools, anthropic_tools = prompt_and_tools()
    headers = {EPISODE_HEADER: episode} if episode else {}
    messages = [{"role": "user", "content": prompt}]
    got = []
    try:
        if api == "openai":
            async with openai_client(url, default_headers=headers, **options) as client:
                reply = await client.chat.completions.create(
                    model="scripted:oracle", messages=messages, tools=openai_tools, stream=stream
                )
                if not stream:
                    return reply
                async for chunk in reply:
                    got.append(chunk)
                return got
        async with anthropic_client(url, default_headers=headers, **options) as client:
            reply = await client.messages.create(
                model="oracle", max_tokens=1000, messages=messages, tools=anthropic_tools, stream=stream
            )
            if not stream:
                return reply
            async for event in reply:
                got.append(event)
            return got
    except Exception as exc:
        exc.received = got
        return exc


def arguments_of(api, stream, answer):
    """The first tool call's arguments as the client received them (text; Anthropic whole: its input)."""
    if not stream:
        if api == "openai":
            return answer.choices[0].message.tool_calls[0].function.arguments
        return next(b.input for b in answer.content if b.type == "tool_use")
    if api == "openai":
        return "".join(
            c.choices[0].delta.tool_calls[0].function.arguments or ""
            for c in answer
            if c.choices and c.choices[0].delta.tool_calls
        )
    return "".join(e.delta.partial_json for e in answer if e.type == "content_block_delta")


def events_in(directory):
    found = {}
    for path in sorted(directory.glob(f"*{TRACE_SUFFIX}")):
        found[path.name[: -len(TRACE_SUFFIX)]] = read_model_events(path)
    return found


async def test_rate_limits_with_retry_after_reach_the_sdk_which_waits_what_they_say(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="openai")
    caplog.set_level(logging.INFO, logger="anthropic")
    rule = {"calls": [1], "fault": {"type": "rate_limit", "retry_after": 2.0}}
    async with (
        serving(model_server().app) as up,
        gateway(up, rule, trace_dir=tmp_path, time_scale=SCALE) as url,
    ):
        for api, stream in COMBINATIONS:
            refused = await ask(url, api, stream, episode=f"once-{api}-{stream}")
            assert isinstance(refused, openai.RateLimitError | anthropic.RateLimitError), refused
            assert refused.response.headers["retry-after-ms"] == "2"
            assert refused.response.headers["retry-after"] == "0.002"
            retried = await ask(url, api, stream, episode=f"retry-{api}-{stream}", max_retries=2)
            assert not isinstance(retried, Exception), retried
    waits = [r.getMessage() for r in caplog.records if "Retrying request" in r.getMessage()]
    assert len(waits) == 4 and all(" in 0.002000 seconds" in w for w in waits), waits
    traces = events_in(tmp_path)
    assert [e.decision.fault.type if e.decision.fault else None for e in traces["retry-openai-True"]] == [
        "rate_limit",
        None,
    ]
    assert [e.status for e in traces["retry-anthropic-False"]] == [429, 200]
    body = json.loads(refused.response.text)
    assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"


async def test_rate_limits_without_retry_after_have_no_such_header_and_each_apis_body(tmp_path):
    async with serving(model_server().app) as up, gateway(up, {"fault": {"type": "rate_limit"}}) as url:
        for api, stream in COMBINATIONS:
            refused = await ask(url, api, stream)
            assert isinstance(refused, openai.RateLimitError | anthropic.RateLimitError)
            assert "retry-after" not in refused.response.headers
            if api == "openai":
                assert refused.code == "rate_limit_exceeded" and refused.response.headers["x-request-id"]
            else:
                assert (
                    refused.body["error"]["type"] == "rate_limit_error"
                    and refused.response.headers["request-id"]
                )


@pytest.mark.parametrize(
    ("status", "anthropic_error", "anthropic_type"),
    [
        (500, anthropic.InternalServerError, "api_error"),
        (502, anthropic.InternalServerError, "api_error"),
        (503, anthropic.ServiceUnavailableError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
async def test_server_errors_are_each_apis_own(status, anthropic_error, anthropic_type):
    async with (
        serving(model_server().app) as up,
        gateway(up, {"fault": {"type": "server_error", "status": status}}) as url,
    ):
        for api, stream in COMBINATIONS:
            failed = await ask(url, api, stream)
            if api == "openai":
                assert isinstance(failed, openai.InternalServerError) and failed.status_code == status
                assert failed.body["message"]
            else:
                assert isinstance(failed, anthropic_error) and failed.status_code == status
                assert failed.body["error"]["type"] == anthropic_type


async def test_context_length_and_content_filter_are_400s_naming_what_happened():
    rules = [
        {"calls": [1], "fault": {"type": "context_length", "limit": 1000}},
        {"calls": [2], "fault": {"type": "content_filter"}},
    ]
    async with serving(model_server().app) as up, gateway(up, *rules) as url:
        for api, stream in COMBINATIONS:
            too_long = await ask(url, api, stream, episode=f"c-{api}-{stream}")
            filtered = await ask(url, api, stream, episode=f"c-{api}-{stream}")
            assert isinstance(too_long, openai.BadRequestError | anthropic.BadRequestError)
            assert isinstance(filtered, openai.BadRequestError | anthropic.BadRequestError)
            if api == "openai":
                assert (
                    too_long.code == "context_length_exceeded"
                    and "maximum context length is 1000" in too_long.message
                )
                assert filtered.code == "content_filter"
            else:
                assert too_long.body["error"]["message"].startswith("prompt is too long:")
                assert "> 1000 maximum" in too_long.body["error"]["message"]
                assert filtered.body["error"]["message"] == "Output blocked by content filtering policy"


async def test_a_connection_reset_is_a_connection_error_and_the_upstream_is_never_called(tmp_path):
    async with (
        serving(model_server().app) as up,
        gateway(up, {"fault": {"type": "connection_reset"}}, trace_dir=tmp_path) as url,
    ):
        for api, stream in COMBINATIONS:
            failed = await ask(url, api, stream, episode="reset")
            assert isinstance(failed, openai.APIConnectionError | anthropic.APIConnectionError), failed
            assert not isinstance(failed, openai.APITimeoutError | anthropic.APITimeoutError)
    events = events_in(tmp_path)["reset"]
    assert [(e.status, e.upstream_status) for e in events] == [(None, None)] * 4


async def test_a_hang_lasts_until_the_client_gives_up_or_its_time_is_over(tmp_path):
    sleeps = Sleeps(hold=True)
    rules = [
        {"calls": [1], "fault": {"type": "hang"}},
        {"calls": [2], "fault": {"type": "hang", "seconds": 30.0}},
    ]
    async with (
        serving(model_server().app) as up,
        gateway(up, *rules, trace_dir=tmp_path, sleep=sleeps) as url,
    ):
        for api, stream in (("openai", False), ("anthropic", True)):
            gave_up = await ask(url, api, stream, episode=f"h-{api}", timeout=0.3)
            assert isinstance(gave_up, openai.APITimeoutError | anthropic.APITimeoutError), gave_up
        async with anyio.create_task_group() as group:
            answers = []

            async def second_call():
                answers.append(await ask(url, "openai", True, episode="h-openai"))

            group.start_soon(second_call)
            with anyio.fail_after(10):
                await sleeps.called.wait()
            assert answers == []  # held by the hang, which waits its (scaled) time
            sleeps.release.set()
    assert sleeps.waits == [30.0 * SCALE]
    assert arguments_of("openai", True, answers[0]).startswith("{")
    events = events_in(tmp_path)
    assert [e.detail for e in events["h-openai"]] == [
        "the client gave up waiting for headers",
        "answered after the hang",
    ]
    assert events["h-anthropic"][0].status is None


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_slow_first_token_sends_the_headers_at_once_and_the_first_event_after_the_delay(api):
    sleeps = Sleeps(hold=True)
    prompt, openai_tools, anthropic_tools = prompt_and_tools()
    messages = [{"role": "user", "content": prompt}]
    async with (
        serving(model_server().app) as up,
        gateway(up, {"fault": {"type": "slow_first_token", "seconds": 5.0}}, sleep=sleeps) as url,
    ):
        if api == "openai":
            async with openai_client(url) as client:
                events = await client.chat.completions.create(
                    model="oracle", messages=messages, tools=openai_tools, stream=True
                )
                # The SDK has the response (headers came) while the gateway still holds the first event.
                with anyio.fail_after(10):
                    await sleeps.called.wait()
                sleeps.release.set()
                got = [chunk async for chunk in events]
        else:
            async with anthropic_client(url) as client:
                events = await client.messages.create(
                    model="oracle", max_tokens=100, messages=messages, tools=anthropic_tools, stream=True
                )
                with anyio.fail_after(10):
                    await sleeps.called.wait()
                sleeps.release.set()
                got = [event async for event in events]
        whole = await ask(url, api, False)
    assert sleeps.waits == [5.0 * SCALE, 5.0 * SCALE]  # the stream's first event, then the whole answer
    assert json.loads(arguments_of(api, True, got)) == (
        json.loads(arguments_of(api, False, whole)) if api == "openai" else arguments_of(api, False, whole)
    )


async def test_slow_tokens_delay_every_event_of_a_stream_and_every_piece_of_a_whole_answer():
    sleeps = Sleeps()
    async with (
        serving(model_server().app) as up,
        gateway(up, {"fault": {"type": "slow_tokens", "seconds": 0.5}}, sleep=sleeps) as url,
    ):
        async with httpx2.AsyncClient() as raw:
            direct = await raw.post(
                f"{up}/v1/chat/completions",
                json={
                    "model": "oracle",
                    "messages": [{"role": "user", "content": prompt_and_tools()[0]}],
                    "stream": True,
                },
            )
        streamed = await ask(url, "openai", True)
        assert len(sleeps.waits) == direct.text.count("\n\n")  # one per event, [DONE] included
        before = len(sleeps.waits)
        whole = await ask(url, "anthropic", False)
    assert json.loads(arguments_of("openai", True, streamed)) == arguments_of("anthropic", False, whole)
    assert len(sleeps.waits) - before == SLOW_PIECES
    assert set(sleeps.waits) == {0.5 * SCALE}


async def test_a_stream_cut_mid_event_ends_the_answer_with_a_connection_error_after_whole_events():
    async with (
        serving(model_server().app) as up,
        gateway(up, {"fault": {"type": "stream_cut", "at": "mid_event", "after_events": 2}}) as url,
    ):
        for api, stream in COMBINATIONS:
            failed = await ask(url, api, stream)
            # The Anthropic SDK lets the transport's own error through a raw stream.
            assert isinstance(
                failed, openai.APIConnectionError | anthropic.APIConnectionError | httpx2.RemoteProtocolError
            )
            if stream:
                # Two whole events arrived, then the cut (Anthropic's SDK does not pass its ping on).
                assert len(failed.received) == (2 if api == "openai" else 1), failed.received


async def test_a_stream_cut_mid_tool_call_leaves_the_call_with_part_of_its_arguments():
    async with (
        serving(model_server().app) as up,
        gateway(up, {"fault": {"type": "stream_cut", "at": "mid_tool_call"}}) as url,
    ):
        for api, stream in COMBINATIONS:
            failed = await ask(url, api, stream)
            assert isinstance(
                failed, openai.APIConnectionError | anthropic.APIConnectionError | httpx2.RemoteProtocolError
            )
            if stream:
                partial = arguments_of(api, True, failed.received)
                assert partial.startswith('{"') and not partial.endswith("}")


async def test_a_malformed_event_is_a_json_error_in_the_sdk_and_a_whole_answer_is_not_json():
    async with (
        serving(model_server().app) as up,
        gateway(up, {"fault": {"type": "malformed_sse", "after_events": 1}}) as url,
    ):
        for api, stream in COMBINATIONS:
            failed = await ask(url, api, stream)
            assert isinstance(failed, json.JSONDecodeError), failed
            if stream:
                assert len(failed.received) == 1


@pytest.mark.parametrize("mode", ["truncated", "invalid"])
async def test_tool_call_arguments_arrive_truncated_or_invalid(mode):
    async with serving(model_server().app) as up:
        intact = {api: arguments_of(api, False, await ask(up, api, False)) for api in ("openai", "anthropic")}
        async with gateway(up, {"fault": {"type": "tool_arguments", "mode": mode}}) as url:
            for api, stream in COMBINATIONS:
                answer = await ask(url, api, stream)
                arguments = arguments_of(api, stream, answer)
                if api == "anthropic" and not stream:
                    # A whole answer's input: what a partial-JSON reader makes of the cut text, or the text.
                    if mode == "truncated":
                        assert isinstance(arguments, dict) and arguments != intact["anthropic"]
                    else:
                        assert isinstance(arguments, str) and arguments.endswith(",}")
                    continue
                with pytest.raises(json.JSONDecodeError):
                    json.loads(arguments)
                whole = json.dumps(intact["anthropic"]) if api == "anthropic" else intact["openai"]
                if mode == "truncated":
                    assert arguments == whole[: len(whole) // 2]


async def test_an_empty_completion_has_no_text_and_no_tool_call():
    async with serving(model_server().app) as up, gateway(up, {"fault": {"type": "empty_completion"}}) as url:
        for api, stream in COMBINATIONS:
            answer = await ask(url, api, stream)
            if api == "openai" and not stream:
                assert answer.choices[0].message.content is None and not answer.choices[0].message.tool_calls
                assert answer.choices[0].finish_reason == "stop"
            elif api == "openai":
                assert [c.choices[0].finish_reason for c in answer] == [None, "stop"]
            elif not stream:
                assert answer.content == [] and answer.stop_reason == "end_turn"
            else:
                assert [e.type for e in answer] == ["message_start", "message_delta", "message_stop"]


async def test_out_of_tokens_answers_stop_at_length_or_max_tokens():
    async with (
        serving(model_server().app) as up,
        gateway(up, {"fault": {"type": "max_tokens", "keep_chars": 5}}) as url,
    ):
        for api, stream in COMBINATIONS:
            answer = await ask(url, api, stream)
            arguments = arguments_of(api, stream, answer)
            if api == "openai":
                finish = (
                    answer.choices[0].finish_reason if not stream else answer[-1].choices[0].finish_reason
                )
                assert finish == "length" and arguments == '{"sou'
            else:
                stop = (
                    answer.stop_reason
                    if not stream
                    else next(e.delta.stop_reason for e in answer if e.type == "message_delta")
                )
                assert stop == "max_tokens"
                assert arguments == ({} if not stream else '{"sou')


async def test_same_seed_same_decisions_whatever_the_concurrency_and_another_seed_others(tmp_path):
    prompt = prompt_and_tools()[0]
    # The heavy profile, eight times as likely: most fault types fire within a few dozen calls.
    heavy = [
        {**rule, "probability": min(1.0, rule["probability"] * 8)} for rule in MODEL_FAULT_PROFILES["heavy"]
    ]

    async def run(upstream, directory, seed, concurrent):
        settings = {"trace_dir": directory, "seed": seed, "time_scale": 0}
        async with gateway(upstream, *heavy, **settings) as url, httpx2.AsyncClient(timeout=10) as client:

            async def episode(name):
                body = {"model": "oracle", "messages": [{"role": "user", "content": prompt}]}
                body["stream"] = name.endswith("s")
                headers = {EPISODE_HEADER: name}
                for _ in range(12):
                    # A reset or a cut fails the call: the decision is what this test compares.
                    with contextlib.suppress(httpx2.HTTPError):
                        await client.post(f"{url}/v1/chat/completions", json=body, headers=headers)

            if concurrent:
                async with anyio.create_task_group() as group:
                    for name in ("ep-a", "ep-bs", "ep-c"):
                        group.start_soon(episode, name)
            else:
                for name in ("ep-a", "ep-bs", "ep-c"):
                    await episode(name)
        return {name: [e.decision for e in events] for name, events in events_in(directory).items()}

    async with serving(model_server().app) as up:
        first = await run(up, tmp_path / "a", 5, concurrent=False)
        again = await run(up, tmp_path / "b", 5, concurrent=True)
        other = await run(up, tmp_path / "c", 6, concurrent=False)
    assert first == again
    assert first != other
    fired = [d.fault.type for decisions in first.values() for d in decisions if d.fault is not None]
    assert len(set(fired)) >= 4, fired
    assert all(len(decisions) == 12 for decisions in first.values())


async def test_decisions_are_trace_events_with_the_episode_header_forms_and_per_client_keys(tmp_path):
    rule = {"calls": [2], "fault": {"type": "server_error", "status": 500}}
    task = get_suite("resilibench").default_tasks[0].id
    named = json.dumps({"id": "run1/t1/0", "task": task, "trial": 0, "seed": 9})
    async with serving(model_server().app) as up, gateway(up, rule, trace_dir=tmp_path) as url:
        for _ in range(2):
            await ask(url, "openai", False, episode=named)
            await ask(url, "anthropic", True, api_key="sk-alice-0000000000000000")
            await ask(url, "anthropic", True, api_key="sk-bob-00000000000000000000")
        refused = await ask(url, "openai", False, episode="{not json")
    assert isinstance(refused, openai.BadRequestError) and EPISODE_HEADER in refused.message
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(
        f"{stem}{TRACE_SUFFIX}" for stem in ("client-1", "client-2", trace_stem("run1/t1/0"))
    )
    for path in tmp_path.iterdir():
        lines = path.read_text().splitlines()
        events = [event_from_dict(json.loads(line)) for line in lines]  # the trace's own event union
        assert all(isinstance(e, ModelFaultEvent) for e in events)
        assert [e.ordinal for e in events] == [0, 1]
        assert [e.status for e in events] == [200, 500]
        assert events[1].decision.rule == 0 and events[1].decision.roll is not None
        text = path.read_text()
        assert "sk-alice" not in text and "sk-bob" not in text and "sk-placeholder" not in text


async def test_the_callers_key_reaches_the_upstream_untouched_and_the_gateways_token_does_not(
    tmp_path, caplog
):
    caplog.set_level(logging.DEBUG)
    seen = []

    async def upstream(scope, receive, send):
        if scope["type"] != "http":
            return
        seen.append(dict((k.decode(), v.decode()) for k, v in scope["headers"]))
        body = b'{"object":"list","data":[]}'
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    token = "gateway-token-0123456789"
    async with (
        serving(upstream) as up,
        gateway(up, trace_dir=tmp_path, token=token) as url,
        httpx2.AsyncClient() as raw,
    ):
        refused = await raw.get(f"{url}/v1/models", headers={"authorization": "Bearer sk-secret-key-1"})
        passed = await raw.get(
            f"{url}/v1/models",
            headers={
                "authorization": "Bearer sk-secret-key-1",
                TOKEN_HEADER: token,
                "x-api-key": "sk-ant-2",
            },
        )
    assert refused.status_code == 401 and refused.json()["error"]["message"].startswith(
        "send the gateway's token"
    )
    assert passed.status_code == 200 and passed.json() == {"object": "list", "data": []}
    assert len(seen) == 1
    assert seen[0]["authorization"] == "Bearer sk-secret-key-1" and seen[0]["x-api-key"] == "sk-ant-2"
    assert "x-mcp-resili-token" not in seen[0] and seen[0]["accept-encoding"] == "identity"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "sk-secret-key-1" not in logged and token not in logged


async def test_a_stream_passes_event_by_event_while_the_upstream_still_holds_the_rest():
    go_on = anyio.Event()
    first_sent = anyio.Event()

    async def upstream(scope, receive, send):
        if scope["type"] != "http":
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": b'data: {"n": 1}\n\n', "more_body": True})
        first_sent.set()
        await go_on.wait()
        await send({"type": "http.response.body", "body": b'data: {"n": 2}\n\ndata: [DONE]\n\n'})

    async with (
        serving(upstream) as up,
        gateway(up) as url,
        httpx2.AsyncClient() as raw,
        raw.stream("POST", f"{url}/v1/chat/completions", json={"model": "m", "stream": True}) as response,
    ):
        lines = response.aiter_lines()
        with anyio.fail_after(10):
            assert await anext(lines) == 'data: {"n": 1}'  # while the upstream holds the rest
        assert not go_on.is_set()
        go_on.set()
        rest = [line async for line in lines if line]
    assert rest == ['data: {"n": 2}', "data: [DONE]"]


async def test_upstream_failures_nobody_injected_are_the_apis_502_and_recorded_as_such(tmp_path):
    async with serving(model_server().app) as up:
        pass  # the upstream is gone: its port refuses connections now
    async with gateway(up, trace_dir=tmp_path) as url:
        failed = await ask(url, "anthropic", False, episode="gone")
    assert isinstance(failed, anthropic.InternalServerError) and failed.status_code == 502
    (event,) = events_in(tmp_path)["gone"]
    assert event.decision.fault is None and "not injected" in event.detail and event.status == 502


async def test_an_upstreams_own_error_passes_through_and_a_fault_then_is_not_applied(tmp_path):
    locked = ModelServer(model_server().index.suites, index=model_server().index, token="k" * 20)
    async with (
        serving(locked.app) as up,
        gateway(up, {"fault": {"type": "max_tokens"}}, trace_dir=tmp_path) as url,
    ):
        failed = await ask(url, "openai", False, episode="locked")
    assert isinstance(failed, openai.AuthenticationError) and failed.code == "invalid_api_key"
    (event,) = events_in(tmp_path)["locked"]
    assert (
        event.decision.fault.type == "max_tokens" and event.detail == "not applied: the upstream answered 401"
    )


async def test_a_client_that_leaves_mid_stream_ends_the_upstreams_answer_too(tmp_path):
    upstream_left = anyio.Event()

    async def upstream(scope, receive, send):
        if scope["type"] != "http":
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": b'data: {"n": 1}\n\n', "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        upstream_left.set()

    async with serving(upstream) as up, gateway(up, trace_dir=tmp_path) as url:
        async with httpx2.AsyncClient() as raw:
            body = {"model": "m", "stream": True}
            headers = {EPISODE_HEADER: "leaving"}
            async with raw.stream(
                "POST", f"{url}/v1/chat/completions", json=body, headers=headers
            ) as response:
                with anyio.fail_after(10):
                    assert await anext(response.aiter_lines()) == 'data: {"n": 1}'
        with anyio.fail_after(10):
            await upstream_left.wait()
        with anyio.fail_after(10):
            while not (tmp_path / f"leaving{TRACE_SUFFIX}").exists():
                await anyio.lowlevel.checkpoint()  # the gateway records the call as it ends
    (event,) = events_in(tmp_path)["leaving"]
    assert event.detail == "the client went away mid-answer" and event.status == 200


async def test_a_body_that_is_no_json_object_passes_undecided_and_only_top_level_fields_decide(tmp_path):
    received = []

    async def upstream(scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        received.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"x")]})
        await send({"type": "http.response.body", "body": b"{}"})

    undecided = [b"[1, 2]", b'{"model": "m", "n": NaN}', b'{"model": "m"', b'{"a": 1} trailing']
    nested_only = b'{"model": 7, "stream": "yes", "messages": [{"stream": true, "model": "inner"}]}'
    top_level = b'{"messages": [{"stream": false}], "stream": true, "model": "m"}'
    rule = {"stream": True, "fault": {"type": "server_error", "status": 500}}
    headers = {EPISODE_HEADER: "odd"}
    async with (
        serving(upstream) as up,
        gateway(up, rule, trace_dir=tmp_path) as url,
        httpx2.AsyncClient() as raw,
    ):
        statuses = [
            (await raw.post(f"{url}/v1/chat/completions", content=body, headers=headers)).status_code
            for body in [*undecided, nested_only, top_level]
        ]
    assert statuses == [200] * 5 + [500]
    assert received == [*undecided, nested_only]  # forwarded byte for byte; the faulted one never
    whole, streamed = events_in(tmp_path)["odd"]
    assert (whole.ordinal, whole.stream, whole.model, whole.decision.fired) == (0, False, None, False)
    assert (streamed.ordinal, streamed.stream, streamed.model, streamed.status) == (1, True, "m", 500)


async def test_a_cookie_the_upstream_sets_for_one_client_never_reaches_it_with_another():
    cookies = []

    async def upstream(scope, receive, send):
        if scope["type"] != "http":
            return
        cookies.append(dict(scope["headers"]).get(b"cookie"))
        headers = [(b"content-type", b"application/json"), (b"set-cookie", b"session=alice; Path=/")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})

    async with serving(upstream) as up, gateway(up.replace("127.0.0.1", "localhost")) as url:
        for client in ("alice", "bob"):
            async with httpx2.AsyncClient() as raw:
                answer = await raw.post(f"{url}/v1/chat/completions", json={"model": client})
                assert answer.status_code == 200 and "session=alice" in answer.headers["set-cookie"]
    assert cookies == [None, None]


def test_profiles_and_fault_files_parse_and_a_wrong_one_is_one_line_naming_the_problem(tmp_path):
    assert parse_model_fault_spec("none").rules == () == parse_model_fault_spec("llm:none").rules
    medium = parse_model_fault_spec("llm:medium")
    assert medium.name == "llm:medium" and {r.fault.type for r in medium.rules} >= {
        "rate_limit",
        "stream_cut",
    }
    example = parse_model_fault_spec(str(REPO_ROOT / "examples" / "llm_faults.toml"))
    assert [r.fault.type for r in example.rules] == ["rate_limit", "server_error", "stream_cut", "max_tokens"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rules]]\ncalls = [0]\nfault = { type = "rate_limit" }\n')
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"rules": [{"fault": {"type": "meteor"}}]}')
    for spec, expected in (
        ("llm:apocalyptic", "unknown model-API fault profile 'apocalyptic'"),
        ("medium", "unknown model-API fault spec 'medium'"),
        (str(bad), "call numbers are 1-based"),
        (str(unknown), "rules[0].fault"),
        (str(tmp_path / "missing.toml"), "cannot read fault file"),
    ):
        with pytest.raises(FaultSpecError, match=re.escape(expected)) as caught:
            parse_model_fault_spec(spec)
        assert "\n" not in str(caught.value)
