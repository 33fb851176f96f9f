"""The run's `Ledger` as a Ray actor: one per run, asked by every worker before each model call."""

from __future__ import annotations

import time

from mcp_resili.client.limits import BudgetExhaustedError, Ledger, LimitSpec


class BudgetKeeper:
    """Holds the run's ledger (an async actor: each method runs to completion without awaiting)."""

    def __init__(self, spec: LimitSpec) -> None:
        self.ledger = Ledger(spec)

    async def is_open(self) -> bool:
        """Whether the cost cap still allows calls."""
        return self.ledger.is_open()

    async def reserve(self, key: str, tokens: int) -> float | None:
        """Seconds the caller waits before its call, or None when the cost cap is reached."""
        try:
            return self.ledger.reserve(time.monotonic(), key, tokens)
        except BudgetExhaustedError:
            return None

    async def settle(self, key: str, estimated: int, used: int, cost: float) -> None:
        """Charge a finished call."""
        self.ledger.settle(time.monotonic(), key, estimated, used, cost)

    async def spent(self) -> float:
        """USD spent so far by the whole run."""
        return self.ledger.spent
