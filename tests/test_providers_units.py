import re
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from mcp_resili.agents.model import ContextWindowExceededError, InfrastructureError
from mcp_resili.client.pricing import (
    Price,
    PriceTable,
    PriceTableError,
    estimate_cost,
    estimate_episode_tokens,
    load_price_table,
)
from mcp_resili.client.providers import (
    MissingAPIKeyError,
    UnknownModelError,
    create_model,
    validate_model_spec,
)
from mcp_resili.client.providers.names import ToolNameMap
from mcp_resili.client.providers.retry import (
    ProviderFailure,
    RetryPolicy,
    classify_status,
    parse_retry_after,
    with_retries,
)

pytestmark = pytest.mark.anyio
OPENAI_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def test_tool_names_map_to_valid_function_names_and_back():
    names = ["files.read", "files_read", "x" * 100, "x" * 100 + ".v2", "plain-name", "a.b.c"]
    mapping = ToolNameMap.build(names)
    provider = [mapping.provider_name(n) for n in names]
    assert all(OPENAI_NAME.match(p) for p in provider)
    assert len(set(provider)) == len(names)
    assert [mapping.mcp_name(p) for p in provider] == names
    # Valid names pass through untouched, so prompts and traces stay readable.
    assert mapping.provider_name("files_read") == "files_read"
    assert mapping.provider_name("plain-name") == "plain-name"


def test_tool_name_mapping_does_not_depend_on_listing_order():
    names = ["a.b", "a_b", "c" * 80, "c" * 80 + "!"]
    assert ToolNameMap.build(names) == ToolNameMap.build(list(reversed(names)))


def test_an_invented_function_name_passes_through_for_the_server_to_reject():
    assert ToolNameMap.build(["files.read"]).mcp_name("made_up") == "made_up"


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (429, "", "rate_limit"),
        (500, "", "overloaded"),
        (529, "", "overloaded"),
        (408, "", "timeout"),
        (400, "This model's maximum context length is 8192 tokens", "context"),
        (400, "prompt is too long: 210000 tokens > 200000 maximum", "context"),
        (400, "invalid tool schema", "fatal"),
        (401, "invalid x-api-key", "fatal"),
    ],
)
def test_http_errors_are_classified(status, message, kind):
    assert classify_status(status, message) == kind


def test_retry_after_is_read_from_ms_seconds_and_http_dates():
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    now = datetime(2026, 1, 1, tzinfo=UTC)
    later = format_datetime(datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC), usegmt=True)
    assert parse_retry_after({"retry-after": later}, now=now.timestamp()) == 7.0
    assert parse_retry_after({}) is None


class Script:
    """Fails with the given failures in turn, then succeeds; records the sleeper's waits."""

    def __init__(self, *failures):
        self.failures = list(failures)
        self.attempts = 0
        self.waits = []

    async def attempt(self):
        self.attempts += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"

    async def sleep(self, seconds):
        self.waits.append(seconds)


async def test_retries_honour_retry_after_and_back_off_exponentially_otherwise():
    script = Script(
        ProviderFailure("rate_limit", "slow down", status=429, retry_after=7.5),
        ProviderFailure("overloaded", "oops", status=500),
        ProviderFailure("connection", "reset"),
    )
    policy = RetryPolicy(max_attempts=5, base_delay=1.0, max_delay=60)
    assert await with_retries(script.attempt, policy=policy, sleeper=script.sleep) == "ok"
    assert script.attempts == 4
    assert script.waits == [7.5, 2.0, 4.0]


async def test_a_provider_that_keeps_failing_becomes_an_infrastructure_error():
    script = Script(*[ProviderFailure("overloaded", "down", status=503) for _ in range(10)])
    with pytest.raises(InfrastructureError, match="3 attempts"):
        await with_retries(script.attempt, policy=RetryPolicy(max_attempts=3), sleeper=script.sleep)
    assert script.attempts == 3 and len(script.waits) == 2


async def test_fatal_failures_are_not_retried_and_context_overflow_is_its_own_outcome():
    fatal = Script(ProviderFailure("fatal", "bad key", status=401))
    with pytest.raises(InfrastructureError, match="not retried"):
        await with_retries(fatal.attempt, policy=RetryPolicy(), sleeper=fatal.sleep)
    assert fatal.attempts == 1 and fatal.waits == []
    context = Script(ProviderFailure("context", "too long", status=400))
    with pytest.raises(ContextWindowExceededError):
        await with_retries(context.attempt, policy=RetryPolicy(), sleeper=context.sleep)
    assert context.attempts == 1


def test_a_huge_retry_after_is_capped():
    policy = RetryPolicy(max_retry_after=30)
    assert policy.delay(1, ProviderFailure("rate_limit", "", retry_after=3600)) == 30


def test_hosted_specs_need_their_key_from_the_environment(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="ANTHROPIC_API_KEY"):
        validate_model_spec("anthropic:claude-sonnet-4-5")
    validate_model_spec("anthropic:local", base_url="http://127.0.0.1:1")  # a local endpoint needs no key
    with pytest.raises(UnknownModelError, match="openai:MODEL"):
        validate_model_spec("gemini:pro")
    with pytest.raises(UnknownModelError):
        validate_model_spec("openai:")


def test_scripted_models_ignore_provider_options():
    assert create_model("scripted:oracle", base_url="http://x").name == "scripted:oracle"


def test_prices_match_exact_and_dated_specs_and_unknown_models_have_no_cost():
    table = PriceTable({"anthropic:claude-sonnet-4-5": Price(3.0, 15.0)})
    assert table.cost("anthropic:claude-sonnet-4-5-20250929", 1_000_000, 100_000) == pytest.approx(4.5)
    assert table.cost("anthropic:claude-sonnet-4-5-extra", 10, 10) is None
    assert table.cost("openai:who-knows", 10, 10) is None
    assert table.cost("scripted:oracle", 10, 10) == 0.0


def test_a_price_file_overrides_and_extends_the_built_in_table(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text(
        '[prices."openai:gpt-4o"]\ninput = 1.0\noutput = 2.0\n'
        '[prices."openai:mine"]\ninput = 0\noutput = 0.5\n'
    )
    table = load_price_table(path)
    assert table.price("openai:gpt-4o") == Price(1.0, 2.0)
    assert table.price("openai:mine") == Price(0.0, 0.5)
    assert table.price("openai:gpt-4o-mini") is not None  # built-in entries remain


@pytest.mark.parametrize(
    "text",
    ["[prices]\nx = 1\n", '[prices."openai:a"]\ninput = -1\noutput = 1\n', "not toml ["],
)
def test_bad_price_files_are_rejected_naming_the_file(tmp_path, text):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(PriceTableError, match=r"bad\.toml"):
        load_price_table(path)


def test_estimates_grow_with_turns_and_keep_unpriced_models_in_tokens_only():
    one, _ = estimate_episode_tokens(4000, 1)
    three, out = estimate_episode_tokens(4000, 3)
    assert one == 1000 and three > 3 * one and out == 3 * 120
    table = PriceTable({"openai:a": Price(1.0, 1.0)})
    estimate = estimate_cost([("openai:a", 4000, 2), ("openai:b", 4000, 2)], table)
    assert estimate.episodes == 2 and estimate.unpriced_models == ("openai:b",)
    tin, tout = estimate_episode_tokens(4000, 2)
    assert estimate.cost_usd == pytest.approx((tin + tout) / 1_000_000)
    assert estimate_cost([("openai:b", 10, 1)], table).cost_usd is None


def test_provider_messages_lose_keys_before_they_reach_traces_or_logs(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "my-very-own-key-123")
    failure = ProviderFailure(
        "fatal", "Incorrect API key provided: sk-proj-****abcd. Sent my-very-own-key-123", status=401
    )
    assert "abcd" not in str(failure) and "my-very-own-key-123" not in str(failure)
    assert "Incorrect API key provided" in str(failure)


@pytest.mark.parametrize(
    "fields",
    [
        {"model": "m", "messages": [{"role": "user", "content": "données → résumé"}], "max_tokens": 5},
        {},
    ],
)
def test_a_request_body_with_ready_tool_json_reads_as_the_same_json_object(fields):
    import json

    from mcp_resili.client.providers.wire import encode_body

    tools = [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]
    body = encode_body(fields, json.dumps(tools))
    assert json.loads(body) == {**fields, "tools": tools}
    assert json.loads(encode_body(fields)) == fields
    assert "→".encode() in body or not fields  # UTF-8 kept, as the SDK sends it
