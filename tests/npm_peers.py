"""npm peers built by the tests themselves: the conformance suite (with Node 22) and reference servers.

Installed once, from the pinned lock file, with ``npm ci --prefix tests/peers/extra`` (locked across
pytest-xdist workers); a peer that cannot be installed (no npm, no registry) is a skip that says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import exclusive

EXTRA = Path(__file__).resolve().parent / "peers" / "extra"
BIN = EXTRA / "node_modules" / ".bin"
NODE22 = BIN / "node"
CONFORMANCE = EXTRA / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
#: Every executable the lock installs; a missing one means the install is stale or broken.
BINS = ("node", "mcp-server-everything", "mcp-server-memory", "mcp-server-filesystem")
INSTALL_TIMEOUT = 600.0
#: The conformance scenarios that apply to any server (the others call tools, prompts or resources
#: only the conformance suite's reference server has).
GENERIC_SCENARIOS = (
    "server-initialize",
    "logging-set-level",
    "ping",
    "completion-complete",
    "tools-list",
    "tools-call-error",
    "server-sse-multiple-streams",
    "resources-list",
    "prompts-list",
    "dns-rebinding-protection",
)


def npm_peers() -> Path:
    """The ``.bin`` directory of the extra peers, installed when missing; skips when it cannot be."""
    with exclusive("npm-peers-extra"):
        if all((BIN / name).exists() for name in BINS) and CONFORMANCE.exists():
            return BIN
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip(
                "npm is not on PATH: the conformance suite and the npm reference servers cannot be installed"
            )
        proc = subprocess.run(
            [npm, "ci", "--prefix", str(EXTRA), "--no-audit", "--no-fund", "--loglevel=error"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
        if proc.returncode != 0 or not all((BIN / name).exists() for name in BINS):
            lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
            said = lines[-1] if lines else "no output"
            pytest.skip(f"`npm ci --prefix {EXTRA}` failed (exit {proc.returncode}): {said}")
    return BIN


def node_env(**extra: str) -> dict[str, str]:
    """An environment whose ``node`` is the Node 22 the lock installed (the conformance suite needs it)."""
    env = {
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    env.update(extra)
    return env


def run_conformance(url: str, output: Path, timeout: float = 240.0) -> dict[str, list[tuple[str, str]]]:
    """Run every active server scenario against ``url``; per scenario, its checks as (id, status)."""
    npm_peers()
    proc = subprocess.run(
        [str(NODE22), str(CONFORMANCE), "server", "--url", url, "-o", str(output)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=node_env(),
        check=False,
    )
    results: dict[str, list[tuple[str, str]]] = {}
    for checks in sorted(output.glob("*/checks.json")):
        scenario = checks.parent.name.removeprefix("server-").rsplit("-", 6)[0]
        data = json.loads(checks.read_text(encoding="utf-8"))
        results[scenario] = sorted((c["id"], c["status"]) for c in data)
    said = f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert results, f"the conformance suite wrote no results (exit {proc.returncode}):\n{said}"
    return results


def passed(checks: list[tuple[str, str]]) -> bool:
    """Whether a scenario's checks all passed (warnings and infos allowed)."""
    return bool(checks) and all(status not in ("FAILURE", "ERROR") for _, status in checks)
