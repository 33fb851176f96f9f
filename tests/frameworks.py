"""What the framework tests share: the episodes they play and the servers they play them on.

Each framework plays two episodes, as a user's agent would: a ResiliBench task over stdio under the
suite's own faults, and a ReliabilityBench task over Streamable HTTP under ``protocol:medium`` (an
episode that meets an elicitation request), in whatever era its MCP client speaks (2026-07-28: handle
mode; the handshake era: one session per episode). Both must score as the runner's episode of the same
task, trial and seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from framework_policy import runner_score, traced_score
from servers import serve_command

SEED = 5


@dataclass(frozen=True)
class Episode:
    suite: str
    faults: str
    task: str
    trial: int

    def serve_args(self, trace_dir: Path, *, pinned: bool) -> list[str]:
        """``serve`` arguments; ``pinned`` binds task and trial (stdio and handshake sessions)."""
        args = ["--suite", self.suite, "--faults", self.faults, "--seed", str(SEED), "--time-scale", "0"]
        args += ["--trace-dir", str(trace_dir)]
        if pinned:
            args += ["--task", self.task, "--trial", str(self.trial)]
        return args

    @property
    def start_arguments(self) -> dict[str, object]:
        return {"task": self.task, "trial": self.trial}


#: A ResiliBench episode under the suite's faults (two injected errors the oracle retries through).
RESILIBENCH = Episode("resilibench", "resilibench", "task_ada1c6bc", 2)
#: A ReliabilityBench episode under protocol:medium that meets an elicitation request.
RELIABILITYBENCH = Episode("reliabilitybench", "protocol:medium", "rb_scheduling_l2_02", 5)


def stdio_argv(episode: Episode, trace_dir: Path) -> list[str]:
    """The command line of ``serve`` over stdio for ``episode``."""
    return serve_command(*episode.serve_args(trace_dir, pinned=True))


def require(module: str, extra: str = "frameworks") -> None:
    """Skip, saying so, when a framework is not installed (``pip install -e '.[test]'``)."""
    try:
        __import__(module)
    except ImportError as exc:
        pytest.skip(f"{module} is not installed ({exc}): pip install -e '.[test,{extra}]'")


def only_trace(trace_dir: Path) -> Path:
    (path,) = sorted(trace_dir.glob("*.jsonl"))
    return path


#: Coping components that describe the client's own protocol habits (listing tools again, initializing
#: again): a framework may differ from the runner's loop there and still play the same episode.
CLIENT_HABITS = ("coping_relisted", "coping_reinitialized")


async def assert_scores_as_the_runner(episode: Episode, trace_dir: Path, db: Path) -> Any:
    """The episode's trace (``serve --trace-dir``) scores as the runner's episode of its task, trial, seed.

    Every component is equal, but for `CLIENT_HABITS`, which are returned with the score to be looked at.
    """
    trace, score = traced_score(episode.suite, only_trace(trace_dir))
    assert (trace.header.task, trace.header.trial, trace.header.seed) == (episode.task, episode.trial, SEED)
    row = await runner_score(episode.suite, episode.faults, episode.task, episode.trial, SEED, db)
    assert (score.label, score.value) == (row.label, row.value)
    theirs = {k: v for k, v in score.components.items() if k not in CLIENT_HABITS}
    runners = {k: v for k, v in row.score["components"].items() if k not in CLIENT_HABITS}
    assert theirs == runners
    return score
