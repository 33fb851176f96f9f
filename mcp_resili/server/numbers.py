"""Numbers JSON cannot carry, or no tool can work with."""

from __future__ import annotations

import math
from typing import Any

#: Largest magnitude of a number in tool arguments: the interoperable JSON range (RFC 7493, I-JSON,
#: 2**53 - 1). Larger numbers, NaN and infinities are refused before any tool runs, so no tool meets an
#: overflow and no output carries a number that JSON cannot hold.
MAX_NUMBER = 2**53 - 1


def unusable_number(value: Any, limit: float = MAX_NUMBER, path: str = "") -> str | None:
    """The path of the first number in ``value`` that is NaN, infinite or beyond ``limit``, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) and abs(value) <= limit else path or "(value)"
    if isinstance(value, int) and not isinstance(value, bool):
        return None if abs(value) <= limit else path or "(value)"
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = unusable_number(item, limit, f"{path}/{key}" if path else str(key))
        if found is not None:
            return found
    return None


def non_finite_number(value: Any) -> str | None:
    """The path of the first NaN or infinity in ``value`` (JSON has neither), or None."""
    return unusable_number(value, math.inf)
