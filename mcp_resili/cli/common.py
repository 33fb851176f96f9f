"""Small helpers shared by the command modules."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from mcp_resili.errors import UserError

if TYPE_CHECKING:
    from rich.console import Console

#: The type of ``ArgumentParser.add_subparsers()``'s result.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def announce(what: str) -> Callable[[str], None]:
    """A callback printing ``what at URL`` on stderr when a server is up."""
    return lambda url: print(f"{what} at {url}", file=sys.stderr, flush=True)


def stdout_console() -> Console:
    """A console for tables on stdout: the terminal's width, or 200 columns when piped."""
    from rich.console import Console

    # No markup: cells hold user text (fault file paths, task descriptions) where "[/b]" is text.
    out = Console(markup=False)
    return out if out.is_terminal else Console(width=200, markup=False)


def add_seed(parser: argparse.ArgumentParser, default: int | None = 0, what: str = "faults") -> None:
    """``--seed``: every random draw derives from it (with the episode, tool and call ordinal)."""
    parser.add_argument(
        "--seed",
        type=int,
        default=default,
        help=f"seed of the {what}' random draws (with task, trial, tool and call number); default: "
        f"{0 if default is None else default}",
    )


def refuse_database_as_output(output: Path | None, db: Path, option: str) -> None:
    """Refuse (one line, exit 2) to write ``output`` when it is the results database itself.

    Commands read the database, then write their output: writing over it would destroy every run.
    """
    if output is not None and output.is_file() and db.is_file() and output.samefile(db):
        raise UserError(f"{option} {output} is the results database; writing it would destroy the runs")


def user_error_in(exc: BaseException) -> BaseException | None:
    """The user's mistake in ``exc`` (a `UserError` or `OSError`, maybe inside exception groups)."""
    if isinstance(exc, (UserError, OSError)):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = user_error_in(sub)
            if found is not None:
                return found
    return None


def one_line(exc: BaseException) -> str:
    """A user's mistake as one line (an `OSError` by its reason and file)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return " ".join(str(exc).split()) or type(exc).__name__


def _loop_running() -> bool:
    """Whether an asyncio event loop is running in this thread."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@contextlib.contextmanager
def sigterm_stops_like_ctrl_c() -> Iterator[threading.Event]:
    """Within: SIGTERM stops the command the way Ctrl-C does; yields an event set when SIGTERM came.

    A CI job that times out, a scheduler or a service manager ends a command with SIGTERM. A run
    cancels the episodes in flight, finished ones stay stored and ``--resume`` plays the rest; a
    server closes its sessions and removes its private trace spool; as after Ctrl-C. (Ray
    replaces SIGTERM handling when it connects, with an exit and a native stack dump; its executor
    puts this handler back.) A second SIGTERM, like a second Ctrl-C, stops at once.
    """
    received = threading.Event()
    if threading.current_thread() is not threading.main_thread():  # only there can handlers be set
        yield received
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        received.set()
        on_interrupt = signal.getsignal(signal.SIGINT)
        if on_interrupt is signal.default_int_handler and _loop_running():
            # A loop runs, but its runner's Ctrl-C handler is gone: `asyncio.run` is already shutting
            # down (its tasks being cancelled). Raising now would land inside one of those tasks.
            return
        if callable(on_interrupt):  # asyncio's runner cancels the run; Python's default raises
            on_interrupt(signal.SIGINT, frame)
        else:  # Ctrl-C is ignored here (a background job): stop anyway
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)
