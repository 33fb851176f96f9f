"""Agents on the older MCP SDK, as outside peers: a venv of their own, and a policy they ask what to do.

``tests/peers/outside/.venv`` is built once from the pinned ``requirements.txt`` (locked across
pytest-xdist workers; rebuilt when the pins change); a venv that cannot be built is a skip saying so.
The peer (``tests/peers/outside/agent.py``) runs its framework against our server and asks the test
process for its scripted model's moves over loopback HTTP (`policy_endpoint`), so the decisions are
`GroundTruthPolicy`'s, as for the frameworks that run in our own environment.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import exclusive
from fakes.model_server import serve
from framework_policy import GroundTruthPolicy, Step, ToolView
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

OUTSIDE = Path(__file__).resolve().parent / "peers" / "outside"
VENV = OUTSIDE / ".venv"
PYTHON = VENV / "bin" / "python"
AGENT = OUTSIDE / "agent.py"
BUILD_TIMEOUT = 900.0
_MARKER = VENV / ".built-from"


def outside_python() -> Path:
    """The outside venv's interpreter, built from the pins when missing or stale; skips if it cannot be."""
    pins = (OUTSIDE / "requirements.txt").read_text(encoding="utf-8")
    digest = hashlib.sha256(pins.encode()).hexdigest()
    with exclusive("outside-peers-venv"):
        if _MARKER.exists() and _MARKER.read_text() == digest and PYTHON.exists():
            return PYTHON
        # The venv gets no pip of its own: this interpreter's pip installs into it. The pins are the
        # whole closure (nothing to resolve), and modules compile when first imported.
        pip = [sys.executable, "-m", "pip", "--python", str(PYTHON), "install", "-q"]
        pip += ["--disable-pip-version-check", "--no-deps", "--no-compile"]
        for what, step in (
            ("venv", _venv_command()),
            ("pip install", [*pip, "-r", str(OUTSIDE / "requirements.txt")]),
        ):
            proc = subprocess.run(step, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False)
            if proc.returncode != 0:
                lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
                said = lines[-1] if lines else f"exit {proc.returncode}"
                pytest.skip(f"cannot build the outside peers' venv in {VENV} ({what}): {said}")
        _MARKER.write_text(digest)
    return PYTHON


def _venv_command() -> list[str]:
    # The base interpreter (a venv made from inside another venv still works, but is slower to find).
    base = getattr(sys, "_base_executable", sys.executable)
    return [base, "-m", "venv", "--clear", "--without-pip", str(VENV)]


@asynccontextmanager
async def policy_endpoint(policy: GroundTruthPolicy) -> AsyncIterator[str]:
    """Serve ``policy`` at ``POST /next`` on loopback; yields the URL the peer asks."""

    async def next_move(request: Request) -> JSONResponse:
        body = await request.json()
        tools = [
            ToolView(t["name"], t.get("description") or "", t.get("schema") or {}) for t in body["tools"]
        ]
        history = [Step(h["name"], h["arguments"], h["text"], h["is_error"]) for h in body["history"]]
        action = await policy.next(tools, history)
        return JSONResponse({"name": action.name, "arguments": action.arguments})

    async with serve(Starlette(routes=[Route("/next", next_move, methods=["POST"])])) as base:
        yield f"{base}/next"


async def run_outside(framework: str, policy_url: str, *target: str, env: dict[str, str]) -> dict[str, Any]:
    """Run the outside peer ``framework`` (``--stdio JSON`` or ``--url URL``); its JSON result line."""
    import anyio

    argv = [str(outside_python()), str(AGENT), framework, "--policy", policy_url, *target]
    with anyio.fail_after(240):
        proc = await anyio.run_process(argv, env=env, check=False)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, f"{framework} peer exited {proc.returncode}:\n{err[-3000:]}"
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result
