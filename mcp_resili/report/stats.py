"""Intervals and paired tests for reports."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def mean_interval(values: Sequence[float], z: float = 1.959964) -> tuple[float, float, float] | None:
    """(mean, low, high): a normal-approximation 95% interval, clipped to [0, 1]; None when empty.

    With one value the interval is the whole [0, 1] range: one observation says nothing of spread.
    """
    n = len(values)
    if n == 0:
        return None
    mean = sum(values) / n
    if n == 1:
        return (mean, 0.0, 1.0)
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    half = z * math.sqrt(variance / n)
    return (mean, max(0.0, mean - half), min(1.0, mean + half))


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
            "p_value": round(self.p_value, 6),
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
