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
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from mcp_resili.client.model import (
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

    def is_open(self) -> bool:
        """Whether a new model call may start (the cost cap is not reached)."""
        return self.spec.max_cost is None or self.spent < self.spec.max_cost

    def _bucket(self, table: dict[str, TokenBucket], key: str, rate: float) -> TokenBucket:
        if key not in table:
            table[key] = TokenBucket(rate, max(1.0, rate / 60.0))
        return table[key]

    def reserve(self, now: float, key: str, tokens: int) -> float:
        """Grant one call of ~``tokens`` for provider ``key``: the seconds to wait first.

        Raises `BudgetExhaustedError` when the cost cap is reached.
        """
        if not self.is_open():
            raise BudgetExhaustedError(f"--max-cost {self.spec.max_cost} reached (spent ${self.spent:.4f})")
        self.calls += 1
        if key not in HOSTED_PROVIDERS:
            return 0.0  # scripted agents have no key and no rate limit
        wait = 0.0
        if self.spec.requests_per_minute is not None:
            bucket = self._bucket(self._requests, key, self.spec.requests_per_minute)
            wait = bucket.reserve(now, 1)
        if self.spec.tokens_per_minute is not None:
            bucket = self._bucket(self._tokens, key, self.spec.tokens_per_minute)
            wait = max(wait, bucket.reserve(now, tokens))
        return wait

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
        """Reserve, then wait out the rate limit."""
        wait = self.ledger.reserve(self._clock(), key, tokens)
        if wait > 0:
            await self._sleep(wait)

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
