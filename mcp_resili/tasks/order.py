"""The natural order of level names: easy before medium before hard, L2 before L10.

Levels are words with an order of their own (complexity, severity, intensity) or names with numbers
in them; sorted as plain strings they read easy, hard, medium and L1, L10, L2. `natural_key` sorts
any label by its parts: a known level word by its rank, a run of digits by its value, other text
as text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: Level words in their order; words on one line share a rank ("medium" is medium on every scale).
LEVEL_WORDS: dict[str, int] = {
    word: rank
    for rank, words in enumerate(
        (
            ("none",),
            ("easy", "low", "light", "mild", "minor"),
            ("medium", "moderate"),
            ("hard", "high", "heavy", "severe", "major"),
            ("critical", "extreme"),
        )
    )
    for word in words
}

_PARTS = re.compile(r"\d+|[^\W\d_]+|[\W_]+")


def natural_key(label: str) -> tuple[tuple[int, int, str], ...]:
    """A sort key of ``label`` that puts level words in their order and numbers by value."""
    key = []
    for part in _PARTS.findall(label):
        lowered = part.lower()
        if lowered in LEVEL_WORDS:
            key.append((0, LEVEL_WORDS[lowered], ""))
        elif part.isdigit():
            key.append((1, int(part), ""))
        else:
            key.append((2, 0, part))
    return tuple(key)


def natural_sorted(labels: Iterable[str]) -> list[str]:
    """``labels`` in their natural order (`natural_key`)."""
    return sorted(labels, key=natural_key)
