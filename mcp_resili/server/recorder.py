"""Where every episode's events go: handed to the in-process runner, and written as one JSONL trace each.

A server keeps no growing list of events. Either it hands them over (``hand_over``: the in-process
runner takes each call's events right after the call, `TraceRecorder.take`), or they go to the
episode's trace file as they happen (``--trace-dir``, else, with ``spool``, a file in a private
temporary directory), from which `TRACE_METHOD` reads them back. Every event's bytes are counted in
the server's `MemoryAccount`.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import stat
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from mcp_resili.server.budget import CALL_BASE_BYTES, MemoryAccount, MemoryBudget, json_size
from mcp_resili.server.episode import Episode
from mcp_resili.trace import ToolCallEvent, TraceEvent, TraceHeader, dump_event
from mcp_resili.trace.model import one_line, trace_stem

logger = logging.getLogger(__name__)

#: Spooled traces of closed episodes kept for `TRACE_METHOD`, in bytes, beyond which the oldest go.
SPOOL_KEEP_BYTES = 256 * 1024 * 1024


#: Name prefix of a private spool directory; its owner follows (`spool_prefix`), then a random part.
SPOOL_PREFIX = "mcp-resili-spool-"


def _pid_namespace() -> str:
    """The PID namespace of the running process (Linux: the inode of ``/proc/self/ns/pid``), else ``0``."""
    try:
        return os.readlink("/proc/self/ns/pid").partition("[")[2].rstrip("]") or "0"
    except OSError:
        return "0"


def spool_prefix(pid: int) -> str:
    """The name prefix of the spools of process ``pid`` of this PID namespace: ``SPOOL_PREFIX`` + ``NS.PID-``.

    The namespace is part of the name so that a server never takes a process of another container
    sharing the temporary directory for one that is gone.
    """
    return f"{SPOOL_PREFIX}{_pid_namespace()}.{pid}-"


def remove_dead_spools(temp: Path) -> list[Path]:
    """Remove the private spools in ``temp`` of this user's processes that are gone; return them.

    A server killed outright (SIGKILL, the OOM killer) cannot remove its own spool: the next server
    started in the same temporary directory does. A spool whose process is alive, or of another PID
    namespace, or whose owner is unknown, stays.
    """
    if os.name != "posix":  # os.kill(pid, 0) only probes on POSIX
        return []
    ours = _pid_namespace()
    removed = []
    for spool in temp.glob(f"{SPOOL_PREFIX}*-*"):
        namespace, _, pid_text = spool.name[len(SPOOL_PREFIX) :].split("-", 1)[0].rpartition(".")
        try:
            pid = int(pid_text)
            status = spool.lstat()
            if (
                namespace != ours
                or pid <= 0
                or status.st_uid != os.getuid()
                or not stat.S_ISDIR(status.st_mode)
            ):
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(spool, ignore_errors=True)
            removed.append(spool)
        except (ValueError, OSError):  # not a number; someone else's process; gone meanwhile
            continue
    return removed


def event_size(event: TraceEvent) -> int:
    """About the bytes of ``event``'s trace line: its arguments and result as JSON, plus a fixed part."""
    if isinstance(event, ToolCallEvent):
        return json_size(event.arguments) + json_size(event.result) + CALL_BASE_BYTES
    return CALL_BASE_BYTES


class TraceRecorder:
    """Hands events over or writes them, one JSONL file per episode under ``directory`` (if set).

    An episode's file is created for it (``STEM.jsonl``, see `trace_stem`) and holds its trace alone: a
    name already in the directory (another episode's, or left by another server) is never appended
    to, the episode takes the next free ``STEM-N.jsonl`` (N = 2, 3, ...) instead. With ``spool`` and
    no ``directory`` the files go to a private temporary directory (removed with the recorder), so
    that `read` can hand a trace over without holding it in memory.
    """

    def __init__(
        self,
        directory: Path | None,
        header: Callable[[Episode], TraceHeader],
        *,
        hand_over: bool = False,
        spool: bool = False,
        budget: MemoryBudget | None = None,
    ) -> None:
        self._header = header
        #: Keep each event until `take` (the in-process runner); else only write it.
        self.hand_over = hand_over
        self.account = MemoryAccount(budget)
        self._private: tempfile.TemporaryDirectory[str] | None = None
        if directory is None and spool:
            remove_dead_spools(Path(tempfile.gettempdir()))
            self._private = tempfile.TemporaryDirectory(prefix=spool_prefix(os.getpid()))
            directory = Path(self._private.name)
        self.directory = directory
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
        #: Trace files this recorder wrote, oldest first: episode id -> (file, the episode while live).
        self._files: collections.OrderedDict[str, tuple[Path, weakref.ref[Episode]]] = (
            collections.OrderedDict()
        )
        self._spooled_bytes = 0

    @property
    def private(self) -> bool:
        """Whether traces go to a private spool (deleted once read) rather than a trace directory."""
        return self._private is not None

    def close(self) -> None:
        """Remove the private spool, if any."""
        if self._private is not None:
            shutil.rmtree(self._private.name, ignore_errors=True)

    def path(self, episode: Episode) -> Path | None:
        """Where the episode's trace is: the file it created, else the name it will try first."""
        if self.directory is None:
            return None
        return episode.trace_path or self.directory / f"{trace_stem(episode.id)}.jsonl"

    def record(self, episode: Episode, event: TraceEvent, nbytes: int | None = None) -> None:
        """Hand ``event`` over or write it (creating the episode's file, header first, for its first event).

        ``nbytes``: its size if the caller knows it (else measured).
        """
        if self.directory is not None:
            line = dump_event(event) + "\n"
            nbytes = len(line)
            self._write(episode, line)
        elif nbytes is None:
            nbytes = event_size(event)
        usage = episode.usage
        usage.trace_bytes += nbytes
        if self.hand_over:
            episode.pending.append(event)
            usage.pending_bytes += nbytes
        self.account.grew(episode)

    def _write(self, episode: Episode, line: str) -> None:
        assert self.directory is not None
        if self._private is not None:
            self._spooled_bytes += len(line)
        if episode.trace_path is not None:
            with episode.trace_path.open("a", encoding="utf-8") as out:
                out.write(line)
            return
        header = one_line(self._header(episode).model_dump_json()) + "\n"
        episode.trace_path, created = self._create(self.directory, episode.id)
        with created:
            created.write(header + line)
        if self._private is not None:
            self._spooled_bytes += len(header)
            self._files[episode.id] = (episode.trace_path, weakref.ref(episode))
            self._trim_spool()

    def _trim_spool(self) -> None:
        """Delete the spooled traces of the oldest closed episodes past `SPOOL_KEEP_BYTES`."""
        if self._spooled_bytes <= SPOOL_KEEP_BYTES:
            return
        for episode_id, (_, ref) in list(self._files.items()):
            if self._spooled_bytes <= SPOOL_KEEP_BYTES:
                return
            if ref() is None:
                self._forget_file(episode_id)

    def _forget_file(self, episode_id: str) -> None:
        entry = self._files.pop(episode_id, None)
        if entry is None or self._private is None:
            return
        path = entry[0]
        try:
            self._spooled_bytes -= path.stat().st_size
            path.unlink()
        except OSError:
            pass

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

    def take(self, episode: Episode) -> list[TraceEvent]:
        """The events recorded for ``episode`` since the previous `take` (with ``hand_over``)."""
        new = episode.pending
        if not new:
            return []
        episode.pending = []
        episode.usage.pending_bytes = 0
        self.account.grew(episode)
        return new

    def keep(self, episode: Episode, event: ToolCallEvent, nbytes: int) -> None:
        """Keep a successful call for the suite's dependency gate (counted against the budgets)."""
        episode.kept.append(event)
        episode.usage.kept_bytes += nbytes
        self.account.grew(episode)

    def written(
        self, episode_id: str, episode: Episode | None = None
    ) -> tuple[dict[str, Any], list[Any]] | None:
        """The header and events of an episode's trace file, read back; None if it has none.

        A private spool's file is deleted once read (its reader, `TRACE_METHOD`, closed the episode).
        """
        path = episode.trace_path if episode is not None else None
        if path is None:
            entry = self._files.get(episode_id)
            path = entry[0] if entry is not None else None
        if path is None or self.directory is None:
            return None
        try:
            with path.open(encoding="utf-8") as lines:
                header = json.loads(next(lines, "{}"))
                events = [json.loads(line) for line in lines if line.strip()]
        except (OSError, ValueError):
            logger.warning("the trace file %s of episode %r could not be read back", path, episode_id)
            return None
        self._forget_file(episode_id)
        return header, events
