"""A run's progress on stderr: a live bar on a terminal, plain periodic lines otherwise.

Both show episodes done of planned, episodes per second, the ETA, the cost so far (the run's ledger
where it keeps one, so calls of episodes still in flight count; else the stored episodes' cost) and
infrastructure errors, from whichever executor plays the episodes.

The rate and the ETA are measured from the first finished episode, not from the start: what comes
before it (a Ray cluster starting, a suite loading, the first model calls) is no measure of the pace,
and an ETA taken over it read 0:32:33 for a 32.6 s run. The ETA is shown only once `ETA_AFTER`
episodes have finished after that first one; before, it says so.
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
#: Episodes that must finish after the first one before the ETA is shown.
ETA_AFTER = 4


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
        clock: Callable[[], float] = time.monotonic,
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
        self._clock = clock
        self.started = clock()
        #: When the first episode finished (the pace is measured from there), and how many had then.
        self._first: tuple[float, int] | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._bar: Any = None
        self._task: Any = None

    # --- what the runner reports ----------------------------------------------------------------

    def on_planned(self, count: int) -> None:
        """The number of episodes this run will play."""
        self.planned = count
        self.started = self._clock()
        if self._bar is not None:
            self._bar.update(self._task, total=count, status=self.status())

    def on_episode(self, row: EpisodeRow) -> None:
        """One more stored episode."""
        self.done += 1
        if self._first is None:
            self._first = (self._clock(), self.done)
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

    def rate(self) -> float | None:
        """Episodes per second since the first episode finished; None before a second one has."""
        if self._first is None:
            return None
        since, count = self._first
        elapsed = self._clock() - since
        finished = self.done - count
        return finished / elapsed if finished > 0 and elapsed > 0 else None

    def eta(self) -> str:
        """The time left at the measured pace, once `ETA_AFTER` episodes have set it; else why not."""
        if self.planned is None:
            return "?"
        finished = 0 if self._first is None else self.done - self._first[1]
        rate = self.rate()
        if finished < ETA_AFTER or rate is None:
            return f"after {ETA_AFTER + 1} episodes"
        return _duration((self.planned - self.done) / rate)

    def status(self) -> str:
        """Rate, ETA, cost and infrastructure errors, for the bar or a line."""
        rate = self.rate()
        pace = "–" if rate is None else f"{rate:.1f}"
        return (
            f"{pace} episodes/s · ETA {self.eta()} · ${self.cost():.4f} · "
            f"{self.infrastructure_errors} infrastructure errors"
        )

    def line(self) -> str:
        """One plain progress line."""
        total = "?" if self.planned is None else str(self.planned)
        share = f" ({100 * self.done / self.planned:.0f}%)" if self.planned else ""
        elapsed = _duration(self._clock() - self.started)
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
