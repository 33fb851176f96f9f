import collections
import math

import pytest
from mcp import Client

from mcp_resili.constants import META_EPISODE
from mcp_resili.faults import CallContext, FaultRule, FaultSpecError, RuleFaults, derive_rng, parse_fault_spec
from mcp_resili.faults.chaos import (
    FAULT_TYPES,
    LAMBDA_PROFILES,
    RECOVERABLE,
    TYPE_TO_NAME,
    CascadingFailure,
    ChaosFaults,
    HardRateLimit,
    HighLatency,
    SchemaDrift,
    SoftRateLimit,
    StaleData,
    TransientTimeout,
)
from mcp_resili.registry.loader import get_suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.trace import Trace

pytestmark = pytest.mark.anyio
SUITE = get_suite("reliabilitybench")
TASK = next(t for t in SUITE.tasks if t.task_type == "schedule_book")
DATE = TASK.metadata["request"]["slots"]["date"]
TIME = TASK.metadata["request"]["slots"]["time"]


def meta(episode):
    return {META_EPISODE: {"id": episode, "task": TASK.id, "fault_key": episode, "seed": 11}}


async def play_many(plan, trace_dir, episodes, calls_per_episode):
    server = ResiliServer(SUITE, plan, seed=11, trace_dir=trace_dir, time_scale=0)
    async with Client(server.mcp) as client:
        for e in range(episodes):
            for _ in range(calls_per_episode):
                await client.call_tool("check_calendar", {"date": DATE}, meta=meta(f"ep{e}"))
    return [Trace.read(p) for p in sorted(trace_dir.glob("*.jsonl"))]


@pytest.mark.parametrize("level", [0.0, 0.1, 0.2, 0.3])
async def test_lambda_profiles_inject_at_their_rate_and_weights_through_the_server(tmp_path, level):
    plan = parse_fault_spec(f"lambda={level}")
    episodes = 150 if level else 25
    traces = await play_many(plan, tmp_path, episodes=episodes, calls_per_episode=20)
    decisions = [c.decision for t in traces for c in t.tool_calls]
    assert len(decisions) == episodes * 20
    rolled = [d for d in decisions if d.roll is not None]  # cascade continuations are not fresh rolls
    fired = [d for d in rolled if d.fault is not None]
    assert abs(len(fired) / len(rolled) - plan.rate) <= 0.015
    if level == 0.0:
        assert not fired
        return
    counts = collections.Counter(TYPE_TO_NAME[d.fault.type] for d in fired)
    assert set(counts) == set(plan.weights)
    for name, weight in plan.weights.items():
        # Three binomial standard errors of the share (the sample here is a few hundred faults).
        assert abs(counts[name] / len(fired) - weight) <= 3 * math.sqrt(weight * (1 - weight) / len(fired))


@pytest.mark.parametrize("level", [0.1, 0.2, 0.3])
def test_lambda_draws_match_rate_and_weights_closely_over_many_calls(level):
    plan = LAMBDA_PROFILES[level]
    spec = SUITE.library.spec("check_calendar")
    counts, rolled = collections.Counter(), 0
    for n in range(30_000):
        decision = plan.decide(
            CallContext(f"ep{n // 50}", spec, n % 50, ()), derive_rng(3, f"ep{n // 50}", spec.name, n % 50)
        )
        if decision.roll is not None:
            rolled += 1
            if decision.fault is not None:
                counts[TYPE_TO_NAME[decision.fault.type]] += 1
    fired = sum(counts.values())
    assert abs(fired / rolled - plan.rate) <= 0.006
    for name, weight in plan.weights.items():
        assert abs(counts[name] / fired - weight) <= 3 * math.sqrt(weight * (1 - weight) / fired), (
            name,
            counts,
        )


def test_only_ablation_keeps_the_rate_and_injects_one_fault_type():
    plan = parse_fault_spec("lambda=0.3,only=SoftRateLimit")
    assert plan.rate == 0.275 and plan.weights == {"SoftRateLimit": 1.0}
    spec = SUITE.library.spec("check_calendar")
    faults = {
        type(plan.decide(CallContext("e", spec, n, ()), derive_rng(0, "e", spec.name, n)).fault)
        for n in range(400)
    }
    assert faults == {SoftRateLimit, type(None)}
    with pytest.raises(FaultSpecError, match="only=Gremlins"):
        parse_fault_spec("lambda=0.3,only=Gremlins")


def test_profiles_are_the_appendix_b_numbers():
    assert {lv: p.rate for lv, p in LAMBDA_PROFILES.items()} == {0.0: 0.0, 0.1: 0.075, 0.2: 0.175, 0.3: 0.275}
    assert LAMBDA_PROFILES[0.3].weights["CascadingFailure"] == 0.2
    assert all(abs(sum(p.weights.values()) - 1) < 1e-9 for p in LAMBDA_PROFILES.values() if p.rate)
    assert len(FAULT_TYPES) == 10


def test_unknown_lambda_is_rejected_naming_the_value_and_the_choices():
    with pytest.raises(FaultSpecError, match=r"0\.5.*0\.1\|0\.2\|0\.3"):
        parse_fault_spec("lambda=0.5")
    with pytest.raises(FaultSpecError, match="SlowDNS"):
        parse_fault_spec_file_like({"kind": "chaos", "rate": 0.1, "weights": {"SlowDNS": 1}})


def parse_fault_spec_file_like(data):
    from mcp_resili.faults import parse_plan

    return parse_plan(data)


def test_recoverable_faults_are_request_side_and_the_others_run_the_tool():
    for name, cls in FAULT_TYPES.items():
        fault = cls()
        if name in RECOVERABLE:
            assert fault.side == "request", name
        elif name in ("HardRateLimit", "SchemaDrift", "StaleData", "HighLatency"):
            assert fault.side == "response", name


async def call_with(fault, tool, arguments, *, first=None):
    """Play ``first`` calls without faults, then ``tool`` under ``fault``, then read the calendar."""
    plan = RuleFaults(rules=(FaultRule(tool=tool, calls=(1,), fault=fault),))
    server = ResiliServer(SUITE, plan, seed=0, time_scale=0)
    async with Client(server.mcp) as client:
        for name, args in first or ():
            await client.call_tool(name, args, meta=meta("e"))
        hit = await client.call_tool(tool, arguments, meta=meta("e"))
        after = await client.call_tool("check_calendar", {"date": DATE}, meta=meta("e"))
    return hit, after.structured_content["meetings"]


BOOK = {"date": DATE, "time": TIME, "topic": "Chaos"}


async def test_a_recoverable_fault_returns_an_error_and_the_write_does_not_happen():
    hit, meetings = await call_with(TransientTimeout(), "book_meeting", BOOK)
    assert hit.is_error and hit.content[0].text.startswith("Error TIMEOUT")
    assert {"time": TIME, "topic": "Chaos"} not in meetings


async def test_a_hard_rate_limit_hides_a_write_that_happened():
    hit, meetings = await call_with(HardRateLimit(), "book_meeting", BOOK)
    assert hit.is_error and "HARD_RATE_LIMIT" in hit.content[0].text
    assert {"time": TIME, "topic": "Chaos"} in meetings


async def test_soft_rate_limit_names_its_retry_after():
    hit, _ = await call_with(SoftRateLimit(retry_after=3), "check_calendar", {"date": DATE})
    assert hit.is_error and '"retry_after": 3' in hit.content[0].text


async def test_schema_drift_renames_keys_and_stale_data_lags_the_latest_write():
    drifted, _ = await call_with(SchemaDrift(), "book_meeting", BOOK)
    assert not drifted.is_error
    assert drifted.structured_content == {
        "apiVersion": "v2",
        "data": {"status": "booked", "date": DATE, "time": TIME, "topic": "Chaos"},
    }
    stale, meetings = await call_with(
        StaleData(), "check_calendar", {"date": DATE}, first=[("book_meeting", BOOK)]
    )
    assert len(stale.structured_content["meetings"]) == len(meetings) - 1


async def test_high_latency_returns_the_real_result_and_waits_only_by_the_time_scale():
    hit, meetings = await call_with(HighLatency(delay_seconds=3600), "book_meeting", BOOK)
    assert not hit.is_error and {"time": TIME, "topic": "Chaos"} in meetings  # time_scale=0: no wait


async def test_a_cascading_failure_also_fails_the_next_calls_without_new_rolls():
    plan = ChaosFaults(level=0.3, rate=1.0, weights={"CascadingFailure": 1.0})
    server = ResiliServer(SUITE, plan, seed=0, time_scale=0, expose_faults=True)
    async with Client(server.mcp) as client:
        results = [await client.call_tool("check_calendar", {"date": DATE}, meta=meta("e")) for _ in range(6)]
    events = [r.meta["mcp-resili/event"]["decision"] for r in results]
    assert [e["reason"] for e in events] == ["CascadingFailure", "cascade", "cascade"] * 2
    assert all(r.is_error and "UPSTREAM_FAILURE" in r.content[0].text for r in results)
    assert [e["roll"] is None for e in events] == [False, True, True] * 2
    assert CascadingFailure().span == 2


async def test_the_same_seed_gives_the_same_fault_ledger(tmp_path):
    plan = parse_fault_spec("lambda=0.3")
    a = await play_many(plan, tmp_path / "a", episodes=10, calls_per_episode=10)
    b = await play_many(plan, tmp_path / "b", episodes=10, calls_per_episode=10)

    def ledger(traces):
        return [(c.episode, c.seq, c.decision.model_dump_json()) for t in traces for c in t.tool_calls]

    assert ledger(a) == ledger(b)
    assert any(c.fault is not None for t in a for c in t.tool_calls)


async def test_each_episode_starts_from_its_own_copy_of_the_tasks_initial_state():
    server = ResiliServer(SUITE, parse_fault_spec("none"), seed=0)
    async with Client(server.mcp) as client:
        first = await client.call_tool("book_meeting", BOOK, meta=meta("one"))
        second = await client.call_tool("book_meeting", BOOK, meta=meta("two"))  # a fresh calendar
        again = await client.call_tool("book_meeting", BOOK, meta=meta("one"))
        seeded = await client.call_tool("check_calendar", {"date": DATE}, meta=meta("three"))
    assert not first.is_error and not second.is_error
    assert again.is_error and "SLOT_TAKEN" in again.content[0].text
    initial = TASK.metadata["initial_state"]["calendar"].get(DATE, {})
    assert seeded.structured_content["meetings"] == [
        {"time": t, "topic": initial[t]} for t in sorted(initial)
    ]
    assert (
        DATE not in TASK.metadata["initial_state"]["calendar"] or TIME not in initial
    )  # the task is unchanged
