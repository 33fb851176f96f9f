"""What the solver tells the model and the scorer about a sample's episode (through inspect's store).

inspect hands a model API no sample id, and a scorer only the sample's state: the solver writes the
episode here (`inspect_ai.util.store` is per sample), and our scripted models and scorer read it back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: Store key of the sample's `SampleEpisode`.
EPISODE_KEY = "mcp_resili:episode"
#: Store key of how the episode ended (`Outcome`).
OUTCOME_KEY = "mcp_resili:outcome"


def file_safe(text: str) -> str:
    """``text`` with every character but letters, digits, ``-``, ``_`` and ``.`` replaced by ``_``.

    The server names a trace file after its episode id this way, so an id made of these characters
    only is also its file's stem.
    """
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in text)


@dataclass(frozen=True)
class SampleEpisode:
    """One sample run (a task, in one epoch) as one episode of our server."""

    suite: str
    task: str
    #: 0-based, like `mcp-resili run`'s trials: the epoch minus one. The fault key is TASK/TRIAL.
    trial: int
    #: The episode id (file-safe: the trace is ``trace_dir/ID.jsonl``).
    id: str
    seed: int
    #: The fault SPEC of the sample's server; None with the user's own server (``-T server=URL``: its
    #: own plan applies, unknown here).
    faults: str | None
    variant: str
    #: The episode's call budget (the task's ``max_turns`` unless the eval overrides it).
    max_turns: int
    #: Seconds the episode may run (the task's ``timeout``), like the runner's time limit.
    time_limit: float
    #: Where the episode's trace file is (written by the server over stdio, by the solver over HTTP).
    trace_dir: str
    #: Whether ``trace_dir`` is a temporary directory, removed once the sample is scored.
    temporary: bool
    #: The URL of the server the sample's episode lives on (the task's shared one, or ``-T server``),
    #: None for a per-sample stdio server (``-T server=process``).
    server: str | None = None
    #: The eval's ``-T max_turns``, None without it: the trace header's ``max_turns``, as
    #: ``mcp-resili run --max-turns`` records it (the scorer reads the budget from there).
    max_turns_override: int | None = None

    @property
    def fault_key(self) -> str:
        """The runner's fault key of this trial: the same draws as ``mcp-resili run``."""
        return f"{self.task}/{self.trial}"

    def to_store(self) -> dict[str, Any]:
        """A JSON-ready dict (the store is written to the log)."""
        return asdict(self)

    @classmethod
    def from_store(cls, raw: object) -> SampleEpisode:
        """The episode the solver stored; a clear error outside an mcp_resili task."""
        if not isinstance(raw, dict):
            raise RuntimeError(
                "no mcp_resili episode in this sample: mcp_resili's models and scorer only work in "
                "mcp_resili's tasks (inspect eval mcp_resili/SUITE), with their own solver"
            )
        return cls(**raw)


@dataclass(frozen=True)
class Outcome:
    """How the solver's loop ended, in the runner's terms (`mcp_resili.trace.EpisodeEndEvent`)."""

    termination: str
    turns: int
    detail: str = ""
    stop_rules: str | None = None
    stop_rule: str | None = None

    def to_store(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_store(cls, raw: object) -> Outcome | None:
        """The stored outcome, None when the solver never got to write one (it failed)."""
        return cls(**raw) if isinstance(raw, dict) else None
