"""Inference that respects the design: trials of one task are correlated, so intervals cluster by task.

A run plays every task several times (trials), and the trials of one task share its difficulty (and,
across models or fault specs, its fault draws). Treating ``tasks × trials`` episodes as independent
makes intervals too narrow and paired tests too confident (issue 36 measured a within-task correlation
of 0.16 for greedy-retry, intervals about 15% too narrow). Everything here takes the task of every
observation and treats tasks as the independent units:

* **Cluster-robust variance** (`clustered_mean`): the CR1 sandwich estimator of a mean's variance with
  tasks as clusters, ``V = G/(G-1) · Σ_g (Σ_{i∈g} (y_i - ȳ))² / N²`` (G tasks, N observations). With
  one observation per task it is the usual ``s²/N``; with m trials per task it is the variance of the
  task means over G.
* **Rates and bounded means** (`clustered_rate`, `clustered_mean_interval`): the 95% Wilson interval
  with the *effective sample size* ``n* = N / deff · (t_{N-1} / t_{G-1})²``, where the design effect
  ``deff = V / V_independent`` (at least 1) comes from the cluster-robust variance and the ratio of t
  quantiles corrects for estimating it from G tasks (Korn & Graubard 1998; the Wilson form is the one
  Dean & Pagano 2015 recommend for clustered proportions). With one trial per task ``n* = N``: plain
  Wilson. When every observation is equal the data hold no estimate of the correlation: ``deff = 1``.
* **Paired differences** (`paired_difference`): pairs (a, b) on the same task and trial; the mean of
  ``b - a`` with its cluster-robust standard error, a t interval and a two-sided t test with G - 1
  degrees of freedom (for binary outcomes this is Obuchowski's 1998 clustered McNemar test, with a t
  reference), and the **minimum detectable difference** at this size, ``(t_{0.975} + t_{0.80}) · SE``
  (α = 0.05 two-sided, power 0.8).
* **Variance components** (`variance_components`): an episode's variance split by moments (ANOVA) into
  *task* (between tasks), *fault draw* (the within-task variance both sides share because they met the
  same draws of the same task and trial: the within-task covariance of the pairs) and *trial* (the rest
  of the within-task variance). Pairing removes what the sides share: the task and fault-draw parts.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any

#: Two-sided level of every interval and test here.
ALPHA = 0.05
#: Power of the minimum detectable difference.
POWER = 0.8
#: How the intervals are made, as the outputs name it.
RATE_METHOD = "Wilson, effective n from task-clustered variance (Korn-Graubard)"
PAIRED_METHOD = "paired difference, task-clustered (CR1) SE, t test with tasks - 1 df"
#: Below this a p-value prints as "< 0.001".
P_FLOOR = 0.001


def t_cdf(t: float, df: int) -> float:
    """P(T ≤ t) for Student's t with ``df`` (a positive integer) degrees of freedom, exactly.

    Abramowitz & Stegun 26.7.3-4: the two-sided probability as a finite series in θ = atan(t/√ν).
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 1:
        total, term = 0.0, math.cos(theta)
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= cos2 * (2 * k) / (2 * k + 1)
        central = 2 / math.pi * (theta + sin * total) if df > 1 else 2 * theta / math.pi
    else:
        total, term = 0.0, 1.0
        for k in range(1, df // 2 + 1):
            total += term
            term *= cos2 * (2 * k - 1) / (2 * k)
        central = sin * total
    central = min(1.0, max(0.0, central))
    return 0.5 + central / 2 if t >= 0 else 0.5 - central / 2


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (0 < p < 1).

    Bisection on the exact `t_cdf`; above 300 degrees of freedom the Cornish-Fisher expansion
    around the normal quantile (error below 1e-6 there).
    """
    if not 0 < p < 1:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p}")
    z = NormalDist().inv_cdf(p)
    if df > 300:
        return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    low, high = -1.0, 1.0
    while t_cdf(low, df) > p:
        low *= 2
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(80):
        mid = (low + high) / 2
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def wilson_score(p: float, n: float, z: float) -> tuple[float, float]:
    """The Wilson score interval at proportion ``p`` for a (possibly fractional) sample size ``n``."""
    if n <= 0:
        return (0.0, 1.0)
    p = min(1.0, max(0.0, p))
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def format_p(p: float | None) -> str:
    """A p-value as a reader reads it: ``< 0.001`` below the printed precision, else three decimals."""
    if p is None:
        return "–"
    return f"< {P_FLOOR:g}" if p < P_FLOOR else f"{p:.3f}"


def json_p(p: float | None) -> float | None:
    """A p-value for JSON: four significant digits, never rounded to 0."""
    return None if p is None else float(f"{p:.4g}")


@dataclass(frozen=True)
class ClusteredMean:
    """A mean of clustered observations with its cluster-robust variance."""

    mean: float
    #: Cluster-robust (CR1) variance of the mean; 0 with one cluster (no estimate).
    variance: float
    #: Observations and clusters (tasks).
    n: int
    clusters: int
    #: Design effect: the clustered variance over the independent one, at least 1.
    deff: float

    @property
    def se(self) -> float:
        """Standard error of the mean."""
        return math.sqrt(self.variance)

    @property
    def effective_n(self) -> float:
        """``n / deff`` corrected for the degrees of freedom of G clusters (Korn & Graubard 1998)."""
        if self.clusters < 2:
            return float(self.clusters)
        if self.n < 2:
            return float(self.n)
        ratio = t_quantile(1 - ALPHA / 2, self.n - 1) / t_quantile(1 - ALPHA / 2, self.clusters - 1)
        return self.n / self.deff * ratio * ratio


def clustered_mean(observations: Iterable[tuple[Hashable, float]]) -> ClusteredMean | None:
    """The mean of ``(cluster, value)`` observations with its CR1 variance; None when there are none."""
    by_cluster: dict[Hashable, list[float]] = {}
    for cluster, value in observations:
        by_cluster.setdefault(cluster, []).append(float(value))
    n = sum(len(v) for v in by_cluster.values())
    if n == 0:
        return None
    g = len(by_cluster)
    mean = sum(sum(v) for v in by_cluster.values()) / n
    if g < 2:
        return ClusteredMean(mean, 0.0, n, g, 1.0)
    residuals = [sum(x - mean for x in values) for values in by_cluster.values()]
    variance = g / (g - 1) * sum(e * e for e in residuals) / (n * n)
    squares = sum((x - mean) ** 2 for values in by_cluster.values() for x in values)
    independent = squares / (n - 1) / n if n > 1 else 0.0
    deff = max(1.0, variance / independent) if independent > 0 else 1.0
    return ClusteredMean(mean, variance, n, g, deff)


def clustered_mean_interval(
    observations: Iterable[tuple[Hashable, float]], bounds: tuple[float, float] = (0.0, 1.0)
) -> tuple[float, float, float, ClusteredMean] | None:
    """(mean, low, high, estimate): a 95% interval for the mean of bounded clustered values.

    The Wilson interval of the mean rescaled to [0, 1] (conservative: a value in [a, b] with mean μ has
    variance at most (μ - a)(b - μ)), taken at the effective sample size. None without observations.
    """
    estimate = clustered_mean(observations)
    if estimate is None:
        return None
    a, b = bounds
    z = NormalDist().inv_cdf(1 - ALPHA / 2)
    low, high = wilson_score((estimate.mean - a) / (b - a), estimate.effective_n, z)
    return (estimate.mean, a + low * (b - a), a + high * (b - a), estimate)


def clustered_rate(outcomes: Iterable[tuple[Hashable, bool]]) -> tuple[int, int, float, float, int]:
    """(successes, n, low, high, clusters): a rate's 95% interval with tasks as clusters."""
    items = [(cluster, 1.0 if ok else 0.0) for cluster, ok in outcomes]
    if not items:
        return (0, 0, 0.0, 1.0, 0)
    interval = clustered_mean_interval(items)
    assert interval is not None
    _, low, high, estimate = interval
    return (round(sum(v for _, v in items)), len(items), low, high, estimate.clusters)


@dataclass(frozen=True)
class Components:
    """An episode's variance split into task, fault-draw and trial parts (moments; see the module)."""

    task: float
    fault_draw: float
    trial: float
    #: The same split of the paired difference b - a: between tasks and within a task.
    difference_task: float
    difference_within: float
    #: Mean trials per task.
    trials: float

    @property
    def total(self) -> float:
        """The episode variance (the sum of the three parts)."""
        return self.task + self.fault_draw + self.trial

    def shares(self) -> dict[str, float | None]:
        """Each part as a share of the total (None when there is no variance at all)."""
        total = self.total
        return {
            "task": None if total <= 0 else self.task / total,
            "fault_draw": None if total <= 0 else self.fault_draw / total,
            "trial": None if total <= 0 else self.trial / total,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "task": round(self.task, 6),
            "fault_draw": round(self.fault_draw, 6),
            "trial": round(self.trial, 6),
            "shares": {k: None if v is None else round(v, 4) for k, v in self.shares().items()},
            "difference": {
                "task": round(self.difference_task, 6),
                "within": round(self.difference_within, 6),
            },
            "trials_per_task": round(self.trials, 3),
        }


def _task_and_within(values: Mapping[Hashable, Sequence[float]]) -> tuple[float, float, float]:
    """(between-task component, pooled within-task variance, mean trials per task) by moments."""
    g = len(values)
    n = sum(len(v) for v in values.values())
    means = {c: sum(v) / len(v) for c, v in values.items()}
    within_df = n - g
    within = (
        sum((x - means[c]) ** 2 for c, v in values.items() for x in v) / within_df if within_df > 0 else 0.0
    )
    trials = n / g if g else 0.0
    if g < 2:
        return (0.0, within, trials)
    grand = sum(means.values()) / g
    between = sum((m - grand) ** 2 for m in means.values()) / (g - 1)
    # The variance of a task mean holds the task part and 1/m of the within-task part.
    harmonic = g / sum(1 / len(v) for v in values.values())
    return (max(0.0, between - within / harmonic), within, trials)


def variance_components(pairs: Sequence[tuple[Hashable, float, float]]) -> Components:
    """Split the variance of ``(task, a, b)`` pairs into task, fault-draw and trial components.

    Per side: the between-task component and the pooled within-task variance (one-way ANOVA by
    moments, negative estimates set to 0). The fault-draw part is the within-task covariance of the
    two sides (what they share because the same task and trial drew the same faults), at most the
    smaller side's within-task variance; the trial part is the rest of the within-task variance. The
    paired difference's own between-task and within-task components are what a plan needs.
    """
    sides: list[dict[Hashable, list[float]]] = [{}, {}, {}]
    for cluster, a, b in pairs:
        sides[0].setdefault(cluster, []).append(a)
        sides[1].setdefault(cluster, []).append(b)
        sides[2].setdefault(cluster, []).append(b - a)
    task_a, within_a, trials = _task_and_within(sides[0])
    task_b, within_b, _ = _task_and_within(sides[1])
    diff_task, diff_within, _ = _task_and_within(sides[2])
    within = (within_a + within_b) / 2
    # Within-task covariance of the sides: (σ²_a + σ²_b - σ²_{b-a}) / 2.
    shared = (within_a + within_b - diff_within) / 2
    fault_draw = min(max(0.0, shared), min(within_a, within_b))
    return Components(
        task=(task_a + task_b) / 2,
        fault_draw=fault_draw,
        trial=max(0.0, within - fault_draw),
        difference_task=diff_task,
        difference_within=diff_within,
        trials=trials,
    )


@dataclass(frozen=True)
class PairedDifference:
    """The mean paired difference b - a with its clustered interval, test and detectable size."""

    delta: float
    se: float
    low: float
    high: float
    p_value: float
    #: Minimum detectable difference at this size (α 0.05 two-sided, power 0.8).
    mde: float
    pairs: int
    clusters: int
    components: Components

    @property
    def significant(self) -> bool:
        """Whether the test rejects no difference at α = 0.05."""
        return self.p_value < ALPHA

    @property
    def verdict(self) -> str:
        """``beyond the noise``, ``inside the noise floor`` or ``no detectable difference``, in words."""
        if self.pairs == 0:
            return "no pairs"
        if self.se == 0 and self.delta == 0:
            return "no difference: identical on every pair"
        if not self.significant:
            return "no detectable difference (inside the noise floor)"
        if abs(self.delta) < self.mde:
            return "inside the noise floor (significant, but smaller than the detectable size)"
        return "beyond the noise"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "delta": round(self.delta, 4),
            "ci95": [round(self.low, 4), round(self.high, 4)],
            "se": round(self.se, 5),
            "p_value": json_p(self.p_value),
            "mde": round(self.mde, 4),
            "pairs": self.pairs,
            "tasks": self.clusters,
            "verdict": self.verdict,
            "beyond_noise": self.significant and abs(self.delta) >= self.mde,
            "method": PAIRED_METHOD,
            "components": self.components.to_dict(),
        }


def detectable_multiplier(clusters: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """``t_{1-α/2} + t_{power}`` with ``clusters - 1`` degrees of freedom (normal quantiles when ≤ 1)."""
    if clusters < 2:
        return NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return t_quantile(1 - alpha / 2, clusters - 1) + t_quantile(power, clusters - 1)


def paired_difference(
    pairs: Sequence[tuple[Hashable, float, float]], limits: tuple[float, float] | None = None
) -> PairedDifference:
    """The paired difference of ``(task, a, b)`` pairs: b - a, clustered by task (see the module).

    ``limits``: the range a difference can take (-1..1 for two rates); the interval is cut to it.
    """
    found = _paired_difference(pairs)
    if limits is None:
        return found
    low, high = limits
    return replace(found, low=min(max(found.low, low), high), high=max(min(found.high, high), low))


def _paired_difference(pairs: Sequence[tuple[Hashable, float, float]]) -> PairedDifference:
    components = variance_components(pairs)
    estimate = clustered_mean((cluster, b - a) for cluster, a, b in pairs)
    if estimate is None:
        return PairedDifference(0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0, 0, components)
    delta, se, g = estimate.mean, estimate.se, estimate.clusters
    if g < 2:  # one task: no estimate of the noise at all
        return PairedDifference(delta, math.inf, -1.0, 1.0, 1.0, math.inf, estimate.n, g, components)
    if se == 0:
        # Every task shows the same difference: no spread to estimate. Exact sign test over tasks.
        p = 1.0 if delta == 0 else min(1.0, 2 * 0.5**g)
        return PairedDifference(delta, 0.0, delta, delta, p, 0.0, estimate.n, g, components)
    df = g - 1
    half = t_quantile(1 - ALPHA / 2, df) * se
    p = 2 * (1 - t_cdf(abs(delta) / se, df))
    mde = detectable_multiplier(g) * se
    return PairedDifference(
        delta, se, delta - half, delta + half, max(p, 0.0), mde, estimate.n, g, components
    )


def tasks_needed(
    effect: float, components: Components, trials: int, alpha: float = ALPHA, power: float = POWER
) -> int:
    """Tasks needed to detect a paired difference of ``effect`` with ``trials`` trials per task.

    The variance of the mean difference over G tasks of R trials is ``σ²_task/G + σ²_within/(G·R)``
    (the difference's own components); G solves ``(t_{1-α/2} + t_{power}) · SE = effect`` (normal
    quantiles for the first guess, then the t quantiles of that many tasks).
    """
    if effect <= 0:
        raise ValueError(f"the effect must be positive, got {effect}")
    per_task = components.difference_task + components.difference_within / max(1, trials)
    if per_task <= 0:
        return 2
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    g = max(2, math.ceil(z * z * per_task / (effect * effect)))
    for _ in range(20):  # the t quantiles of g tasks widen it a little for small g
        k = detectable_multiplier(g, alpha, power)
        better = max(2, math.ceil(k * k * per_task / (effect * effect)))
        if better == g:
            break
        g = better
    return g
