"""--requests-per-minute N holds for every 60 s window of the run, however late the budget actor's replies.

No Ray and no real time here: the budget actor's class is plain Python (Ray only calls its methods), its
replies reach the workers through a fake actor handle that delays them, and everything runs on an asyncio
loop whose clock is virtual (a sleep moves the clock instead of waiting), so every run is exact and
repeatable. Each test records the instant each model call would start (when the allowance lets it go) and
counts the starts in every 60 s window.
"""

from __future__ import annotations

import asyncio
import bisect
import random
import selectors
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_resili.client.limits import LimitSpec, LocalAllowance
from mcp_resili.integrations.ray import budget
from mcp_resili.integrations.ray.budget import BudgetKeeper

KEY = "openai"  # a hosted provider: rate limited (scripted agents are not)


# --- a loop on a virtual clock ------------------------------------------------------------------------


class _JumpingSelector(selectors.DefaultSelector):
    """Where the loop would block until its next timer, move its clock to that timer instead."""

    loop: VirtualTimeLoop

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise RuntimeError("nothing left to wake the loop: the simulation deadlocked")
        self.loop.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        selector = _JumpingSelector()
        super().__init__(selector)
        selector.loop = self
        self.now = 0.0

    def time(self) -> float:
        return self.now


def simulate(main):
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()


# --- the budget actor behind a slow network -------------------------------------------------------------


class SlowHandle:
    """A Ray actor handle on a `BudgetKeeper`: ``handle.method.remote(*args)``, each way delayed."""

    def __init__(self, keeper: BudgetKeeper, delays) -> None:
        self._keeper = keeper
        self._delays = delays  # () -> (seconds to reach the actor, seconds for the reply to come back)

    def __getattr__(self, method: str) -> Any:
        async def call(*args: Any) -> Any:
            there, back = self._delays()
            await asyncio.sleep(there)
            result = await getattr(self._keeper, method)(*args)
            await asyncio.sleep(back)
            return result

        return SimpleNamespace(remote=call)


def keeper_on(monkeypatch, spec: LimitSpec, clock) -> BudgetKeeper:
    """The budget actor reading ``clock`` as its `time.monotonic` (another machine: another epoch)."""
    monkeypatch.setattr(budget, "time", SimpleNamespace(monotonic=clock, time=clock))
    return BudgetKeeper(spec)


# --- the promise ----------------------------------------------------------------------------------------


def most_in_a_window(starts: list[float], seconds: float = 60.0) -> int:
    """The most starts any half-open window [t, t + seconds) holds (a fullest one begins at a start)."""
    starts = sorted(starts)
    return max((bisect.bisect_left(starts, s + seconds) - i for i, s in enumerate(starts)), default=0)


def test_the_window_counter_counts_half_open_windows():
    assert most_in_a_window([0.0, 59.999, 60.0, 120.0]) == 2
    assert most_in_a_window([0.0, 30.0, 59.0, 60.0]) == 3
    assert most_in_a_window([]) == 0


async def episodes(allowance, loop, workers: int, calls: int, seed: int) -> list[float]:
    """``workers`` × ``calls`` model calls, each started when ``allowance`` lets it: their start instants."""
    rng = random.Random(seed)
    starts: list[float] = []

    async def play(worker: int) -> None:
        await asyncio.sleep(worker * 0.013)
        for _ in range(calls):
            await allowance.admit(KEY, 100)
            starts.append(loop.time())
            await asyncio.sleep(rng.uniform(0.2, 4.0))  # the model answers, the agent acts

    await asyncio.gather(*(play(w) for w in range(workers)))
    return starts


# --- Ray: today's worker, replies within the slack --------------------------------------------------------

# A one-request bucket (any jitter broke it), a small rate, and a rate whose one second of burst is 2.5.
RATES = [1, 7, 150]
#: Enough workers to keep every rate saturated (a queue of calls waiting), each making a few calls.
WORKERS = 20


def calls_at(rpm: int) -> int:
    return max(3, rpm // 4)


@pytest.mark.parametrize("rpm", RATES)
def test_workers_sleeping_the_actors_wait_keep_every_window_when_replies_return_within_the_slack(
    monkeypatch, rpm
):
    from mcp_resili.integrations.ray.worker import RemoteAllowance

    rng = random.Random(rpm)

    async def main(loop):
        keeper = keeper_on(monkeypatch, LimitSpec(requests_per_minute=rpm), loop.time)
        # Each worker's reply is late by its own amount, up to 0.9 s (the network, a busy worker loop).
        allowance = RemoteAllowance(SlowHandle(keeper, lambda: (rng.uniform(0, 0.05), rng.uniform(0, 0.9))))
        return await episodes(allowance, loop, workers=WORKERS, calls=calls_at(rpm), seed=rpm)

    starts = simulate(main)
    assert len(starts) == WORKERS * calls_at(rpm)
    assert max(starts) > 120  # the run spans several windows
    assert most_in_a_window(starts) <= rpm


# --- Ray: grants with a start window, replies as late as they come -----------------------------------------


class GrantedAllowance:
    """A worker admitting its calls the way `wait_for_grant` says (what `RemoteAllowance.admit` should do)."""

    def __init__(self, handle: SlowHandle, clock) -> None:
        self._handle = handle
        self._clock = clock
        self.asks = 0

    async def admit(self, key: str, tokens: int) -> None:
        from mcp_resili.client.limits import wait_for_grant

        async def ask():
            self.asks += 1
            return await self._handle.grant.remote(key, tokens)

        await wait_for_grant(ask, self._handle.now.remote, clock=self._clock, sleeper=asyncio.sleep)


def late_replies(rng: random.Random):
    """Mostly prompt, sometimes a second late, now and then minutes late."""

    def delays() -> tuple[float, float]:
        roll = rng.random()
        back = (
            rng.uniform(0, 0.3)
            if roll < 0.7
            else rng.uniform(0.5, 3.0)
            if roll < 0.95
            else rng.uniform(30, 200)
        )
        return rng.uniform(0, 0.2), back

    return delays


@pytest.mark.parametrize("rpm", RATES)
def test_a_call_starts_inside_its_grants_window_so_late_replies_cannot_crowd_a_window(monkeypatch, rpm):
    rng = random.Random(100 + rpm)

    async def main(loop):
        # The actor's machine: its own monotonic clock, with an epoch 5000 s off the workers'.
        keeper = keeper_on(monkeypatch, LimitSpec(requests_per_minute=rpm), lambda: loop.time() + 5000.0)
        allowance = GrantedAllowance(SlowHandle(keeper, late_replies(rng)), loop.time)
        starts = await episodes(allowance, loop, workers=WORKERS, calls=calls_at(rpm), seed=rpm)
        return starts, allowance.asks

    starts, asks = simulate(main)
    assert len(starts) == WORKERS * calls_at(rpm)
    assert max(starts) > 120
    assert most_in_a_window(starts) <= rpm
    assert asks > len(starts)  # some replies came too late to start in their window: those asked again


def test_the_ray_worker_holds_the_rate_when_replies_come_back_later_than_the_slack(monkeypatch):
    """Replies up to minutes late: the worker asks again rather than start a call late."""
    from mcp_resili.integrations.ray.worker import RemoteAllowance

    rng = random.Random(7)

    async def main(loop):
        keeper = keeper_on(monkeypatch, LimitSpec(requests_per_minute=7), loop.time)
        allowance = RemoteAllowance(SlowHandle(keeper, late_replies(rng)))
        return await episodes(allowance, loop, workers=WORKERS, calls=calls_at(7), seed=7)

    assert most_in_a_window(simulate(main)) <= 7


def test_a_grant_on_another_clock_places_its_window_by_the_round_trip():
    from mcp_resili.client.limits import Grant, wait_for_grant

    async def main(loop):
        slept: list[float] = []

        async def sleeper(seconds: float) -> None:
            slept.append(seconds)
            await asyncio.sleep(seconds)

        async def ask():
            await asyncio.sleep(0.1)  # the ledger grants 0.1 s after we asked, on a clock 1000 s ahead
            grant = Grant(now=1000.1, start=1005.1, latest=1006.1)
            await asyncio.sleep(0.2)
            return grant

        async def ledger_time() -> float:
            raise AssertionError("a 5 s wait needs no second reading")

        await wait_for_grant(ask, ledger_time, clock=loop.time, sleeper=sleeper, drift=0.0)
        return loop.time(), slept

    started, slept = simulate(main)
    # The grant was made somewhere in [0, 0.3] here: its start is 5 s after that, so not before 5.3.
    assert started == pytest.approx(5.3) and slept == [pytest.approx(5.0)]


# --- one process: the ledger in the driver, sleeps that overrun -------------------------------------------


@pytest.mark.parametrize("rpm", RATES)
def test_the_local_allowance_keeps_every_window_when_its_sleeps_overrun(rpm):
    rng = random.Random(200 + rpm)

    async def main(loop):
        async def late_sleep(seconds: float) -> None:  # a busy loop wakes its sleepers late
            await asyncio.sleep(seconds + (rng.uniform(0, 0.5) if rng.random() < 0.8 else rng.uniform(1, 20)))

        allowance = LocalAllowance(LimitSpec(requests_per_minute=rpm), clock=loop.time, sleeper=late_sleep)
        return await episodes(allowance, loop, workers=WORKERS, calls=calls_at(rpm), seed=rpm)

    starts = simulate(main)
    assert len(starts) == WORKERS * calls_at(rpm)
    assert max(starts) > 120
    assert most_in_a_window(starts) <= rpm


# --- the ledger itself -------------------------------------------------------------------------------------


def test_the_ledger_books_no_more_than_n_starts_in_any_window_a_minute_and_the_slack_long():
    from mcp_resili.client.limits import START_SLACK, Ledger

    ledger = Ledger(LimitSpec(requests_per_minute=150))  # 2.5 requests a second, 2.5 of burst
    grants = [ledger.grant(t * 0.1, KEY, 10) for t in range(1000)]  # asked far faster than granted
    starts = [g.start for g in grants]
    assert starts == sorted(starts)
    assert all(g.latest == g.start + START_SLACK for g in grants)
    assert most_in_a_window(starts, 60.0 + START_SLACK) == 150
    # Still paced as a bucket: the first two at once (the burst), then one every 0.4 s.
    assert starts[:2] == [0.0, 0.1] and starts[3] - starts[2] == pytest.approx(0.4)


def test_a_rate_below_one_a_minute_spaces_single_calls_by_its_period():
    from mcp_resili.client.limits import CLOCK_DRIFT, START_SLACK, Ledger

    ledger = Ledger(LimitSpec(requests_per_minute=0.5))
    starts = [ledger.grant(0.0, KEY, 10).start for _ in range(3)]
    period = 120.0 * (1 + CLOCK_DRIFT) + START_SLACK  # measured long enough on a slow clock
    assert starts == [0.0, pytest.approx(period), pytest.approx(2 * period)]


def test_unlimited_keys_get_an_open_window_at_once():
    from mcp_resili.client.limits import Ledger

    grant = Ledger(LimitSpec(requests_per_minute=1)).grant(7.0, "scripted", 10)
    assert grant.start == grant.now == 7.0 and grant.latest == float("inf")


def test_the_budget_actor_reads_its_own_clock_for_grants(monkeypatch):
    import math

    keeper = keeper_on(monkeypatch, LimitSpec(requests_per_minute=60), lambda: 42.0)
    assert asyncio.run(keeper.now()) == 42.0
    first, second = (asyncio.run(keeper.grant(KEY, 1)) for _ in range(2))
    assert first is not None and first.start == 42.0 and math.isfinite(first.latest)
    assert second is not None and second.start == pytest.approx(43.0)
    capped = keeper_on(monkeypatch, LimitSpec(max_cost=1.0, spent=1.0), lambda: 0.0)
    assert asyncio.run(capped.grant(KEY, 1)) is None
