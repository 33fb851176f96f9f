"""The names of the registered suites, read from their entry points without importing any suite.

Light on purpose: ``mcp-resili --help`` names the suites, and must not pay for the fault, tool and
MCP machinery that `mcp_resili.registry.loader` brings in to load one.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass, replace
from functools import cache

#: The entry-point group every suite registers in (``[project.entry-points."mcp_resili.suites"]``).
ENTRY_POINT_GROUP = "mcp_resili.suites"
#: The distribution of the built-in suites: no other package may take their names.
BUILTIN_DISTRIBUTION = "mcp-resili"


@dataclass(frozen=True)
class SuiteEntry:
    """A registered suite before it is loaded: its entry point and the distribution providing it."""

    name: str
    target: str
    distribution: str
    version: str
    #: Why the entry cannot be used (its name clashes with another package's suite), or None.
    problem: str | None = None

    @property
    def source(self) -> str:
        """``package version``, as shown by ``mcp-resili suites``."""
        return f"{self.distribution} {self.version}".strip()

    @property
    def builtin(self) -> bool:
        """Whether mcp-resili itself registers it."""
        return re.sub(r"[-_.]+", "-", self.distribution).lower() == BUILTIN_DISTRIBUTION


@cache
def registered_suites() -> dict[str, SuiteEntry]:
    """Every suite registered in the ``mcp_resili.suites`` entry-point group, by name (nothing imported).

    A name is never silently taken over: a built-in suite keeps its name, and another package's suite
    of that name is listed as ``NAME (PACKAGE)`` with a `SuiteEntry.problem` naming both packages; a
    name two other packages register is listed once, with a problem naming both, and used by neither.
    """
    claims: dict[str, list[SuiteEntry]] = {}
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = point.dist
        entry = SuiteEntry(
            point.name,
            point.value,
            dist.name if dist is not None else "?",
            dist.version if dist is not None else "",
        )
        claimants = claims.setdefault(point.name, [])
        if all(other.distribution != entry.distribution for other in claimants):
            claimants.append(entry)
    entries: dict[str, SuiteEntry] = {}
    for name, claimants in claims.items():
        builtin = next((entry for entry in claimants if entry.builtin), None)
        if len(claimants) == 1:
            entries[name] = claimants[0]
        elif builtin is not None:
            entries[name] = builtin
            for other in claimants:
                if other is not builtin:
                    entries[f"{name} ({other.distribution})"] = replace(
                        other,
                        problem=f"suite {name!r} from {other.source} is ignored: {name!r} is the built-in "
                        f"suite from {builtin.source}",
                    )
        else:
            packages = " and ".join(entry.source for entry in claimants)
            entries[name] = replace(
                claimants[0],
                problem=f"suite {name!r} is registered by more than one package ({packages}); "
                "uninstall all but one",
            )
    return dict(sorted(entries.items()))


def suite_names() -> list[str]:
    """Registered suite names (not a clashing entry listed under ``NAME (PACKAGE)``)."""
    return [name for name, entry in registered_suites().items() if name == entry.name]
