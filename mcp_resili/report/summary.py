"""Summaries of stored episodes: rates per (model, faults, variant) with 95% Wilson intervals."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from mcp_resili.store import EpisodeRow


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval for a binomial rate (well behaved at 0 and 1, unlike Wald)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class Rate:
    """A rate with its count, denominator and 95% interval."""

    count: int
    n: int
    low: float
    high: float

    @property
    def value(self) -> float:
        """Count / n (0 when n is 0)."""
        return self.count / self.n if self.n else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "rate": round(self.value, 4),
            "count": self.count,
            "n": self.n,
            "ci95": [round(self.low, 4), round(self.high, 4)],
        }


def rate(count: int, n: int) -> Rate:
    """A `Rate` with its Wilson interval."""
    low, high = wilson_interval(count, n)
    return Rate(count, n, low, high)


@dataclass(frozen=True)
class GroupSummary:
    """ResiliBench levels for one (model, faults, variant) group.

    Infrastructure errors are excluded from the denominators and counted on their own, never dropped.
    """

    model: str
    faults: str
    variant: str
    episodes: int
    scored: int
    infrastructure_errors: int
    levels: dict[str, Rate]
    mean_value: float
    input_tokens: int = 0
    output_tokens: int = 0
    #: USD over every episode (infrastructure errors cost money too); ``None`` when no price is known.
    cost_usd: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        data = asdict(self)
        data["levels"] = {k: v.to_dict() for k, v in self.levels.items()}
        data["mean_value"] = round(self.mean_value, 4)
        data["cost_usd"] = None if self.cost_usd is None else round(self.cost_usd, 6)
        return data


LEVELS = ("full", "partial", "failure")


def summarize(rows: Iterable[EpisodeRow]) -> list[GroupSummary]:
    """Group rows by (model, faults, variant) and compute level rates."""
    groups: dict[tuple[str, str, str], list[EpisodeRow]] = {}
    for row in rows:
        groups.setdefault((row.model, row.faults, row.variant), []).append(row)
    summaries = []
    for (model, faults, variant), members in sorted(groups.items()):
        scored = [r for r in members if r.label is not None]
        n = len(scored)
        summaries.append(
            GroupSummary(
                model=model,
                faults=faults,
                variant=variant,
                episodes=len(members),
                scored=n,
                infrastructure_errors=len(members) - n,
                levels={level: rate(sum(1 for r in scored if r.label == level), n) for level in LEVELS},
                mean_value=sum(r.value or 0.0 for r in scored) / n if n else 0.0,
                input_tokens=sum(r.input_tokens for r in members),
                output_tokens=sum(r.output_tokens for r in members),
                cost_usd=None
                if all(r.cost_usd is None for r in members)
                else sum(r.cost_usd or 0.0 for r in members),
            )
        )
    return summaries
