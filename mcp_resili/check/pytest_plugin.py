"""A pytest fixture for contract-testing MCP servers in CI.

Enable it with ``-p mcp_resili.check.pytest_plugin`` (or ``pytest_plugins = [...]`` in a conftest), then::

    def test_my_server_keeps_its_contract(mcp_contract):
        mcp_contract("python -m my_server", call_tools=True).assert_ok()

A server that cannot be checked (not startable, unreachable, dies, stops answering) fails the test
with one line saying why, like ``mcp-resili check`` (exit status 2); contract violations fail it
through `CheckReport.assert_ok` with the report (exit status 1).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import anyio
import pytest

from mcp_resili.check.contract import CheckError, check_target
from mcp_resili.check.report import CheckReport
from mcp_resili.proxy.upstream import CONNECT_TIMEOUT


def run_check(target: str, *, call_tools: bool = False, timeout: float = CONNECT_TIMEOUT) -> CheckReport:
    """Connect to ``target`` (a command line or a URL) and run every contract check.

    Fails the calling test (without a traceback) when the server cannot be checked.
    """
    try:
        return anyio.run(functools.partial(check_target, target, call_tools=call_tools, timeout=timeout))
    except CheckError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def mcp_contract() -> Callable[..., CheckReport]:
    """``mcp_contract(target, call_tools=False, timeout=30) -> CheckReport``; call ``.assert_ok()`` on it."""
    return run_check
