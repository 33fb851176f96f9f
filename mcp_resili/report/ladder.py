"""Fault ladders: the standard intensities of each fault family, and where a SPEC sits on one.

A ladder is an ordered list of fault SPECs of one family, from no faults to the harshest, each at
an intensity on the family's own axis:

| family | specs | intensity |
|---|---|---|
| ``resilibench`` | none, base 0.9, 0.8 (the default), 0.6 | 1 − base success: 0, 0.1, 0.2, 0.4 |
| ``lambda`` | none, λ = 0.1, 0.2, 0.3 (ReliabilityBench's profiles) | λ |
| ``toolmaze`` | NP, P1, P2, P3, P4 | the mode's rank 0..4 (explicit, then implicit; transient first) |
| ``protocol`` | none, light, medium, heavy | the profile's rank 0..3 |

Ranks (ToolMaze, protocol) are ordinal: their area under the curve weighs each step equally.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Ladder:
    """A family's standard ladder: SPECs in order with their intensities."""

    family: str
    specs: tuple[str, ...]
    intensities: tuple[float, ...]
    #: Title of the intensity axis.
    axis: str

    def intensity(self, spec: str) -> float | None:
        """The intensity of ``spec`` on this ladder (None when it is not one of its rungs)."""
        found = spec_intensity(spec)
        if found is None or (found[0] is not None and found[0] != self.family):
            return None
        return found[1]


LADDERS: dict[str, Ladder] = {
    "resilibench": Ladder(
        "resilibench",
        ("none", "resilibench:base=0.9", "resilibench", "resilibench:base=0.6"),
        (0.0, 0.1, 0.2, 0.4),
        "failure rate before dependency and history factors (1 − base success)",
    ),
    "lambda": Ladder(
        "lambda",
        ("none", "lambda=0.1", "lambda=0.2", "lambda=0.3"),
        (0.0, 0.1, 0.2, 0.3),
        "fault rate λ",
    ),
    "toolmaze": Ladder(
        "toolmaze",
        ("toolmaze:NP", "toolmaze:P1", "toolmaze:P2", "toolmaze:P3", "toolmaze:P4"),
        (0.0, 1.0, 2.0, 3.0, 4.0),
        "perturbation mode (NP, P1 … P4; ordinal)",
    ),
    "protocol": Ladder(
        "protocol",
        ("none", "protocol:light", "protocol:medium", "protocol:heavy"),
        (0.0, 1.0, 2.0, 3.0),
        "protocol-fault profile (none, light, medium, heavy; ordinal)",
    ),
}

#: ResiliBench's default base success (its spec without overrides).
_RESILIBENCH_BASE = 0.8
_TOOLMAZE_MODES = ("NP", "P1", "P2", "P3", "P4")
_PROTOCOL_LEVELS = ("light", "medium", "heavy")


def spec_intensity(spec: str) -> tuple[str | None, float] | None:
    """(family, intensity) of a SPEC on its family's axis; family None for ``none`` (0 on every ladder).

    None when the SPEC is not a plain rung of a known family (a fault file, an ablation, overrides
    beyond ResiliBench's ``base``, a protocol profile over another plan).
    """
    if spec == "none":
        return (None, 0.0)
    if match := re.fullmatch(r"lambda[=:]([0-9.]+)", spec):
        try:
            return ("lambda", float(match.group(1)))
        except ValueError:
            return None
    if spec == "resilibench":
        return ("resilibench", round(1 - _RESILIBENCH_BASE, 6))
    if match := re.fullmatch(r"resilibench[:=]base(?:_success)?=([0-9.]+)", spec):
        try:
            return ("resilibench", round(1 - float(match.group(1)), 6))
        except ValueError:
            return None
    if match := re.fullmatch(r"toolmaze:(\w+)", spec):
        mode = match.group(1).upper()
        return ("toolmaze", float(_TOOLMAZE_MODES.index(mode))) if mode in _TOOLMAZE_MODES else None
    if match := re.fullmatch(r"protocol:(\w+)", spec):
        level = match.group(1)
        return ("protocol", float(_PROTOCOL_LEVELS.index(level) + 1)) if level in _PROTOCOL_LEVELS else None
    return None


def mildest_by_ladder(specs: list[str]) -> str | None:
    """The SPEC of lowest intensity when every SPEC sits on one family's ladder, else None."""
    placed = [(spec, spec_intensity(spec)) for spec in specs]
    if any(found is None for _, found in placed):
        return None
    families = {found[0] for _, found in placed if found is not None and found[0] is not None}
    if len(families) > 1:
        return None
    return min(placed, key=lambda item: (item[1][1] if item[1] is not None else 0.0, item[0]))[0]
