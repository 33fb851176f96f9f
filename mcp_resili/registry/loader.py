"""The suite registry: every suite, built-in or third-party, joins through the same entry points.

Entry points are read without importing anything; a suite's package is imported only when the suite
is first used (`get_suite`). A suite that fails to load is reported by name with one line, and never
breaks the listing or the other suites. Only the tops (the CLI, the runner's `execute`, the
integrations and the public face) look a suite up here; every layer below is handed the `Suite`, or
the parts of it it needs.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

from mcp_resili.constants import DEFAULT_SUITE
from mcp_resili.errors import UserError
from mcp_resili.faults.spec import FaultSpecParser, FaultSpecScope

# Re-exported: the registry's names have always been read from here.
from mcp_resili.registry.entries import BUILTIN_DISTRIBUTION as BUILTIN_DISTRIBUTION
from mcp_resili.registry.entries import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from mcp_resili.registry.entries import SuiteEntry as SuiteEntry
from mcp_resili.registry.entries import registered_suites as registered_suites
from mcp_resili.registry.entries import suite_names as suite_names
from mcp_resili.registry.suites import Suite, SuiteLoadError, UnknownSuiteError

if TYPE_CHECKING:
    from mcp_resili.agents.model import Model


@cache
def get_suite(name: str = DEFAULT_SUITE) -> Suite:
    """The suite called ``name``, loaded on first use.

    Raises `UnknownSuiteError` listing the registered ones, or `SuiteLoadError` in one line naming the
    suite and its package when its code cannot be imported or does not return a `Suite`.
    """
    if is_suite_path(name):
        return _path_suite(name)
    entry = registered_suites().get(name)
    if entry is None:
        known = ", ".join(suite_names()) or "none (is mcp-resili installed? pip install -e .)"
        raise UnknownSuiteError(f"unknown suite {name!r}; available: {known}")
    if entry.problem is not None:
        raise SuiteLoadError(entry.problem)
    try:
        factory = importlib.metadata.EntryPoint(entry.name, entry.target, ENTRY_POINT_GROUP).load()
        suite = factory()
    # A third party's code: any failure, ``sys.exit`` included, is that suite's, reported in one line
    # (KeyboardInterrupt still stops the command).
    except (Exception, SystemExit) as exc:
        raise SuiteLoadError(
            f"suite {name!r} (from {entry.source}) failed to load: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(suite, Suite):
        raise SuiteLoadError(
            f"suite {name!r} (from {entry.source}): {entry.target} returned "
            f"{type(suite).__name__}, not a Suite"
        )
    if suite.name != name:
        raise SuiteLoadError(f"suite {name!r} (from {entry.source}): its Suite is named {suite.name!r}")
    return suite


#: The entry-point group of suites named by a path (``--suite ./my_tasks/``): task files.
PATH_ENTRY_POINT_GROUP = "mcp_resili.suite_paths"


def is_suite_path(name: str) -> bool:
    """Whether a suite name is a path (a task directory or task file) rather than a registered name."""
    return "/" in name or name.endswith(".toml") or name in (".", "..")


def _path_suite(path: str) -> Suite:
    """The suite of the task files at ``path``, loaded by the ``mcp_resili.suite_paths`` entry point."""
    points = list(importlib.metadata.entry_points(group=PATH_ENTRY_POINT_GROUP))
    if not points:
        raise UnknownSuiteError(f"{path!r} is a path, and no installed package loads suites from paths")
    try:
        suite = points[0].load()(path)
    except UserError:
        raise
    except (Exception, SystemExit) as exc:
        raise SuiteLoadError(f"suite {path!r} failed to load: {type(exc).__name__}: {exc}") from None
    if not isinstance(suite, Suite):
        raise SuiteLoadError(
            f"suite {path!r}: {points[0].value} returned {type(suite).__name__}, not a Suite"
        )
    return suite


def load_all_suites() -> dict[str, Suite]:
    """Every registered suite that loads; broken ones are left out (`get_suite` says why)."""
    loaded = {}
    for name in registered_suites():
        try:
            loaded[name] = get_suite(name)
        except SuiteLoadError:
            continue
    return loaded


def find_suite(name: str) -> Suite | None:
    """The suite ``name``, or None when this installation does not know it.

    A report of a run of a suite since uninstalled shows the generic sections only.
    """
    try:
        return get_suite(name)
    except UnknownSuiteError:
        return None


def installed_agents() -> dict[str, Callable[[], Model]]:
    """Every scripted agent by name: the generic ones, then every installed suite's own (first wins)."""
    from mcp_resili.agents.scripted import SCRIPTED_AGENTS

    agents = dict(SCRIPTED_AGENTS)
    for suite in load_all_suites().values():
        for name, factory in suite.agents.items():
            agents.setdefault(name, factory)
    return agents


def installed_spec_parsers() -> dict[str, FaultSpecParser]:
    """Every installed suite's fault SPEC names -> parser (the first suite to name one wins)."""
    parsers: dict[str, FaultSpecParser] = {}
    for suite in load_all_suites().values():
        for name, parser in suite.fault_specs.items():
            parsers.setdefault(name, parser)
    return parsers


def spec_scope(suite: Suite | None) -> FaultSpecScope:
    """Where a top parses fault SPECs: ``suite``'s own names, then any installed suite's.

    ``suite=None`` is a server without tasks (the proxy): plans that need a suite's tasks are refused.
    """
    own = suite.spec_scope if suite is not None else FaultSpecScope()
    return own.with_elsewhere(installed_spec_parsers)
