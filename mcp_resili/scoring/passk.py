"""pass^k, the reliability surface R(k, ε, λ), its normalised volume and degradation gradients.

* **pass^k** (tau-bench's unbiased estimator): a task with ``c`` successes in ``n`` valid trials
  contributes ``C(c, k) / C(n, k)``, the chance that ``k`` trials drawn without replacement all
  pass; pass^k is the mean over tasks. Only trials that were scored count as valid: a trial that
  ended in an infrastructure error is counted apart and shown, never silently dropped.
* **One task set per curve**: pass^1 … pass^K of one cell average the *same* tasks, those with at
  least ``K`` valid trials (``K``: the most trials any task of the cell has, i.e. ``--trials``).
  A task with fewer is left out at every ``k`` and counted as excluded, so R(1) and R(2) never
  average different tasks and a task with 1 surviving trial of 4 never counts 100% at k = 1
  (tau2-bench issue #493).
* **Surface**: ``R(k, ε, λ)`` = pass^k of the ε-perturbed tasks under fault profile λ, over one task
  set for the whole surface: the tasks with at least ``K`` valid trials in *every* (ε, λ) cell, so
  a difference between two points is never a difference of task mix.
* **Intervals**: every point is a mean over ``n`` tasks of per-task values in [0, 1]. Such a value
  has variance at most ``μ(1 − μ)``, so the Wilson score interval with ``n`` tasks (`wilson`) is a
  conservative 95% interval for the mean over the task distribution; it covers both the choice of
  tasks and the trials drawn, and stays sensible at 0 and 1.
* **Normalised volume**: with ``K_V`` = `VOLUME_K` = 2 (the paper's k), ``E`` the ε values and
  ``Λ`` the λ values run::

      V = 1 / (K_V · |E| · |Λ|) · Σ_{k=1..K_V} Σ_{ε∈E} Σ_{λ∈Λ} R(k, ε, λ)

  the volume under the surface with each axis rescaled to unit length and every grid point of equal
  weight; it lies in [0, 1]. The k axis is fixed at 1..K_V rather than 1..``--trials`` (the mean over
  all k up to ``--trials`` would fall as trials are added). V needs at least K_V trials. Since the
  task set is fixed, V is also the mean over tasks of each task's own mean, which gives its interval.
* **When V depends on the trial count**: the unbiased estimator assumes a task's trials are
  exchangeable, as they are under ``react`` (each trial starts afresh): then runs with ``--trials 2``
  and ``--trials 10`` estimate the same V, only with different variance. Under an architecture whose
  trials learn from earlier ones (`LEARNING_ARCHITECTURES`: ``reflexion`` carries memory of failed
  trials), they are not: later trials are better, and C(c, k)/C(n, k) over more trials draws more
  of them, so V moved with ``--trials`` (0.810 / 0.839 / 0.869 at 2 / 4 / 6 trials, issue 36). For
  those architectures pass^k is taken **per trial index** (``sequential``): a task counts 1 at k when
  its first k trials (indices 0..k-1) all passed. That does not depend on how many trials follow, so
  V and the curve are the same at any ``--trials`` ≥ K_V, and comparable with ``react``'s (whose
  unbiased estimate has the same expectation); the learning itself shows in the success rate per
  trial index (`per_trial_rates`).
* **Gradients**: the mean finite-difference slope of ``R`` along one axis, over all pairs of
  neighbouring grid values with the other two axes fixed: ``∂R/∂λ`` and ``∂R/∂ε`` per 0.1, and
  ``ΔR`` per extra trial for ``k``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The k axis of the normalised volume: k = 1..VOLUME_K, whatever ``--trials`` is.
VOLUME_K = 2
#: Architectures whose trials learn from earlier trials of the same task (not exchangeable):
#: their pass^k is taken per trial index (see the module).
LEARNING_ARCHITECTURES = frozenset({"reflexion"})
#: z for a two-sided 95% interval.
Z95 = 1.959964


def pass_hat_k(successes: int, trials: int, k: int) -> float:
    """``C(c, k) / C(n, k)``: the unbiased estimate that ``k`` of the ``n`` trials all pass."""
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be within 0..trials, got {successes} of {trials}")
    if not 1 <= k <= trials:
        raise ValueError(f"k must be within 1..{trials} (the valid trials), got {k}")
    return math.comb(successes, k) / math.comb(trials, k)


def wilson(mean: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a mean of ``n`` values in [0, 1] (conservative; see the module)."""
    if n == 0:
        return (0.0, 1.0)
    p = min(1.0, max(0.0, mean))
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class TaskTrials:
    """One task's trials in one cell of the grid."""

    task_id: str
    successes: int
    valid: int
    infrastructure_errors: int = 0
    #: Each trial's outcome by trial index (True: passed, False: failed, None: an infrastructure
    #: error or not run); needed for pass^k per trial index (``sequential``).
    ordered: tuple[bool | None, ...] = ()

    @property
    def planned(self) -> int:
        """Trials run, valid or not."""
        return self.valid + self.infrastructure_errors

    def first_valid(self, count: int) -> bool:
        """Whether trials 0..count-1 were all run and scored."""
        return len(self.ordered) >= count and all(o is not None for o in self.ordered[:count])

    def estimate(self, k: int, sequential: bool) -> float:
        """The task's pass^k: the unbiased estimate, or per trial index (its first k trials passed)."""
        if sequential:
            return 1.0 if all(self.ordered[:k]) else 0.0
        return pass_hat_k(self.successes, self.valid, k)

    def enough(self, count: int, sequential: bool) -> bool:
        """Whether pass^count can use the task: ``count`` valid trials (the first ones, if sequential)."""
        return self.first_valid(count) if sequential else self.valid >= count


@dataclass(frozen=True)
class PassK:
    """pass^k at one ``k`` over a fixed task set: the value, its n, interval and excluded tasks."""

    k: int
    value: float | None
    n: int
    low: float
    high: float
    excluded: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "k": self.k,
            "value": _round(self.value),
            "n": self.n,
            "ci95": [round(self.low, 4), round(self.high, 4)],
            "excluded": len(self.excluded),
            "excluded_tasks": list(self.excluded),
        }


def pass_k(
    tasks: Sequence[TaskTrials], k: int, *, min_valid: int | None = None, sequential: bool = False
) -> PassK:
    """pass^k over the tasks with at least ``max(k, min_valid)`` valid trials; the others are excluded.

    Pass the curve's largest k as ``min_valid`` to keep one task set for every k (`pass_k_curve`).
    ``sequential``: trials learn (`LEARNING_ARCHITECTURES`), so pass^k is per trial index: the share of
    tasks whose first k trials passed, over the tasks whose first ``max(k, min_valid)`` trials are valid.
    """
    need = max(k, min_valid or k)
    counted = [t for t in tasks if t.enough(need, sequential)]
    excluded = tuple(sorted(t.task_id for t in tasks if not t.enough(need, sequential)))
    if not counted:
        return PassK(k, None, 0, 0.0, 1.0, excluded)
    value = sum(t.estimate(k, sequential) for t in counted) / len(counted)
    return PassK(k, value, len(counted), *wilson(value, len(counted)), excluded)


def estimator_name(sequential: bool) -> str:
    """How pass^k was estimated, as the outputs name it."""
    return (
        "per trial index: the first k trials all passed (trials learn)"
        if sequential
        else "unbiased C(c,k)/C(n,k) (exchangeable trials)"
    )


def curve_length(tasks: Iterable[TaskTrials]) -> int:
    """``K``: the most trials any task has (``--trials`` of the run)."""
    return max((t.planned for t in tasks), default=0)


def pass_k_curve(
    tasks: Sequence[TaskTrials], k_max: int | None = None, *, sequential: bool = False
) -> list[PassK]:
    """pass^1 … pass^K over one task set: the tasks with at least ``K`` valid trials."""
    top = curve_length(tasks) if k_max is None else k_max
    return [pass_k(tasks, k, min_valid=top, sequential=sequential) for k in range(1, top + 1)]


def per_trial_rates(tasks: Sequence[TaskTrials]) -> list[PassK]:
    """The success rate at each trial index (k here is the index + 1), over the tasks that ran it.

    One trial per task per index, so the tasks are the independent units (Wilson over n tasks). Under
    an architecture whose trials learn this is the learning curve.
    """
    top = max((len(t.ordered) for t in tasks), default=0)
    out = []
    for index in range(top):
        outcomes = [t.ordered[index] for t in tasks if len(t.ordered) > index]
        valid = [o for o in outcomes if o is not None]
        missing = tuple(
            sorted(t.task_id for t in tasks if len(t.ordered) <= index or t.ordered[index] is None)
        )
        if not valid:
            out.append(PassK(index + 1, None, 0, 0.0, 1.0, missing))
            continue
        value = sum(valid) / len(valid)
        out.append(PassK(index + 1, value, len(valid), *wilson(value, len(valid)), missing))
    return out


#: A surface point's coordinates: (k, ε, λ).
Point = tuple[int, float, float]


@dataclass(frozen=True)
class SurfacePoint:
    """``R(k, ε, λ)`` with its n (tasks) and 95% interval."""

    k: int
    eps: float
    lam: float
    value: float
    n: int
    low: float
    high: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "k": self.k,
            "eps": self.eps,
            "lambda": self.lam,
            "R": round(self.value, 4),
            "n": self.n,
            "ci95": [round(self.low, 4), round(self.high, 4)],
        }


@dataclass(frozen=True)
class Surface:
    """A reliability surface over one fixed task set, with its normalised volume."""

    points: tuple[SurfacePoint, ...]
    #: The task set every point averages.
    tasks: tuple[str, ...]
    #: (ε, λ) → tasks of that cell left out of the surface (too few valid trials here or elsewhere).
    excluded: Mapping[tuple[float, float], tuple[str, ...]]
    #: K: the k axis runs 1..K.
    trials: int
    volume: float | None
    volume_low: float
    volume_high: float
    #: Why there is no volume (too few trials, no task in every cell), else "".
    volume_note: str = ""
    #: Whether pass^k is per trial index (trials learn) rather than the unbiased estimator.
    sequential: bool = False

    def values(self) -> dict[Point, float]:
        """(k, ε, λ) → R."""
        return {(p.k, p.eps, p.lam): p.value for p in self.points}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "trials": self.trials,
            "estimator": estimator_name(self.sequential),
            "tasks": len(self.tasks),
            "excluded": [
                {"eps": eps, "lambda": lam, "excluded": len(ids), "excluded_tasks": list(ids)}
                for (eps, lam), ids in sorted(self.excluded.items())
            ],
            "points": [p.to_dict() for p in self.points],
            "volume": _round(self.volume),
            "volume_ci95": [round(self.volume_low, 4), round(self.volume_high, 4)],
            "volume_n": len(self.tasks) if self.volume is not None else 0,
            "volume_k": VOLUME_K,
            "volume_note": self.volume_note,
            "gradients": gradients(self.values()),
        }


def surface(
    cells: Mapping[tuple[float, float], Sequence[TaskTrials]], *, sequential: bool = False
) -> Surface:
    """The surface of (ε, λ) → that cell's tasks: one task set, every point with n and interval.

    ``sequential``: trials learn, so every point is pass^k per trial index (see the module).
    """
    top = max((curve_length(trials) for trials in cells.values()), default=0)
    full = [{t.task_id: t for t in trials if t.enough(top, sequential)} for trials in cells.values()]
    common = set.intersection(*(set(f) for f in full)) if full else set()
    tasks = tuple(sorted(common))
    excluded = {
        cell: tuple(sorted(t.task_id for t in trials if t.task_id not in common))
        for cell, trials in cells.items()
    }
    points: list[SurfacePoint] = []
    per_task: dict[str, list[float]] = {task: [] for task in tasks}
    for (eps, lam), trials in sorted(cells.items()):
        members = [t for t in trials if t.task_id in common]
        for k in range(1, top + 1):
            if not members:
                continue
            estimates = [t.estimate(k, sequential) for t in members]
            value = sum(estimates) / len(estimates)
            points.append(SurfacePoint(k, eps, lam, value, len(members), *wilson(value, len(members))))
            if k <= VOLUME_K:
                for t, estimate in zip(members, estimates, strict=True):
                    per_task[t.task_id].append(estimate)
    note = ""
    if not tasks:
        note = "no task has enough valid trials in every cell"
    elif top < VOLUME_K:
        note = f"the volume needs at least {VOLUME_K} trials per task (k = 1..{VOLUME_K}); ran {top}"
    if note:
        return Surface(tuple(points), tasks, excluded, top, None, 0.0, 1.0, note, sequential)
    # Every task has a value at every (k <= K_V, ε, λ), so the mean of the task means is V.
    task_means = [sum(v) / len(v) for v in per_task.values()]
    volume = sum(task_means) / len(task_means)
    return Surface(tuple(points), tasks, excluded, top, volume, *wilson(volume, len(tasks)), "", sequential)


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return sum(items) / len(items) if items else None


def gradients(surface: Mapping[Point, float]) -> dict[str, float | None]:
    """Mean slopes of R along λ and ε (per 0.1) and along k (per extra trial)."""
    ks = sorted({p[0] for p in surface})
    epss = sorted({p[1] for p in surface})
    lams = sorted({p[2] for p in surface})

    def slopes(axis: int, values: list[Any], scale: float) -> float | None:
        out = []
        for point, r in surface.items():
            index = values.index(point[axis])
            if index + 1 == len(values):
                continue
            nxt = list(point)
            nxt[axis] = values[index + 1]
            other = surface.get((int(nxt[0]), float(nxt[1]), float(nxt[2])))
            if other is not None:
                out.append((other - r) / (values[index + 1] - point[axis]) * scale)
        return _mean(out)

    return {
        "lambda_per_0.1": _round(slopes(2, lams, 0.1)),
        "eps_per_0.1": _round(slopes(1, epss, 0.1)),
        "k_per_trial": _round(slopes(0, ks, 1.0)),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
