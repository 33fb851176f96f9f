"""pass^k, the reliability surface R(k, ε, λ), its normalised volume and degradation gradients.

* **pass^k** (tau-bench's unbiased estimator): a task with ``c`` successes in ``n`` valid trials
  contributes ``C(c, k) / C(n, k)``, the chance that ``k`` trials drawn without replacement all
  pass; pass^k is the mean over tasks. Only trials that were scored count as valid: a trial that
  ended in an infrastructure error is counted apart and shown, never silently dropped; a task with
  fewer than ``k`` valid trials does not enter pass^k at that ``k`` and is listed as flagged.
* **Surface**: ``R(k, ε, λ)`` = pass^k of the ε-perturbed tasks under fault profile λ.
* **Normalised volume**: the mean of ``R`` over every measured grid point (k = 1..K, each ε and
  λ run). It is the volume under the surface with each axis rescaled so the grid is a unit cube and
  every grid point weighs the same; it lies in [0, 1] (1: every trial passes everywhere).
* **Gradients**: the mean finite-difference slope of ``R`` along one axis, over all pairs of
  neighbouring grid values with the other two axes fixed: ``∂R/∂λ`` and ``∂R/∂ε`` per 0.1, and
  ``ΔR`` per extra trial for ``k``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def pass_hat_k(successes: int, trials: int, k: int) -> float:
    """``C(c, k) / C(n, k)``: the unbiased estimate that ``k`` of the ``n`` trials all pass."""
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be within 0..trials, got {successes} of {trials}")
    if not 1 <= k <= trials:
        raise ValueError(f"k must be within 1..{trials} (the valid trials), got {k}")
    return math.comb(successes, k) / math.comb(trials, k)


@dataclass(frozen=True)
class TaskTrials:
    """One task's trials in one cell of the grid."""

    task_id: str
    successes: int
    valid: int
    infrastructure_errors: int = 0


@dataclass(frozen=True)
class PassK:
    """pass^k at one ``k``: the value, how many tasks it averages and which tasks were left out."""

    k: int
    value: float | None
    tasks_counted: int
    flagged: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "k": self.k,
            "value": None if self.value is None else round(self.value, 4),
            "tasks_counted": self.tasks_counted,
            "flagged_tasks": list(self.flagged),
        }


def pass_k(tasks: Sequence[TaskTrials], k: int) -> PassK:
    """pass^k over ``tasks``; tasks with fewer than ``k`` valid trials are flagged, not counted."""
    counted = [t for t in tasks if t.valid >= k]
    flagged = tuple(sorted(t.task_id for t in tasks if t.valid < k))
    value = sum(pass_hat_k(t.successes, t.valid, k) for t in counted) / len(counted) if counted else None
    return PassK(k, value, len(counted), flagged)


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return sum(items) / len(items) if items else None


def volume(surface: Mapping[tuple[int, float, float], float]) -> float | None:
    """Normalised volume: the mean of R over the grid points (see the module docstring)."""
    return _mean(surface.values())


def gradients(surface: Mapping[tuple[int, float, float], float]) -> dict[str, float | None]:
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
