"""Which episode a model call belongs to, its ordinal there, and the trace file its decision goes to.

A call names its episode in the ``x-mcp-resili-episode`` header, exactly as an MCP request may: a plain
id, or ``{"id", "task", "trial", "seed", "fault_key"}`` (an SDK sets it with ``default_headers``). Its
fault key, which seeds the draws, is the header's ``fault_key``, else ``TASK/TRIAL`` when it names a
task (trial 0 unless named: the key the runner and the MCP server use), else the id. A call naming no
episode belongs to its client's: ``client-N``, numbered in order of first appearance, a client being
told apart by its credential and user agent through a salted digest kept in memory only (the key
itself is never stored or written, and the digest never leaves the process).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from mcp.shared.exceptions import MCPError

from mcp_resili.constants import EPISODE_HEADER
from mcp_resili.server.episodes import fault_key_of, parse_episode
from mcp_resili.trace.model import ModelFaultEvent, dump_event, trace_stem

#: Episodes whose model-call counters are kept; past it the least recently used is forgotten.
MAX_EPISODES = 4096
#: The suffix of an episode's model-API trace file, beside the MCP trace ``EPISODE.jsonl``.
TRACE_SUFFIX = ".model_api.jsonl"
#: Trace files kept open at once (the most recently written episodes').
OPEN_FILES = 64


class EpisodeHeaderError(ValueError):
    """An episode header that cannot be read (the message says why)."""


@dataclass(frozen=True)
class CallEpisode:
    """The episode a model call belongs to: its id, its fault key and its seed (None: the gateway's)."""

    id: str
    fault_key: str
    seed: int | None = None


def episode_from_header(value: str) -> CallEpisode:
    """The episode the header names; `EpisodeHeaderError` when it names none properly."""
    raw: object = value
    if value.lstrip().startswith("{"):
        try:
            raw = json.loads(value)
        except ValueError as exc:
            raise EpisodeHeaderError(f"{EPISODE_HEADER} is not valid JSON: {exc}") from None
    try:
        named = parse_episode(raw, EPISODE_HEADER)
    except MCPError as exc:
        raise EpisodeHeaderError(exc.error.message) from None
    if named.fault_key is not None:
        key = named.fault_key
    elif named.task is not None:
        key = fault_key_of(named.task, named.trial or 0)
    else:
        key = named.id
    return CallEpisode(named.id, key, named.seed)


class ClientLabels:
    """``client-N`` for calls that name no episode, one N per client (see the module docstring)."""

    def __init__(self) -> None:
        self._salt = secrets.token_bytes(16)
        self._labels: dict[bytes, str] = {}

    def label(self, headers: Mapping[str, str]) -> str:
        """The label of the client that sent ``headers``."""
        digest = hashlib.blake2b(key=self._salt, digest_size=16)
        for name in ("authorization", "x-api-key", "user-agent"):
            digest.update(headers.get(name, "").encode("utf-8", errors="replace") + b"\x00")
        key = digest.digest()
        if key not in self._labels:
            self._labels[key] = f"client-{len(self._labels) + 1}"
        return self._labels[key]


class Ordinals:
    """The next model-call ordinal of each episode (0, 1, ...), by arrival."""

    def __init__(self, limit: int = MAX_EPISODES) -> None:
        self._next: OrderedDict[str, int] = OrderedDict()
        self._limit = limit

    def take(self, episode: str) -> int:
        """The ordinal of the call arriving now in ``episode``."""
        ordinal = self._next.pop(episode, 0)
        self._next[episode] = ordinal + 1
        if len(self._next) > self._limit:
            self._next.popitem(last=False)
        return ordinal


class TraceFiles:
    """Appends each decision to ``DIR/EPISODE.model_api.jsonl`` (one JSON event per line).

    The files of the most recent episodes stay open (opening a file per call was a tenth of the
    gateway's CPU per call); every line is flushed as written, so a reader sees whole lines.
    """

    def __init__(self, directory: Path | None, open_files: int = OPEN_FILES) -> None:
        self.directory = directory
        self._open: OrderedDict[str, TextIO] = OrderedDict()
        self._limit = open_files
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def path(self, episode: str) -> Path | None:
        """Where ``episode``'s model-API events go (None without a trace directory)."""
        if self.directory is None:
            return None
        return self.directory / f"{trace_stem(episode)}{TRACE_SUFFIX}"

    def write(self, event: ModelFaultEvent) -> None:
        """Append ``event`` to its episode's file."""
        out = self._open.pop(event.episode, None)
        if out is None:
            path = self.path(event.episode)
            if path is None:
                return
            out = path.open("a", encoding="utf-8")
            if len(self._open) >= self._limit:
                self._open.popitem(last=False)[1].close()
        self._open[event.episode] = out
        out.write(dump_event(event) + "\n")
        out.flush()

    def close(self) -> None:
        """Close every open file."""
        while self._open:
            self._open.popitem()[1].close()


def read_model_events(path: Path) -> list[ModelFaultEvent]:
    """The events of a model-API trace file, in order."""
    lines = path.read_text(encoding="utf-8").split("\n")
    return [ModelFaultEvent.model_validate_json(line) for line in lines if line.strip()]
