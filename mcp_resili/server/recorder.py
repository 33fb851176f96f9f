"""Where every episode's events go: kept for the runner, and written as one JSONL trace per episode."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import IO

from mcp_resili.server.episode import Episode
from mcp_resili.trace import TraceEvent, TraceHeader, dump_event
from mcp_resili.trace.model import one_line, trace_stem

logger = logging.getLogger(__name__)


logger = logging.getLogger(__name__)


class TraceRecorder:
    """Keeps every episode's events, and writes one JSONL file per episode under ``directory`` (if set).

    An episode's file is created for it (``STEM.jsonl``, see `trace_stem`) and holds its trace alone: a
    name already in the directory (another episode's, or left by another server) is never appended
    to, the episode takes the next free ``STEM-N.jsonl`` (N = 2, 3, ...) instead.
    """

    def __init__(self, directory: Path | None, header: Callable[[Episode], TraceHeader]) -> None:
        self.directory = directory
        self._header = header
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def path(self, episode: Episode) -> Path | None:
        """Where the episode's trace is: the file it created, else the name it will try first."""
        if self.directory is None:
            return None
        return episode.trace_path or self.directory / f"{trace_stem(episode.id)}.jsonl"

    def record(self, episode: Episode, event: TraceEvent) -> None:
        """Append ``event`` (creating the episode's file, header first, for its first event)."""
        episode.events.append(event)
        if self.directory is None:
            return
        line = dump_event(event) + "\n"
        if episode.trace_path is not None:
            with episode.trace_path.open("a", encoding="utf-8") as out:
                out.write(line)
            return
        header = one_line(self._header(episode).model_dump_json()) + "\n"
        episode.trace_path, created = self._create(self.directory, episode.id)
        with created:
            created.write(header + line)

    @staticmethod
    def _create(directory: Path, episode_id: str) -> tuple[Path, IO[str]]:
        """A new trace file for ``episode_id``, opened for writing: its `trace_stem` name if still free."""
        stem = trace_stem(episode_id)
        path, attempt = directory / f"{stem}.jsonl", 1
        while True:
            try:
                out = path.open("x", encoding="utf-8")  # exclusive: never a file anyone else wrote
            except FileExistsError:
                attempt += 1
                path = directory / f"{stem}-{attempt}.jsonl"
                continue
            if attempt > 1:
                logger.warning(
                    "trace file %s.jsonl already exists: episode %r is written to %s", stem, episode_id, path
                )
            return path, out

    @staticmethod
    def take(episode: Episode) -> list[TraceEvent]:
        """The events recorded for ``episode`` since the previous `take`."""
        new = episode.events[episode.taken :]
        episode.taken = len(episode.events)
        return new
