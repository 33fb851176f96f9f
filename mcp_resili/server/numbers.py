"""Numbers JSON cannot carry, or no tool can work with."""

from __future__ import annotations

import math
from typing import Any

#: Largest magnitude of a number in tool arguments: the interoperable JSON range (RFC 7493, I-JSON,
#: 2**53 - 1). Larger numbers, NaN and infinities are refused before any tool runs, so no tool meets an
#: overflow and no output carries a number that JSON cannot hold.
MAX_NUMBER = 2**53 - 1


def unusable_number(value: Any, limit: float = MAX_NUMBER) -> str | None:
    """The path of the first number in ``value`` that is NaN, infinite or beyond ``limit``, or None."""
    # Every call's arguments and every result are checked, and almost none hold such a number: a flat
    # walk says whether there is one; only then does the recursive walk build its path.
    return _first_unusable(value, limit, "") if _any_unusable(value, limit) else None


#: JSON text with each digit as ``0``, ``e`` and ``E`` as ``e``, anything else as a space.
_NUMBER_SHAPE = bytes(
    ord("0") if chr(b) in "0123456789" else ord("e") if chr(b) in "eE" else 32 for b in range(256)
)
#: Sixteen digits in a row: every integer part beyond `MAX_NUMBER` (16 digits) has at least as many.
_SIXTEEN_DIGITS = b"0" * len(str(MAX_NUMBER))


def unusable_number_in(value: Any, encoded: bytes) -> str | None:
    """`unusable_number` of ``value``, given ``encoded``: ``value`` as ``pydantic_core.to_json`` wrote it.

    That encoder writes NaN and infinities as bare ``NaN`` / ``Infinity``, and a number beyond
    `MAX_NUMBER` with 16 digits in a row or an exponent: a text with none of those holds no unusable
    number, which a look at C speed settles for almost every call. Otherwise (maybe only inside a
    string) the walk decides.
    """
    # ``bytes.find``, not ``in``: ``in`` first tries its operand as an integer and builds a TypeError.
    if encoded.find(b"NaN") < 0 and encoded.find(b"Infinity") < 0:
        shape = encoded.translate(_NUMBER_SHAPE)
        if shape.find(b"0e") < 0 and shape.find(_SIXTEEN_DIGITS) < 0:
            return None
    return unusable_number(value)


def _any_unusable(value: Any, limit: float) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)  # JSON gives exact types: test those first, anything else by isinstance
        if kind is str or kind is bool or item is None:
            continue
        if kind is dict:
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        elif kind is int:
            if abs(item) > limit:
                return True
        elif kind is float:
            if not (math.isfinite(item) and abs(item) <= limit):
                return True
        elif isinstance(item, bool):
            continue
        elif isinstance(item, float):
            if not (math.isfinite(item) and abs(item) <= limit):
                return True
        elif isinstance(item, int):
            if abs(item) > limit:
                return True
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


def _first_unusable(value: Any, limit: float, path: str) -> str | None:
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
        found = _first_unusable(item, limit, f"{path}/{key}" if path else str(key))
        if found is not None:
            return found
    return None


def non_finite_number(value: Any) -> str | None:
    """The path of the first NaN or infinity in ``value`` (JSON has neither), or None."""
    return unusable_number(value, math.inf)


def non_finite_number_of_any(value: Any) -> str | None:
    """`non_finite_number` of a value that may contain itself (a tool's broken result).

    Such a value ends the walk with `RecursionError` (`non_finite_number`'s flat first walk would
    never end, its list growing without bound).
    """
    return _first_unusable(value, math.inf, "")
