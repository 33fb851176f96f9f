"""Limits that hold for a whole run, whoever plays its episodes: a cost cap and provider rate limits.

One `Ledger` per run grants every model call before it starts. In one process the executor asks it
directly (`LocalAllowance`); on Ray one actor holds it and every worker asks that actor, so the limits
hold for the run, not per worker.

* **Cost cap** (``--max-cost``): once the spend reaches the cap, no new model call starts: an episode
  about to call its model ends as *budget-stopped* (not stored, never scored, played again by a
  resume) and episodes not yet started are not started. Calls already granted finish, so the spend
  overshoots the cap by at most one call per episode in flight.
* **Rate limits** (``--requests-per-minute``, ``--tokens-per-minute``): one token bucket per provider
  key (the key comes from the provider's environment variable, so one bucket per provider), filled at
  the given rate with one second's worth of burst. A call reserves one request and its estimated
  tokens (prompt and tool schemas at 4 characters a token, plus a typical answer) and waits until the
  bucket covers them; its real usage then corrects the bucket.

  The request rate is also a hard promise: no 60 s window of the run holds more than N call starts
  per key. The ledger grants each call a start *window* on its own clock, ``[start, start + slack]``
  (a `Grant`), and spaces the starts so that no window a minute and a slack long holds more than N
  of them (the bucket's burst alone would allow N plus the burst). The caller (`wait_for_grant`)
  places that window on its own clock through the round trip of its question, so the two clocks
  need not agree, starts inside it, and asks again when it cannot (a reply or a sleep came back too
  late): a call never starts late, so late replies cannot crowd a window.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from mcp_resili.agents.model import (
    AssistantMessage,
    Model,
    ModelRequest,
    ModelResponse,
    ToolDefinition,
    ToolResultsMessage,
    UserMessage,
    harness_waiting,
)
from mcp_resili.client.pricing import CHARS_PER_TOKEN, OUTPUT_TOKENS_PER_TURN, PriceTable
from mcp_resili.client.providers import HOSTED_PROVIDERS, provider_of


class BudgetExhaustedError(Exception):
    """The run's cost cap is reached: this model call (and the episode making it) does not start."""


#: Seconds a granted call has to start in after its start time. The ledger spaces its starts a minute
#: (see `CLOCK_DRIFT`) and this much apart, so a call starting anywhere in its window keeps every 60 s
#: window within the rate; a call that cannot start in it (its reply came back, or its sleep ended,
#: too late) asks again. At full rate this costs 1.7 %: N calls per 61.06 s.
START_SLACK = 1.0
#: How much faster one process's monotonic clock may run than another's, or than real time (NTP slews
#: each by at most 500 ppm): the ledger's minute is this much longer, and a caller on another clock
#: widens its placement of a grant by this much of the seconds since it last read the ledger's clock.
CLOCK_DRIFT = 1e-3
#: A start further ahead than this is placed again, against a fresh reading of the ledger's clock,
#: shortly before it (so drift never adds up over a long wait).
RESYNC_AFTER = 10.0


@dataclass(frozen=True)
class Grant:
    """When one granted model call may start, on the clock of the ledger that granted it.

    The call starts at ``start`` or later and at ``latest`` at the latest (infinity: whenever); one
    that cannot asks for a new grant. ``now`` is the ledger's clock when it granted, which lets the
    caller place the window on its own clock (`wait_for_grant`).
    """

    now: float
    start: float
    latest: float

    @property
    def wait(self) -> float:
        """Seconds from the grant to its start."""
        return self.start - self.now


@dataclass
class TokenBucket:
    """A reservation token bucket: `reserve` always books and says how long the caller must wait.

    Pure (``now`` is passed in): the level may go negative, and the wait is the time to refill it.
    """

    per_minute: float
    burst: float
    level: float = field(init=False)
    stamp: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.level = self.burst

    def _refill(self, now: float) -> None:
        if self.stamp is not None:
            self.level = min(self.burst, self.level + (now - self.stamp) * self.per_minute / 60.0)
        self.stamp = now

    def reserve(self, now: float, amount: float) -> float:
        """Book ``amount`` at ``now``; the seconds to wait before using it."""
        self._refill(now)
        self.level -= amount
        return 0.0 if self.level >= 0 else -self.level * 60.0 / self.per_minute

    def adjust(self, now: float, amount: float) -> None:
        """Book ``amount`` more (negative: give some back) without waiting for it."""
        self._refill(now)
        self.level = min(self.burst, self.level - amount)


@dataclass(frozen=True)
class LimitSpec:
    """The run-wide limits, as the driver hands them to whoever keeps the ledger."""

    max_cost: float | None = None
    #: USD already spent by the run's stored episodes (a resume starts from it).
    spent: float = 0.0
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    #: Seconds a rate-limited call has to start in once its grant's start time comes (`START_SLACK`).
    start_slack: float = START_SLACK

    @property
    def active(self) -> bool:
        """Whether any limit applies (otherwise nobody needs to ask)."""
        return (
            self.max_cost is not None
            or self.requests_per_minute is not None
            or self.tokens_per_minute is not None
        )


class Ledger:
    """The run's spend and rate buckets; every decision happens without awaiting (atomic on a loop)."""

    def __init__(self, spec: LimitSpec) -> None:
        self.spec = spec
        self.spent = spec.spent
        self.calls = 0
        self._requests: dict[str, TokenBucket] = {}
        self._tokens: dict[str, TokenBucket] = {}
        #: Per key, the start times of its last granted calls (as many as one window may hold).
        self._starts: dict[str, deque[float]] = {}

    def is_open(self) -> bool:
        """Whether a new model call may start (the cost cap is not reached)."""
        return self.spec.max_cost is None or self.spent < self.spec.max_cost

    def _bucket(self, table: dict[str, TokenBucket], key: str, rate: float) -> TokenBucket:
        if key not in table:
            table[key] = TokenBucket(rate, max(1.0, rate / 60.0))
        return table[key]

    def _windowed(self, key: str, rate: float, start: float) -> float:
        # At most `count` starts in any window `span` long: N a minute, or (below one a minute) one a
        # period, that minute measured long enough on a clock running slow, plus the slack. Starts are
        # booked in order, so the last `count` ones are the latest.
        count = max(1, math.floor(rate))
        span = max(60.0, 60.0 * count / rate) * (1 + CLOCK_DRIFT) + self.spec.start_slack
        starts = self._starts.setdefault(key, deque(maxlen=count))
        if starts:
            start = max(start, starts[-1])
        if len(starts) == count:
            start = max(start, starts[0] + span)
        starts.append(start)
        return start

    def grant(self, now: float, key: str, tokens: int) -> Grant:
        """Grant one call of ~``tokens`` for provider ``key``: when (on ``now``'s clock) it may start.

        Raises `BudgetExhaustedError` when the cost cap is reached.
        """
        if not self.is_open():
            raise BudgetExhaustedError(f"--max-cost {self.spec.max_cost} reached (spent ${self.spent:.4f})")
        self.calls += 1
        rpm, tpm = self.spec.requests_per_minute, self.spec.tokens_per_minute
        if key not in HOSTED_PROVIDERS or (rpm is None and tpm is None):
            return Grant(now, now, math.inf)  # scripted agents have no key and no rate limit
        start = now
        if tpm is not None:
            start = now + self._bucket(self._tokens, key, tpm).reserve(now, tokens)
        if rpm is not None:
            start = max(start, now + self._bucket(self._requests, key, rpm).reserve(now, 1))
            start = self._windowed(key, rpm, start)
        return Grant(now, start, start + self.spec.start_slack)

    def settle(self, now: float, key: str, estimated: int, used: int, cost: float) -> None:
        """After a call: charge its cost and correct the token bucket by ``used - estimated``."""
        self.spent += cost
        if key in self._tokens:
            self._tokens[key].adjust(now, used - estimated)


class Allowance(Protocol):
    """What an episode asks before each model call (the run's `Ledger`, here or on another process)."""

    async def is_open(self) -> bool:
        """Whether a new episode or model call may start."""
        ...

    async def admit(self, key: str, tokens: int) -> None:
        """Wait until the call may start; `BudgetExhaustedError` when it may not."""
        ...

    async def settle(self, key: str, estimated: int, used: int, cost: float) -> None:
        """Record what the call used and cost."""
        ...


Clock = Callable[[], float]
Sleeper = Callable[[float], Awaitable[None]]


def _ahead(seconds: float, drift: float) -> float:
    # The most this process's clock may count while the ledger's counts ``seconds``.
    return seconds + drift * abs(seconds)


def _behind(seconds: float, drift: float) -> float:
    # The least this process's clock may count while the ledger's counts ``seconds``.
    return seconds - drift * abs(seconds)


async def wait_for_grant(
    ask: Callable[[], Awaitable[Grant | None]],
    ledger_time: Callable[[], Awaitable[float]],
    clock: Clock = time.monotonic,
    sleeper: Sleeper = anyio.sleep,
    drift: float = CLOCK_DRIFT,
) -> None:
    """Get a grant from the ledger and return inside its start window: the call may start now.

    ``ask`` books a call with the ledger (None: the cost cap is reached, `BudgetExhaustedError`);
    ``ledger_time`` reads the ledger's clock. The two clocks need not agree (another process, another
    machine): the ledger read its clock (``grant.now``) between the moments ``sent`` and ``back`` at
    which this process asked and heard back, so the start lies no earlier than ``back + wait`` on
    this clock and the window's end no earlier than ``sent + (latest - now)``, give or take
    ``drift`` (relative clock rate) of the seconds in between. A start more than `RESYNC_AFTER`
    ahead is placed again against a fresh reading shortly before it. When this process can no longer
    start inside the window (a reply took longer than the slack, a sleep overran it), it asks again:
    the missed grant stays booked, so the ledger's spacing holds whatever happens here.
    """
    while True:
        sent = clock()
        grant = await ask()
        back = clock()
        if grant is None:
            raise BudgetExhaustedError("the run's --max-cost is reached")
        read = grant.now
        while grant.start - read > RESYNC_AFTER:
            await sleeper(max(0.0, back + grant.start - read - RESYNC_AFTER / 2 - clock()))
            sent = clock()
            read = await ledger_time()
            back = clock()
        earliest = back + _ahead(grant.start - read, drift)
        latest = math.inf if grant.latest == math.inf else sent + _behind(grant.latest - read, drift)
        now = clock()
        if now < earliest:
            await sleeper(earliest - now)
            now = clock()
        if now <= latest:
            return


class LocalAllowance:
    """The ledger in this process."""

    def __init__(
        self, spec: LimitSpec, clock: Clock = time.monotonic, sleeper: Sleeper = anyio.sleep
    ) -> None:
        self.ledger = Ledger(spec)
        self._clock = clock
        self._sleep = sleeper

    async def is_open(self) -> bool:
        """Whether the cost cap still allows calls."""
        return self.ledger.is_open()

    async def admit(self, key: str, tokens: int) -> None:
        """Take a grant, then wait for its start (asking again if a late wake-up missed its window)."""

        async def ask() -> Grant:
            return self.ledger.grant(self._clock(), key, tokens)

        async def ledger_time() -> float:
            return self._clock()

        # One clock: the window is exact (no drift between the ledger's clock and ours).
        await wait_for_grant(ask, ledger_time, self._clock, self._sleep, drift=0.0)

    async def settle(self, key: str, estimated: int, used: int, cost: float) -> None:
        """Charge the call."""
        self.ledger.settle(self._clock(), key, estimated, used, cost)


class _Unlimited:
    async def is_open(self) -> bool:
        return True

    async def admit(self, key: str, tokens: int) -> None:
        return None

    async def settle(self, key: str, estimated: int, used: int, cost: float) -> None:
        return None


#: The allowance of a run without limits.
UNLIMITED: Allowance = _Unlimited()


_SCHEMA_CHARS: dict[int, tuple[tuple[ToolDefinition, ...], int]] = {}


def _tool_chars(tools: tuple[ToolDefinition, ...]) -> int:
    # The same definitions object serves a whole run: measure it once (kept alive by the entry).
    hit = _SCHEMA_CHARS.get(id(tools))
    if hit is not None and hit[0] is tools:
        return hit[1]
    chars = sum(len(t.name) + len(t.description) + len(str(t.input_schema)) for t in tools)
    if len(_SCHEMA_CHARS) > 64:
        _SCHEMA_CHARS.clear()
    _SCHEMA_CHARS[id(tools)] = (tools, chars)
    return chars


def estimate_request_tokens(request: ModelRequest) -> int:
    """Tokens a request will use, roughly: its text and tool schemas, plus a typical answer."""
    chars = len(request.system or "") + _tool_chars(request.tools)
    for message in request.messages:
        if isinstance(message, UserMessage):
            chars += len(message.text)
        elif isinstance(message, AssistantMessage):
            chars += len(message.text) + sum(len(str(c.arguments)) + len(c.name) for c in message.tool_calls)
        elif isinstance(message, ToolResultsMessage):
            chars += sum(len(r.text) for r in message.results)
    return chars // CHARS_PER_TOKEN + OUTPUT_TOKENS_PER_TURN


class LimitedModel:
    """A model whose every call is granted by the run's allowance first, then charged to it."""

    def __init__(self, model: Model, spec: str, allowance: Allowance, prices: PriceTable) -> None:
        self._model = model
        self._spec = spec
        self._key = provider_of(spec.removeprefix("text:"))
        self._allowance = allowance
        self._prices = prices

    @property
    def name(self) -> str:
        """The wrapped model's spec."""
        return self._model.name

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Ask the allowance, call the model, charge the call."""
        estimated = estimate_request_tokens(request)
        with harness_waiting("the run's cost cap and rate limits held the model call"):
            await self._allowance.admit(self._key, estimated)
        response = await self._model.generate(request)
        used = response.input_tokens + response.output_tokens
        cost = self._prices.cost(self._spec, response.input_tokens, response.output_tokens) or 0.0
        await self._allowance.settle(self._key, estimated, used, cost)
        return response

    async def aclose(self) -> None:
        """Close the wrapped model if it holds connections."""
        close = getattr(self._model, "aclose", None)
        if close is not None:
            await close()
