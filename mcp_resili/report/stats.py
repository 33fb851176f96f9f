"""Intervals and paired tests for reports."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcp_resili.scoring.passk import Z95, wilson


def mean_interval(
    values: Sequence[float], bounds: tuple[float, float] = (0.0, 1.0), z: float = Z95
) -> tuple[float, float, float] | None:
    """(mean, low, high): a conservative 95% interval for the mean of values within ``bounds``.

    None when there are no values. A value in [a, b] with mean μ has variance at most
    (μ − a)(b − μ), so the Wilson score interval of the mean rescaled to [0, 1] (`wilson`, as for
    pass^k) covers it. Unlike a normal approximation it does not shrink to a point when every value
    is the same: three zeros do not prove a mean of zero (their Wilson interval is [0, 0.56]).
    """
    n = len(values)
    if n == 0:
        return None
    a, b = bounds
    mean = sum(values) / n
    low, high = wilson((mean - a) / (b - a), n, z)
    return (mean, a + low * (b - a), a + high * (b - a))


@dataclass(frozen=True)
class McNemar:
    """McNemar's exact test on paired binary outcomes (full success of A and B on the same cells)."""

    both: int
    only_a: int
    only_b: int
    neither: int
    p_value: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "both": self.both,
            "only_a": self.only_a,
            "only_b": self.only_b,
            "neither": self.neither,
            "pairs": self.both + self.only_a + self.only_b + self.neither,
            # Four significant digits: an exact p of 1e-30 is not 0 (it printed as 0 when rounded).
            "p_value": float(f"{self.p_value:.4g}"),
        }


def mcnemar_exact(pairs: Sequence[tuple[bool, bool]]) -> McNemar:
    """Two-sided exact McNemar: a binomial test of the discordant pairs against p = 1/2."""
    both = sum(1 for a, b in pairs if a and b)
    only_a = sum(1 for a, b in pairs if a and not b)
    only_b = sum(1 for a, b in pairs if b and not a)
    neither = len(pairs) - both - only_a - only_b
    discordant = only_a + only_b
    if discordant == 0:
        return McNemar(both, only_a, only_b, neither, 1.0)
    tail = sum(math.comb(discordant, i) for i in range(min(only_a, only_b) + 1)) / 2**discordant
    return McNemar(both, only_a, only_b, neither, min(1.0, 2 * tail))
