"""Token prices (data) and cost accounting: per episode after the fact, per run before it starts.

Prices are USD per million tokens, keyed by model spec. The built-in table holds list prices as
published by the providers (checked 2025); prices change, so a TOML file overrides or extends it:

```toml
[prices."openai:gpt-4o"]
input = 2.5      # USD per million input tokens
output = 10.0    # USD per million output tokens
```

A model with no price is accounted in tokens only (its cost is ``None``, never a guessed number).
A spec matches a price key exactly, or as a dated snapshot of it (``anthropic:claude-sonnet-4-5-20250929``
matches ``anthropic:claude-sonnet-4-5``).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mcp_resili.errors import UserError


class PriceTableError(UserError):
    """A price file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """USD for the given token counts."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


#: List prices (USD / million tokens). Override with ``--prices FILE.toml``.
DEFAULT_PRICES: dict[str, Price] = {
    "anthropic:claude-opus-4-1": Price(15.0, 75.0),
    "anthropic:claude-opus-4-5": Price(5.0, 25.0),
    "anthropic:claude-sonnet-4-5": Price(3.0, 15.0),
    "anthropic:claude-sonnet-4": Price(3.0, 15.0),
    "anthropic:claude-haiku-4-5": Price(1.0, 5.0),
    "anthropic:claude-3-5-haiku": Price(0.8, 4.0),
    "openai:gpt-5": Price(1.25, 10.0),
    "openai:gpt-5-mini": Price(0.25, 2.0),
    "openai:gpt-5-nano": Price(0.05, 0.4),
    "openai:gpt-4.1": Price(2.0, 8.0),
    "openai:gpt-4.1-mini": Price(0.4, 1.6),
    "openai:gpt-4.1-nano": Price(0.1, 0.4),
    "openai:gpt-4o": Price(2.5, 10.0),
    "openai:gpt-4o-mini": Price(0.15, 0.6),
}

_DATED_SUFFIX = re.compile(r"^-(\d{8}|\d{4}-\d{2}-\d{2}|latest)$")


@dataclass(frozen=True)
class PriceTable:
    """Prices by model spec; scripted agents cost nothing."""

    prices: Mapping[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))

    def price(self, spec: str) -> Price | None:
        """The price of ``spec``, or ``None`` when unknown."""
        if spec.startswith("scripted:"):
            return Price(0.0, 0.0)
        if spec in self.prices:
            return self.prices[spec]
        for key, price in self.prices.items():
            if spec.startswith(key) and _DATED_SUFFIX.match(spec[len(key) :]):
                return price
        return None

    def cost(self, spec: str, input_tokens: int, output_tokens: int) -> float | None:
        """USD for one episode's tokens, or ``None`` when the price is unknown."""
        price = self.price(spec)
        return None if price is None else price.cost(input_tokens, output_tokens)


def load_price_table(path: Path | None) -> PriceTable:
    """The built-in prices, overridden and extended by the TOML file at ``path`` (if any)."""
    if path is None:
        return PriceTable()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PriceTableError(f"cannot read price file {path}: {exc}") from None
    entries = data.get("prices")
    if not isinstance(entries, dict):
        raise PriceTableError(f'{path}: expected a [prices."PROVIDER:MODEL"] table')
    prices = dict(DEFAULT_PRICES)
    for spec, entry in entries.items():
        if not isinstance(entry, dict) or set(entry) != {"input", "output"}:
            raise PriceTableError(f"{path}: prices.{spec!r} needs exactly `input` and `output`")
        values = (entry["input"], entry["output"])
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in values):
            raise PriceTableError(f"{path}: prices.{spec!r} must be non-negative numbers, got {values}")
        prices[spec] = Price(float(values[0]), float(values[1]))
    return PriceTable(prices)


#: Rough tokens per character of English and JSON (the usual rule of thumb for BPE tokenisers).
CHARS_PER_TOKEN = 4
#: Tokens a turn adds to the conversation: a tool call plus its result (typical ResiliBench sizes).
TOKENS_PER_TURN = 250
#: Output tokens per turn (a tool call with arguments, or a short final answer).
OUTPUT_TOKENS_PER_TURN = 120


@dataclass(frozen=True)
class CostEstimate:
    """A pre-run estimate: tokens for every planned episode, and USD where prices are known."""

    episodes: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    unpriced_models: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for a terminal."""
        tokens = f"~{self.input_tokens:,} input + {self.output_tokens:,} output tokens"
        if self.cost_usd is None:
            missing = ", ".join(self.unpriced_models)
            return f"estimate: {self.episodes} episodes, {tokens}; no price for {missing}"
        unpriced = f" (tokens only for {', '.join(self.unpriced_models)})" if self.unpriced_models else ""
        return f"estimate: {self.episodes} episodes, {tokens}, ~${self.cost_usd:,.2f}{unpriced}"


def estimate_episode_tokens(context_chars: int, turns: int) -> tuple[int, int]:
    """(input, output) tokens of an episode of ``turns`` turns whose first request has ``context_chars``.

    Every turn resends the conversation so far, so input grows with each turn's call and result.
    """
    base = context_chars // CHARS_PER_TOKEN
    input_tokens = sum(base + turn * TOKENS_PER_TURN for turn in range(turns))
    return input_tokens, turns * OUTPUT_TOKENS_PER_TURN


def estimate_cost(episodes: list[tuple[str, int, int]], prices: PriceTable) -> CostEstimate:
    """Sum ``(model spec, context chars, expected turns)`` per episode into a `CostEstimate`."""
    total_in = total_out = 0
    cost = 0.0
    unpriced: set[str] = set()
    for spec, chars, turns in episodes:
        tin, tout = estimate_episode_tokens(chars, turns)
        total_in += tin
        total_out += tout
        episode_cost = prices.cost(spec, tin, tout)
        if episode_cost is None:
            unpriced.add(spec)
        else:
            cost += episode_cost
    all_unpriced = bool(episodes) and unpriced == {spec for spec, _, _ in episodes}
    return CostEstimate(
        episodes=len(episodes),
        input_tokens=total_in,
        output_tokens=total_out,
        cost_usd=None if all_unpriced else cost,
        unpriced_models=tuple(sorted(unpriced)),
    )
