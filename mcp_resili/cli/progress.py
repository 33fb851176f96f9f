"""A run's progress on stderr: a live bar on a terminal, plain periodic lines otherwise.

Both show episodes done of planned, episodes per second, the ETA, the cost so far (the run's ledger
where it keeps one, so calls of episodes still in flight count; else the stored episodes' cost) and
infrastructure errors, from whichever executor plays the episodes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from mcp_resili.store import EpisodeRow

#: Seconds between two plain progress lines when stderr is not a terminal.
PLAIN_EVERY = 10.0


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class RunProgress:
    """Counts what the runner reports and shows it (``spent``: the executor's live spend, or None)."""

    def __init__(
        self,
        console: Console,
        *,
        spent: Callable[[], float | None],
        interactive: bool,
        enabled: bool = True,
        every: float = PLAIN_EVERY,
    ) -> None:
        self.console = console
        self._spent = spent
        self.interactive = interactive
        self.enabled = enabled
        self.every = every
        self.planned: int | None = None
        self.done = 0
        self.infrastructure_errors = 0
        self.stored_cost = 0.0
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._bar: Any = None
        self._task: Any = None

    # --- what the runner reports ----------------------------------------------------------------

    def on_planned(self, count: int) -> None:
        """The number of episodes this run will play."""
        self.planned = count
        self.started = time.monotonic()
        if self._bar is not None:
            self._bar.update(self._task, total=count, status=self.status())

    def on_episode(self, row: EpisodeRow) -> None:
        """One more stored episode."""
        self.done += 1
        self.stored_cost += row.cost_usd or 0.0
        if row.label is None:
            self.infrastructure_errors += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, status=self.status())

    # --- what is shown --------------------------------------------------------------------------

    def cost(self) -> float:
        """USD so far: the live ledger when there is one."""
        live = self._spent()
        return self.stored_cost if live is None else max(live, self.stored_cost)

    def status(self) -> str:
        """Rate, ETA, cost and infrastructure errors, for the bar or a line."""
        elapsed = time.monotonic() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = None if self.planned is None else self.planned - self.done
        eta = "?" if left is None or rate == 0 else _duration(left / rate)
        return (
            f"{rate:.1f} episodes/s · ETA {eta} · ${self.cost():.4f} · "
            f"{self.infrastructure_errors} infrastructure errors"
        )

    def line(self) -> str:
        """One plain progress line."""
        total = "?" if self.planned is None else str(self.planned)
        share = f" ({100 * self.done / self.planned:.0f}%)" if self.planned else ""
        elapsed = _duration(time.monotonic() - self.started)
        return f"progress: {self.done}/{total} episodes{share} in {elapsed} · {self.status()}"

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            self.console.print(self.line(), highlight=False, soft_wrap=True)

    def __enter__(self) -> RunProgress:
        if not self.enabled:
            return self
        if self.interactive:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._bar = Progress(
                TextColumn("episodes"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                console=self.console,
                transient=True,
            )
            self._task = self._bar.add_task("run", total=None, status=self.status())
            self._bar.__enter__()
        else:
            self._ticker = threading.Thread(target=self._tick, name="run-progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._bar.__exit__(kind, exc, tb)
