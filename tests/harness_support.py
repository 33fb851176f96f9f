"""Shared by the ``run --agent-cmd`` tests: run a config in process, read what was stored."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.types import Receive, Scope, Send

from mcp_resili.client.plan import RunConfig
from mcp_resili.client.runner import RunResult, execute, local_executor
from mcp_resili.harness import session_factory
from mcp_resili.registry.loader import get_suite
from mcp_resili.store import EpisodeRow
from mcp_resili.trace import EpisodeEndEvent, ModelFaultEvent, Trace, trace_lines

REPO_ROOT = Path(__file__).resolve().parents[1]
STDLIB_AGENT = REPO_ROOT / "tests" / "fakes" / "stdlib_agent.py"
HARNESSES = REPO_ROOT / "examples" / "harnesses"


def stdlib_agent(*flags: str) -> str:
    """The command line of the standard-library agent (tests/fakes/stdlib_agent.py) with ``flags``."""
    return shlex.join([sys.executable, str(STDLIB_AGENT), *flags])


def harness(name: str) -> str:
    """The command line of an example harness."""
    return shlex.join([sys.executable, str(HARNESSES / name)])


def first_tasks(n: int) -> tuple[str, ...]:
    """The first ``n`` default ResiliBench tasks."""
    return tuple(t.id for t in get_suite("resilibench").default_tasks[:n])


async def run_agent(tmp_path: Path, agent_cmd: str | None, **options: Any) -> RunResult:
    """Play a run in this process with the harness session; offline, no waiting on injected delays."""
    settings: dict[str, Any] = {
        "suite": "resilibench",
        "models": ("scripted:oracle",),
        "faults": ("resilibench",),
        "trials": 1,
        "tasks": first_tasks(1),
        "time_scale": 0.0,
        "db": tmp_path / "runs.db",
        "agent_cmd": agent_cmd,
        "concurrency": 2,
    }
    settings.update(options)
    return await execute(RunConfig(**settings), executor=local_executor(session_factory=session_factory))


def trace_of(row: EpisodeRow) -> Trace:
    """A stored episode's trace."""
    return Trace.from_lines(trace_lines(row.trace), origin=row.episode_id)


def end_of(row: EpisodeRow) -> EpisodeEndEvent:
    """A stored episode's end event."""
    end = trace_of(row).end
    assert end is not None
    return end


def ledger(row: EpisodeRow) -> list[ModelFaultEvent]:
    """A stored episode's model-API ledger entries."""
    return [e for e in trace_of(row).events if isinstance(e, ModelFaultEvent)]


def decisions(row: EpisodeRow) -> list[tuple[int, str | None, int | None]]:
    """The ledger as (ordinal, fault type, status): what a same-seed rerun must reproduce."""
    return [
        (e.ordinal, e.decision.fault.type if e.decision.fault is not None else None, e.status)
        for e in ledger(row)
    ]


App = Callable[[Scope, Receive, Send], Awaitable[None]]


class FlakyUpstream:
    """An ASGI model API that answers some model calls itself with an error (nobody injected it).

    ``fail``: call number (1-based, chat completions only) -> HTTP status.
    """

    def __init__(self, app: App, fail: dict[int, int]) -> None:
        self.app = app
        self.fail = fail
        self.calls = 0
        self.keys: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            self.calls += 1
            headers = dict(scope["headers"])
            self.keys.append(headers.get(b"authorization", b"").decode())
            status = self.fail.get(self.calls)
            if status is not None:
                body = json.dumps({"error": {"message": "upstream trouble", "type": "server_error"}}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
