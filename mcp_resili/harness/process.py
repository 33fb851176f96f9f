"""One run of an agent program: started in its own process group, fed its prompt, ended cleanly.

The program gets the prompt on standard input (then end of input) and its environment; what it prints
is read as it comes and only the tail is kept (a program that prints megabytes, or binary garbage,
costs nothing and breaks nothing). It ends on its own, or the runner ends it: at the episode's time
limit, or when the episode must stop (its token budget, the run's cost cap). Ending it means its whole
process group (the program and whatever it started: an MCP bridge, a server, a shell), SIGTERM first,
SIGKILL after a grace; the group is ended after a normal exit too, so nothing it started outlives its
episode.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import anyio
from anyio.abc import ByteReceiveStream, Process

#: Bytes kept of what the program printed, per stream (the end of it).
TAIL_BYTES = 8 * 1024
#: Seconds between SIGTERM and SIGKILL when the runner ends a program.
KILL_GRACE = 3.0
#: Seconds the runner reads what is left on the pipes after the program ended (a grandchild that left
#: the group may hold them open).
DRAIN_SECONDS = 2.0


@dataclass(frozen=True)
class ProgramExit:
    """How an agent program's run ended."""

    #: Its exit status (negative: the signal that ended it), None if it could not be started.
    status: int | None
    #: Why the runner ended it (``time_limit``, or the episode's stop reason), None if it ended alone.
    ended_by: str | None
    #: The end of what it printed (decoded, undecodable bytes replaced).
    stdout: str
    stderr: str
    seconds: float
    #: Why it could not be started (None if it was).
    start_error: str | None = None

    @property
    def crashed(self) -> bool:
        """It ended alone with a failure status (or by a signal), or never started."""
        return self.ended_by is None and (self.status is None or self.status != 0)

    def last_line(self) -> str:
        """The last non-blank line it wrote to stderr (else stdout), at most 300 characters."""
        for text in (self.stderr, self.stdout):
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            if lines:
                return lines[-1][:300]
        return ""


class _Tail:
    """What one pipe carried, its last `TAIL_BYTES` only."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.done = anyio.Event()

    async def drain(self, stream: ByteReceiveStream) -> None:
        try:
            async for chunk in stream:
                self.data += chunk
                del self.data[:-TAIL_BYTES]
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return
        finally:
            self.done.set()

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(pid, signum)


async def _end_group(process: Process) -> None:
    """SIGTERM the program's group; SIGKILL it after `KILL_GRACE` if the program is still there."""
    _signal_group(process.pid, signal.SIGTERM)
    with anyio.move_on_after(KILL_GRACE):
        await process.wait()
    _signal_group(process.pid, signal.SIGKILL)
    with anyio.CancelScope(shield=True):
        await process.wait()


async def run_program(
    argv: Sequence[str],
    prompt: str,
    env: Mapping[str, str],
    *,
    time_limit: float | None,
    stop: anyio.Event,
    why: Callable[[], str],
) -> ProgramExit:
    """Run the agent program once (see the module docstring).

    ``stop`` set ends the program early (``why()`` says why); so does ``time_limit`` (seconds, None:
    none). Never raises for anything the program does.
    """
    started = time.monotonic()
    try:
        process = await anyio.open_process(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        return ProgramExit(None, None, "", "", 0.0, start_error=f"{type(exc).__name__}: {exc}")
    out, err = _Tail(), _Tail()
    ended_by: str | None = None
    async with process:
        try:
            async with anyio.create_task_group() as readers:
                assert process.stdout is not None and process.stderr is not None
                readers.start_soon(out.drain, process.stdout)
                readers.start_soon(err.drain, process.stderr)
                readers.start_soon(_feed, process, prompt)
                async with anyio.create_task_group() as race:

                    async def exited() -> None:
                        await process.wait()
                        race.cancel_scope.cancel()

                    async def told_to_stop() -> None:
                        nonlocal ended_by
                        await stop.wait()
                        ended_by = why()
                        race.cancel_scope.cancel()

                    race.start_soon(exited)
                    race.start_soon(told_to_stop)
                    if time_limit is not None and math.isfinite(time_limit):
                        race.cancel_scope.deadline = anyio.current_time() + time_limit
                if ended_by is None and process.returncode is None:
                    ended_by = "time_limit"
                await _end_group(process)  # after a normal exit too: what it started goes with it
                with anyio.move_on_after(DRAIN_SECONDS):
                    await out.done.wait()
                    await err.done.wait()
                readers.cancel_scope.cancel()
        finally:
            # The run itself cancelled (Ctrl-C, SIGTERM) or failed: the program's group goes all the same.
            with anyio.CancelScope(shield=True):
                await _end_group(process)
    return ProgramExit(process.returncode, ended_by, out.text(), err.text(), time.monotonic() - started)


async def _feed(process: Process, prompt: str) -> None:
    """The prompt on the program's standard input, then end of input (a program that reads none is fine)."""
    assert process.stdin is not None
    try:
        await process.stdin.send(prompt.encode())
        await process.stdin.aclose()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        return
