"""Summaries of stored episodes: rates per (model, architecture, faults, variant), 95% intervals.

Trials of one task are correlated, so the rates of stored episodes get intervals clustered by task
(`mcp_resili.report.clustered`: Wilson at the effective sample size); `rate` (count, n) stays the plain
Wilson interval for counts of independent units.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from mcp_resili.constants import BREAKDOWN_KEYS as BREAKDOWN_KEYS  # defined there for the CLI's help
from mcp_resili.report.clustered import RATE_METHOD, clustered_rate
from mcp_resili.report.svg import Bar
from mcp_resili.scoring.passk import Z95, wilson
from mcp_resili.store import EpisodeRow
from mcp_resili.tasks.order import natural_key


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval for a binomial rate (well behaved at 0 and 1, unlike Wald)."""
    return wilson(successes / n if n else 0.0, n, z)


@dataclass(frozen=True)
class Rate:
    """A rate with its count, denominator and 95% interval."""

    count: int
    n: int
    low: float
    high: float

    @property
    def value(self) -> float | None:
        """Count / n; None when n is 0 (no episode to measure: not a rate of 0)."""
        return self.count / self.n if self.n else None

    def bar(self, label: str) -> Bar | None:
        """The rate as a chart bar with its interval; None (no bar) for a rate over no episodes."""
        value = self.value
        return None if value is None else Bar(label, value, self.low, self.high)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        value = self.value
        return {
            "rate": None if value is None else round(value, 4),
            "count": self.count,
            "n": self.n,
            "ci95": [round(self.low, 4), round(self.high, 4)],
        }


def rate(count: int, n: int) -> Rate:
    """A `Rate` with its Wilson interval (for independent units: tasks, or one episode per task)."""
    low, high = wilson_interval(count, n)
    return Rate(count, n, low, high)


def rate_by_task(outcomes: Iterable[tuple[str, bool]]) -> Rate:
    """A `Rate` of ``(task id, outcome)`` observations with its interval clustered by task.

    The trials of a task are correlated: the interval is Wilson's at the effective sample size
    (`mcp_resili.report.clustered.clustered_rate`, named by `RATE_METHOD`).
    """
    count, n, low, high, _ = clustered_rate(outcomes)
    return Rate(count, n, low, high)


def episode_rate(rows: Iterable[EpisodeRow], counts: Callable[[EpisodeRow], bool]) -> Rate:
    """The share of ``rows`` for which ``counts`` holds, its interval clustered by task."""
    return rate_by_task((row.task_id, counts(row)) for row in rows)


@dataclass(frozen=True)
class ComponentColumn:
    """A score component summarised per group as an extra column of the outcome table.

    A suite declares its own (`Suite.summary_columns`, e.g. ResiliBench's bounds): the terminal table,
    the HTML report, ``run --json``, exports and ``compare`` show them for that suite's runs only.
    """

    #: Key in the group's JSON (``bound_ii``).
    key: str
    #: Column title (``bound ii %``), shown as a percentage.
    title: str
    #: The score component summarised (``bound_ii_full_possible``).
    component: str
    #: ``share``: the share of true values, with its interval (a `Rate`); ``mean``: the mean of numbers.
    summary: Literal["share", "mean"]

    def of(self, scored: Sequence[EpisodeRow]) -> Rate | float | None:
        """The column's value over ``scored`` episodes; None where no episode carries the component."""
        values = [
            c[self.component]
            for r in scored
            if (c := (r.score or {}).get("components", {})).get(self.component) is not None
        ]
        if not values:
            return None
        if self.summary == "share":
            return rate_by_task(
                (r.task_id, bool(c[self.component]))
                for r in scored
                if (c := (r.score or {}).get("components", {})).get(self.component) is not None
            )
        return sum(float(v) for v in values) / len(values)


def shown_columns(
    summaries: Sequence[GroupSummary], columns: Sequence[ComponentColumn]
) -> tuple[ComponentColumn, ...]:
    """The suite's columns a table shows: all of them once any group has a value for any."""
    known = any(value is not None for s in summaries for value in s.columns.values())
    return tuple(columns) if known else ()


def column_value(summary: GroupSummary, column: ComponentColumn) -> float | None:
    """A group's value of ``column`` as a number (a share's rate), None where unknown."""
    value = summary.columns.get(column.key)
    return value.value if isinstance(value, Rate) else value


@dataclass(frozen=True)
class GroupSummary:
    """Outcome levels for one (model, architecture, faults, variant) group.

    Infrastructure errors are excluded from the denominators and counted on their own, never dropped.
    """

    model: str
    #: The agent architecture (``react``, ``reflexion``).
    architecture: str
    faults: str
    variant: str
    episodes: int
    scored: int
    infrastructure_errors: int
    levels: dict[str, Rate]
    #: Mean value of the scored episodes; None when none was scored (all infrastructure errors).
    mean_value: float | None
    #: Values of the extra grouping keys (`BREAKDOWN_KEYS`) that define this group, if any.
    breakdown: dict[str, str] = field(default_factory=dict)
    #: The suite's `ComponentColumn` values by key (a `Rate`, a mean, or None where unknown).
    columns: dict[str, Rate | float | None] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    #: USD over every episode (infrastructure errors cost money too); ``None`` when no price is known.
    cost_usd: float | None = None
    #: Distinct tasks among the scored episodes (the clusters of the intervals).
    tasks: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``ci_method`` names how the level intervals were made)."""
        data = asdict(self)
        data["ci_method"] = RATE_METHOD
        del data["columns"]  # each column is a key of its own, placed where the suite's JSON had it
        data["levels"] = {k: v.to_dict() for k, v in self.levels.items()}
        data["mean_value"] = None if self.mean_value is None else round(self.mean_value, 4)
        for key, value in self.columns.items():
            data[key] = (
                value.to_dict() if isinstance(value, Rate) else None if value is None else round(value, 4)
            )
        data["cost_usd"] = None if self.cost_usd is None else round(self.cost_usd, 6)
        return data


LEVELS = ("full", "partial", "failure")


def variant_flaw(variant: str) -> tuple[str, str]:
    """(flaw type, severity) of a variant string; ("none", "none") for unflawed variants."""
    parts = variant.split(":")
    if parts[0] != "flawed" or len(parts) < 2:
        return ("none", "none")
    return (parts[1], parts[2] if len(parts) > 2 and parts[2] else "severe")


def _breakdown(
    row: EpisodeRow, by: Sequence[str], task_info: Callable[[str], Mapping[str, str]] | None
) -> tuple[str, ...]:
    flaw, severity = variant_flaw(row.variant)
    info = dict(task_info(row.task_id)) if task_info is not None else {}
    values = {"flaw": flaw, "severity": severity, **info}
    return tuple(str(values.get(key, "?")) for key in by)


class _Group:
    """Running counts of one group: what `GroupSummary` needs, without keeping its rows.

    The rates' intervals cluster by task (`rate_by_task`), so each task keeps one byte per scored
    episode (its level, and per share column its value), in the order the rows came: the same
    observations, in the same order, as the rows themselves would give.
    """

    __slots__ = (
        "cost",
        "episodes",
        "input_tokens",
        "levels",
        "means",
        "output_tokens",
        "priced",
        "scored",
        "shares",
        "value",
    )

    def __init__(self, columns: Sequence[ComponentColumn]) -> None:
        self.episodes = self.scored = self.input_tokens = self.output_tokens = 0
        self.value = self.cost = 0.0
        self.priced = False
        #: Per task (first seen first), each scored episode's level (its index in `LEVELS`, or 255).
        self.levels: dict[str, bytearray] = {}
        #: Per share column, per task, each carrying episode's value (1 true, 0 false).
        self.shares: dict[str, dict[str, bytearray]] = {c.key: {} for c in columns if c.summary == "share"}
        #: Per mean column: [episodes carrying the component, the sum of its values].
        self.means: dict[str, list[float]] = {c.key: [0, 0.0] for c in columns if c.summary == "mean"}

    def add(self, row: EpisodeRow, columns: Sequence[ComponentColumn]) -> None:
        self.episodes += 1
        self.input_tokens += row.input_tokens
        self.output_tokens += row.output_tokens
        if row.cost_usd is not None:
            self.priced = True
            self.cost += row.cost_usd
        if row.label is None:
            return
        self.scored += 1
        self.value += row.value or 0.0
        level = LEVELS.index(row.label) if row.label in LEVELS else 255
        self.levels.setdefault(row.task_id, bytearray()).append(level)
        if not columns:
            return
        components = (row.score or {}).get("components", {})
        for column in columns:
            value = components.get(column.component)
            if value is None:
                continue
            if column.summary == "share":
                self.shares[column.key].setdefault(row.task_id, bytearray()).append(1 if value else 0)
            else:
                counts = self.means[column.key]
                counts[0] += 1
                counts[1] += float(value)

    def level(self, level: str) -> Rate:
        index = LEVELS.index(level)
        return rate_by_task((task, code == index) for task, codes in self.levels.items() for code in codes)

    def column(self, column: ComponentColumn) -> Rate | float | None:
        if column.summary == "share":
            by_task = self.shares[column.key]
            if not by_task:
                return None
            return rate_by_task((task, bool(v)) for task, values in by_task.items() for v in values)
        n, total = self.means[column.key]
        return total / n if n else None


def summarize(
    rows: Iterable[EpisodeRow],
    by: Sequence[str] = (),
    task_info: Callable[[str], Mapping[str, str]] | None = None,
    columns: Sequence[ComponentColumn] = (),
) -> list[GroupSummary]:
    """Group rows by (model, architecture, faults, variant, *by) and compute level rates.

    ``by`` takes names from `BREAKDOWN_KEYS`; ``task_info(task_id)`` supplies ``task_type`` and
    ``complexity`` (a task it does not know gives "?"); ``columns`` are the suite's own
    (`ComponentColumn`). The rows are read once and not kept: any number of them (a run streamed
    from its store) takes the same memory.
    """
    unknown = [key for key in by if key not in BREAKDOWN_KEYS]
    if unknown:
        raise ValueError(f"unknown breakdown key(s) {unknown}; choose from {', '.join(BREAKDOWN_KEYS)}")
    groups: dict[tuple[str, ...], _Group] = {}
    for row in rows:
        key = (row.model, row.architecture, row.faults, row.variant, *_breakdown(row, by, task_info))
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(columns)
        group.add(row, columns)
    summaries = []
    for (model, architecture, faults, variant, *extra), group in sorted(
        groups.items(), key=lambda item: [natural_key(part) for part in item[0]]
    ):
        n = group.scored
        summaries.append(
            GroupSummary(
                model=model,
                architecture=architecture,
                faults=faults,
                variant=variant,
                episodes=group.episodes,
                scored=n,
                infrastructure_errors=group.episodes - n,
                levels={level: group.level(level) for level in LEVELS},
                mean_value=group.value / n if n else None,
                breakdown=dict(zip(by, extra, strict=True)),
                columns={column.key: group.column(column) for column in columns},
                input_tokens=group.input_tokens,
                output_tokens=group.output_tokens,
                cost_usd=group.cost if group.priced else None,
                tasks=len(group.levels),
            )
        )
    return summaries
