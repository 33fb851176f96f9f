"""The run's `Ledger` as a Ray actor: one per run, asked by every worker before each model call.

Grants are times on this actor's own monotonic clock, which no other process (let alone machine)
shares. A worker places each start window on its own clock through the round trip of its question
(`wait_for_grant`), so the rate holds without synchronized clocks, however late a reply arrives.
"""

from __future__ import annotations

import time

from mcp_resili.client.limits import BudgetExhaustedError, Clock, Grant, Ledger, LimitSpec


class BudgetKeeper:
    """Holds the run's ledger (an async actor: each method runs to completion without awaiting)."""

    def __init__(self, spec: LimitSpec, clock: Clock | None = None) -> None:
        self.ledger = Ledger(spec)
        self._clock = clock if clock is not None else time.monotonic

    async def is_open(self) -> bool:
        """Whether the cost cap still allows calls."""
        return self.ledger.is_open()

    async def now(self) -> float:
        """The actor's clock, the one its grants are timed on."""
        return self._clock()

    async def grant(self, key: str, tokens: int) -> Grant | None:
        """When the caller's call may start, on this actor's clock; None when the cost cap is reached."""
        try:
            return self.ledger.grant(self._clock(), key, tokens)
        except BudgetExhaustedError:
            return None

    async def settle(self, key: str, estimated: int, used: int, cost: float) -> None:
        """Charge a finished call."""
        self.ledger.settle(self._clock(), key, estimated, used, cost)

    async def spent(self) -> float:
        """USD spent so far by the whole run."""
        return self.ledger.spent
