"""A pytest fixture for contract-testing MCP servers in CI.

Enable it with ``-p mcp_resili.check.pytest_plugin`` (or ``pytest_plugins = [...]`` in a conftest), then::

    def test_my_server_keeps_its_contract(mcp_contract):
        mcp_contract("python -m my_server", call_tools=True).assert_ok()
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from mcp_resili.check.contract import check_server
from mcp_resili.check.report import CheckReport
from mcp_resili.proxy.upstream import connect_upstream


def run_check(target: str, *, call_tools: bool = False) -> CheckReport:
    """Connect to ``target`` (a command line or a URL) and run every contract check."""

    async def main() -> CheckReport:
        async with connect_upstream(target) as client:
            return await check_server(client, target, call_tools=call_tools)

    return anyio.run(main)


@pytest.fixture
def mcp_contract() -> Callable[..., CheckReport]:
    """``mcp_contract(target, call_tools=False) -> CheckReport``; call ``.assert_ok()`` on it."""
    return run_check
