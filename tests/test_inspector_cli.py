"""The real MCP Inspector CLI (npm ``@modelcontextprotocol/inspector``, pinned in tests/peers) vs our server.

The Inspector speaks the handshake era (``2025-11-25``) with Streamable HTTP session ids: a different client
stack from `mcp.Client`. Its npm package is installed by ``npm ci --prefix tests/peers`` when missing; a
missing or failing npm fails these tests loudly rather than skipping them. Our server plays the tiny suite
(tests/tiny_suite): the Inspector passes it the tests' PYTHONPATH, where the suite is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import child_env, http_server, run_inspector, serve_command
from tiny_suite import library

from mcp_resili.constants import META_EVENT

SERVE = ("--suite", "tiny", "--faults", "none")


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``--suite tiny --faults none`` server over Streamable HTTP on 127.0.0.1, for the whole module."""
    with http_server(*SERVE, workdir=tmp_path_factory.mktemp("inspector-http")) as server:
        yield server.url


@pytest.fixture(params=["stdio", "http"])
def target(request: pytest.FixtureRequest) -> list[str]:
    """The Inspector's target arguments: our server's command line (stdio), or its URL (HTTP)."""
    if request.param == "stdio":
        return [
            "--transport",
            "stdio",
            "-e",
            f"PYTHONPATH={child_env()['PYTHONPATH']}",
            "--",
            *serve_command(*SERVE),
        ]
    url: str = request.getfixturevalue("http_url")
    return ["--transport", "http", "--server-url", url]


def test_inspector_lists_the_suites_tools_and_finish(
    inspector: Path, target: list[str], tmp_path: Path
) -> None:
    listing = run_inspector(inspector, tmp_path, "--method", "tools/list", *target)

    names = [tool["name"] for tool in listing["tools"]]
    expected = {spec.name for spec in library()} | {"finish"}
    assert len(names) == len(expected) == 6
    assert set(names) == expected


def test_inspector_calls_a_tool_and_gets_its_content(
    inspector: Path, target: list[str], tmp_path: Path
) -> None:
    result = run_inspector(
        inspector,
        tmp_path,
        "--method",
        "tools/call",
        "--tool-name",
        "lookup",
        "--tool-arg",
        "key=kiwi",
        *target,
    )

    assert result["isError"] is False
    assert '"value": 13' in result["content"][0]["text"]
    assert result["structuredContent"] == {"key": "kiwi", "value": 13}
    # No answer key on the wire: the recorded event (fault decision included) stays on the server.
    assert META_EVENT not in (result.get("_meta") or {})
