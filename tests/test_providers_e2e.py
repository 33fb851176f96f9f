"""The real anthropic and openai SDK clients against a loopback fake model API, through our MCP server.

Every run plays the tiny suite (tests/tiny_suite), found by name through its entry point; the fake API's
oracle recognises its tasks by their prompts.
"""

import contextlib
import json
import re
from dataclasses import replace

import anyio
import pytest
from fakes.model_server import Failure, FakeModelServer, Reply, oracle_policy, serve
from servers import with_test_path

from mcp_resili.agents.model import ModelRequest, ToolDefinition, UserMessage
from mcp_resili.client.providers import RetryPolicy, create_model
from mcp_resili.client.runner import RunConfig, RunConfigError, estimate_run, execute
from mcp_resili.report import summarize
from mcp_resili.store import Store
from mcp_resili.trace import Trace
from mcp_resili.trace.model import ModelTurnEvent

pytestmark = pytest.mark.anyio
PROVIDERS = ["openai", "anthropic"]


def base_url(provider, url):
    return f"{url}/v1" if provider == "openai" else url


class Sleeps:
    """A sleeper that records the waits and returns at once (tests never wait)."""

    def __init__(self):
        self.waits = []

    async def __call__(self, seconds):
        self.waits.append(seconds)
        await anyio.lowlevel.checkpoint()


def outcomes(rows):
    """Per (task, trial): how the episode ended, its score, and its tool-call ledger."""
    out = {}
    for row in rows:
        trace = Trace.from_lines(row.trace.splitlines())
        ledger = [
            (
                c.tool,
                json.dumps(c.arguments, sort_keys=True),
                c.is_error,
                json.dumps(c.fault and c.fault.model_dump()),
            )
            for c in trace.tool_calls
        ]
        out[(row.task_id, row.trial)] = (row.termination, row.label, json.dumps(row.score), ledger)
    return out


async def run_hosted(tmp_path, model, url, sleeper=None, **config):
    """One trial per task of ``model`` at ``url``; retries wait on ``sleeper`` (a recorder), not the clock."""
    run = RunConfig(suite="tiny", db=tmp_path / "r.db", models=(model,), trials=1, base_url=url, **config)
    return await execute(run, model_options={"sleeper": sleeper or Sleeps()})


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_tool_calls_round_trip_through_the_real_sdk_and_our_mcp_server(tmp_path, provider):
    fake = FakeModelServer(oracle_policy())
    config = RunConfig(suite="tiny", db=tmp_path / "r.db", trials=2, limit=3, seed=4, concurrency=4)
    async with serve(fake.app) as url:
        hosted = await execute(
            replace(config, models=(f"{provider}:fake-1",), base_url=base_url(provider, url)),
            model_options={"sleeper": Sleeps()},
        )
    scripted = await execute(replace(config, models=("scripted:oracle",), db=tmp_path / "s.db"))
    # The oracle behind the API makes the same calls, meets the same faults and earns the same scores
    # as the in-process oracle: everything survived the trip through the SDK, the wire and back.
    assert outcomes(hosted.rows) == outcomes(scripted.rows)
    assert any(
        ledger and any(err for _, _, err, _ in ledger) for *_, ledger in outcomes(hosted.rows).values()
    )
    assert {e.api for e in fake.exchanges} == {provider}
    assert max(len(e.history) for e in fake.exchanges) >= 3
    assert all(r.input_tokens > 0 and r.output_tokens > 0 for r in hosted.rows)
    assert all(r.cost_usd is None for r in hosted.rows)  # no price for a fake model: tokens only


def every_third(status, headers=None):
    def failures(n):
        return Failure(status, headers or {}) if n % 3 == 1 else None

    return failures


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("status", "headers", "expected_wait"),
    [(429, {"retry-after-ms": "10"}, 0.01), (429, {"retry-after": "2"}, 2.0), (500, {}, 0.5)],
)
async def test_429_and_500_answers_are_retried(tmp_path, provider, status, headers, expected_wait):
    fake = FakeModelServer(oracle_policy(), failures=every_third(status, headers))
    sleeps = Sleeps()
    async with serve(fake.app) as url:
        result = await execute(
            RunConfig(
                suite="tiny",
                db=tmp_path / "r.db",
                models=(f"{provider}:fake",),
                trials=1,
                limit=2,
                faults=("none",),
                concurrency=1,
                base_url=base_url(provider, url),
            ),
            model_options={"sleeper": sleeps, "retry": RetryPolicy(max_attempts=3, base_delay=0.5)},
        )
    assert {r.label for r in result.rows} == {"full"}
    failed = fake.statuses.count(status)
    assert failed >= 2 and len(sleeps.waits) == failed
    assert set(sleeps.waits) == {expected_wait}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_provider_that_keeps_failing_yields_infrastructure_errors_not_agent_failures(
    tmp_path, provider
):
    fake = FakeModelServer(oracle_policy(), failures=lambda n: Failure(503))
    async with serve(fake.app) as url:
        result = await execute(
            RunConfig(
                suite="tiny",
                db=tmp_path / "r.db",
                models=(f"{provider}:fake",),
                trials=1,
                limit=3,
                base_url=base_url(provider, url),
            ),
            model_options={"sleeper": Sleeps(), "retry": RetryPolicy(max_attempts=3)},
        )
    assert {r.termination for r in result.rows} == {"infrastructure_error"}
    assert all(r.label is None and r.score is None for r in result.rows)
    (summary,) = summarize(result.rows)
    assert summary.infrastructure_errors == 3 and summary.scored == 0
    assert summary.levels["failure"].count == 0
    assert fake.requests == 9  # 3 attempts per episode, then the episode is void
    end = Trace.from_lines(result.rows[0].trace.splitlines()).end
    assert end is not None and "503" in end.detail


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_invalid_key_is_not_retried(tmp_path, provider):
    fake = FakeModelServer(oracle_policy(), failures=lambda n: Failure(401, message="invalid api key"))
    async with serve(fake.app) as url:
        result = await run_hosted(tmp_path, f"{provider}:fake", base_url(provider, url), limit=1)
    assert [r.termination for r in result.rows] == ["infrastructure_error"]
    assert fake.requests == 1


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_context_overflow_ends_the_episode_as_context_exceeded_and_is_scored(tmp_path, provider):
    overflow = Failure(
        400, message="This model's maximum context length is 8192 tokens", code="context_length_exceeded"
    )
    fake = FakeModelServer(oracle_policy(), failures=lambda n: overflow if n >= 3 else None)
    async with serve(fake.app) as url:
        result = await execute(
            RunConfig(
                suite="tiny",
                db=tmp_path / "r.db",
                models=(f"{provider}:fake",),
                trials=1,
                tasks=("tiny-3",),
                faults=("none",),
                base_url=base_url(provider, url),
            ),
            model_options={"sleeper": Sleeps()},
        )
    (row,) = result.rows
    assert row.termination == "context_exceeded"
    assert row.label is not None and row.label != "full"
    assert fake.requests == 3  # the overflow is the agent's outcome, never retried


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_dotted_and_long_mcp_tool_names_are_mapped_for_the_provider_and_back(provider):
    long_name = "warehouse.inventory." + "x" * 60
    names = ("files.read", "files_read", long_name)
    seen = []

    def call_every_tool(exchange):
        seen.append(exchange.tools)
        return Reply(calls=tuple((name, {"n": i}) for i, name in enumerate(exchange.tools)))

    fake = FakeModelServer(call_every_tool)
    async with serve(fake.app) as url:
        model = create_model(f"{provider}:fake", base_url=base_url(provider, url), sleeper=Sleeps())
        try:
            tools = tuple(ToolDefinition(n, "a tool", {"type": "object", "properties": {}}) for n in names)
            response = await model.generate(ModelRequest(messages=(UserMessage("go"),), tools=tools))
        finally:
            await model.aclose()
    (offered,) = seen
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in offered)
    assert len(set(offered)) == 3 and "files_read" in offered
    assert sorted(c.name for c in response.tool_calls) == sorted(names)


async def test_max_cost_stops_cleanly_and_a_resume_with_more_budget_completes_the_run(tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices."openai:fake"]\ninput = 1000.0\noutput = 1000.0\n')
    fake = FakeModelServer(oracle_policy())
    async with serve(fake.app) as url:
        config = RunConfig(
            suite="tiny",
            db=tmp_path / "r.db",
            models=("openai:fake",),
            trials=1,
            limit=6,
            faults=("none",),
            concurrency=1,
            base_url=f"{url}/v1",
            prices=prices,
            max_cost=1.0,
        )
        first = await execute(config)
        # The cap stops the model call that would start past it: the episode then in flight is
        # budget-stopped (not stored), the rest are not started; one call (~$0.13 here) overshoots.
        assert first.stopped == "max_cost" and first.budget_stopped == 1
        stored_first = len(first.rows)  # read now: the resume adds to the same run in the store
        assert stored_first + first.budget_stopped + first.skipped == 6
        assert first.spent_usd is not None and 1.0 <= first.spent_usd < 1.0 + 0.2
        second = await execute(replace(config, max_cost=None), resume=first.run_id)
    assert second.stopped is None and second.resumed == stored_first
    assert len(second.rows) == 6 and len({r.episode_id for r in second.rows}) == 6
    assert {r.label for r in second.rows} == {"full"}


async def test_max_cost_refuses_models_without_a_price(tmp_path):
    with pytest.raises(RunConfigError, match="openai:mystery"):
        await execute(
            RunConfig(
                suite="tiny",
                db=tmp_path / "r.db",
                models=("openai:mystery",),
                base_url="http://127.0.0.1:9/v1",
                max_cost=5,
            )
        )
    assert not (tmp_path / "r.db").exists()


async def test_max_tokens_ends_the_episode_after_the_turn_that_crosses_it(tmp_path):
    fake = FakeModelServer(oracle_policy())
    async with serve(fake.app) as url:
        result = await execute(
            RunConfig(
                suite="tiny",
                db=tmp_path / "r.db",
                models=("openai:fake",),
                trials=1,
                tasks=("tiny-3",),
                faults=("none",),
                base_url=f"{url}/v1",
                max_tokens=200,  # the fake spends 120 tokens on turn 1 and 130 on turn 2
            )
        )
    (row,) = result.rows
    assert row.termination == "max_tokens" and fake.requests == 2
    assert row.input_tokens + row.output_tokens == 250


async def test_a_hosted_model_runs_against_another_mcp_server_over_stdio(tmp_path):
    import sys

    fake = FakeModelServer(oracle_policy())
    async with serve(fake.app) as url:
        result = await execute(
            RunConfig(
                suite="tiny",
                db=tmp_path / "r.db",
                models=("openai:fake",),
                trials=1,
                limit=2,
                server=with_test_path(f"{sys.executable} -m mcp_resili serve --suite tiny --faults none"),
                base_url=f"{url}/v1",
            )
        )
    assert {r.label for r in result.rows} == {"full"} and {r.faults for r in result.rows} == {"server"}
    traces = {r.task_id: Trace.from_lines(r.trace.splitlines()) for r in result.rows}
    assert {t.header.fault_plan["kind"] for t in traces.values()} == {"external"}
    assert [c.tool for c in traces["tiny-2"].tool_calls] == ["lookup", "scale"]


_NOT_AN_ANSWER = {
    "openai": b'{"choices": [{"message": {"tool_calls": [{"type": "function"}]}}]}',
    "anthropic": b'{"content": [{"type": "tool_use", "input": {}}], "usage": {}}',
}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("body", "media_type", "expected"),
    [
        (b"<html>502 Bad Gateway</html>", "text/html", "not a JSON object"),
        (b'["a", "list"]', "application/json", "not a JSON object"),
        (None, "application/json", "the answer is not a"),
        (b'{"choices": "nope", "content": "nope"}', "application/json", "the answer is not a"),
        (b'{"id": "msg_1", "usage": {}}', "application/json", "the answer is not a"),
    ],
)
async def test_an_answer_that_is_not_the_apis_message_is_an_infrastructure_error(
    tmp_path, provider, body, media_type, expected
):
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def answer(request):
        return Response(body or _NOT_AN_ANSWER[provider], media_type=media_type)

    routes = [Route(path, answer, methods=["POST"]) for path in ("/v1/chat/completions", "/v1/messages")]
    async with serve(Starlette(routes=routes)) as url:
        result = await run_hosted(tmp_path, f"{provider}:odd", base_url(provider, url), limit=2)
    assert [r.termination for r in result.rows] == ["infrastructure_error"] * 2
    assert all(r.label is None and r.score is None for r in result.rows)
    end = Trace.from_lines(result.rows[0].trace.splitlines()).end
    assert end is not None and expected in end.detail and "Traceback" not in end.detail


#: Answers that break HTTP itself, each sent after the whole request was read: (answer, whether the
#: server then closes the connection, what the infrastructure error's detail names). The detail names
#: the transport's own cause, not the SDK's bare "Connection error.".
_BROKEN_HTTP = {
    "connection closed": (b"", True, "connection: ServerDisconnectedError"),
    "not HTTP": (b"HELLO WORLD\r\n\r\n", True, "connection: ClientResponseError: 400"),
    "body cut short": (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{",
        True,
        "connection: ClientPayloadError",
    ),
    "bad chunk": (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nZZ\r\nabc\r\n",
        True,
        "connection: ClientResponseError",
    ),
    "bad gzip": (
        b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 5\r\n\r\nabcde",
        False,
        "while decompressing data",
    ),
    "no answer": (None, False, "timeout: SocketTimeoutError"),
}


async def _read_request(stream, buffer=b""):
    """Read one HTTP request with a Content-Length body (what both SDKs send); returns what follows."""
    while b"\r\n\r\n" not in buffer:
        buffer += await stream.receive()
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(rest) < length:
        rest += await stream.receive()
    return rest[length:]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("case", list(_BROKEN_HTTP))
async def test_broken_http_is_retried_then_an_infrastructure_error_naming_its_cause(tmp_path, provider, case):
    answer, close, expected = _BROKEN_HTTP[case]
    requests = []

    async def handle(stream):
        async with stream:
            buffer = b""
            # Keep-alive: every request on the connection gets the same broken answer.
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while True:
                    buffer = await _read_request(stream, buffer)
                    requests.append(case)
                    if answer is None:
                        await anyio.sleep_forever()  # the client's read timeout ends it
                    if answer:
                        await stream.send(answer)
                    if close:
                        return

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    url = base_url(provider, f"http://127.0.0.1:{port}")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        result = await execute(
            RunConfig(
                suite="tiny", db=tmp_path / "r.db", models=(f"{provider}:x",), trials=1, limit=1, base_url=url
            ),
            model_options={"sleeper": Sleeps(), "retry": RetryPolicy(max_attempts=2), "timeout": 0.2},
        )
        tg.cancel_scope.cancel()
    (row,) = result.rows
    assert row.termination == "infrastructure_error" and row.label is None and row.score is None
    end = Trace.from_lines(row.trace.splitlines()).end
    assert end is not None and "failed after 2 attempts" in end.detail and expected in end.detail
    assert "\n" not in end.detail and "Traceback" not in end.detail
    assert "url=" not in end.detail  # aiohttp's request URL (its query may hold a token) is cut
    assert len(requests) == 2  # both attempts reached the server


async def test_a_group_of_infrastructure_errors_only_reports_no_rates_not_zero(tmp_path, capsys):
    """n = 0 scored episodes: the levels are undefined ("–", null), not 0% full, partial and failure."""
    from mcp_resili.cli import main

    fake = FakeModelServer(oracle_policy(), failures=lambda n: Failure(503))
    async with serve(fake.app) as url:
        result = await execute(
            RunConfig(
                suite="tiny",
                db=tmp_path / "r.db",
                models=("openai:down", "scripted:oracle"),
                trials=1,
                limit=2,
                base_url=base_url("openai", url),
            ),
            model_options={"sleeper": Sleeps(), "retry": RetryPolicy(max_attempts=1)},
        )
    down, oracle = sorted(summarize(result.rows), key=lambda s: s.model)
    assert (down.model, down.scored, down.infrastructure_errors) == ("openai:down", 0, 2)
    assert all(down.levels[lv].value is None for lv in ("full", "partial", "failure"))
    assert down.mean_value is None and oracle.mean_value is not None
    capsys.readouterr()
    assert main(["report", "--db", str(tmp_path / "r.db"), "--json"]) == 0
    groups = {g["model"]: g for g in json.loads(capsys.readouterr().out)["sections"]["outcomes"]["groups"]}
    assert groups["openai:down"]["levels"]["full"] == {"rate": None, "count": 0, "n": 0, "ci95": [0.0, 1.0]}
    assert groups["openai:down"]["mean_value"] is None
    assert groups["scripted:oracle"]["levels"]["full"]["n"] == 2
    assert main(["report", "--db", str(tmp_path / "r.db")]) == 0
    (line,) = [row for row in capsys.readouterr().out.splitlines() if "openai:down" in row and "react" in row]
    assert re.search(r"│\s+2\s+│\s+–\s+│\s+–\s+│\s+–\s+│", line), line  # episodes, then 3 levels
    assert main(["report", "--db", str(tmp_path / "r.db"), "--html", str(tmp_path / "page.html")]) == 0


async def test_a_resume_plays_infrastructure_errors_again_and_equals_a_run_without_the_outage(
    tmp_path, capsys
):
    """Review finding: a resume kept an outage's infrastructure errors for good (n shrank from 6 to 2).

    The provider is down for the first run's last 4 episodes (503, no retries); the resume, with the
    provider back, plays those 4 again in their rows' place, and the run then equals one that never
    met the outage: same episodes, labels and values. The estimate of the resume counts only those 4.
    """
    state = {"down": False, "answered": 0}

    def failures(n):
        return Failure(503) if state["down"] else None

    fake = FakeModelServer(oracle_policy(), failures=failures)
    options = {"sleeper": Sleeps(), "retry": RetryPolicy(max_attempts=1)}
    async with serve(fake.app) as url:
        common = dict(
            models=("openai:fake",), trials=1, limit=6, concurrency=1, base_url=base_url("openai", url)
        )
        clean = await execute(
            RunConfig(suite="tiny", db=tmp_path / "clean.db", **common), model_options=options
        )

        def outage_after_two(row):
            state["answered"] += 1
            state["down"] = state["answered"] >= 2

        first = await execute(
            RunConfig(suite="tiny", db=tmp_path / "r.db", **common),
            model_options=options,
            on_episode=outage_after_two,
        )
        assert [r.termination for r in first.rows].count("infrastructure_error") == 4
        state["down"] = False
        run_id = first.run_id
        estimate = await estimate_run(RunConfig(suite="tiny", db=tmp_path / "r.db", **common), resume=run_id)
        assert estimate.episodes == 4
        resumed = await execute(
            RunConfig(suite="tiny", db=tmp_path / "r.db", **common), resume=run_id, model_options=options
        )
    assert (resumed.resumed, resumed.replayed_infrastructure_errors) == (2, 4)

    def outcome(rows):
        return sorted((r.episode_id.split("/", 1)[1], r.label, r.value) for r in rows)

    assert outcome(resumed.rows) == outcome(clean.rows)
    stored = Store(tmp_path / "r.db").episodes(run_id)
    assert outcome(stored) == outcome(clean.rows) and len(stored) == 6


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_time_limit_that_runs_out_while_the_provider_is_retried_is_an_infrastructure_error(
    tmp_path, provider
):
    """429s with Retry-After: the episode's clock runs out while the harness waits, not the agent."""
    fake = FakeModelServer(oracle_policy(), failures=lambda n: Failure(429, headers={"retry-after": "30"}))

    async def waits_out_the_retry_after(seconds):
        await anyio.sleep_forever()  # the time limit ends it

    async with serve(fake.app) as url:
        url = base_url(provider, url)
        # Ample: the limit must run out in the retry's wait, not while a loaded machine starts the episode.
        result = await run_hosted(
            tmp_path, f"{provider}:fake", url, waits_out_the_retry_after, limit=1, time_limit=1.0
        )
    (row,) = result.rows
    assert (row.termination, row.label, row.score) == ("infrastructure_error", None, None)
    end = Trace.from_lines(row.trace.splitlines()).end
    assert end is not None and "ran out while" in end.detail and "429" in end.detail


async def test_a_model_that_answers_slowly_past_the_time_limit_is_the_agents_time_limit(tmp_path):
    """No failure, only a slow answer (within the grace): the model's own pace, so it is scored."""
    fake = FakeModelServer(oracle_policy(), latency=1.2)  # the grace ends at twice the limit, 1.6 s
    async with serve(fake.app) as url:
        result = await run_hosted(tmp_path, "openai:slow", base_url("openai", url), limit=1, time_limit=0.8)
    (row,) = result.rows
    assert row.termination == "time_limit" and row.label is not None
    trace = Trace.from_lines(row.trace.splitlines())
    assert trace.end is not None and "answered after the time limit" in trace.end.detail
    turns = [e for e in trace.events if isinstance(e, ModelTurnEvent)]
    assert len(turns) == 1  # the late answer is in the trace, and nothing after it


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_model_api_that_hangs_past_the_time_limit_is_an_infrastructure_error(tmp_path, provider):
    """The API accepts the request and never answers, with the request timeout above the time limit.

    Cut at the limit, this counted as the agent running out of time; a hung API is the harness's.
    """
    fake = FakeModelServer(oracle_policy(), latency=3600)
    async with serve(fake.app) as url:
        result = await run_hosted(
            tmp_path, f"{provider}:hung", base_url(provider, url), limit=1, time_limit=0.2
        )
    (row,) = result.rows
    assert (row.termination, row.label, row.score) == ("infrastructure_error", None, None)
    end = Trace.from_lines(row.trace.splitlines()).end
    assert end is not None and "no answer within 0.2s after the time limit" in end.detail
