"""Source trees for same-run baselines: a git revision checked out into a temporary work tree."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def checkout(revision: str) -> Iterator[Path]:
    """A detached work tree of ``revision`` (removed afterwards); ``.`` is this checkout itself."""
    if revision == ".":
        yield ROOT
        return
    with tempfile.TemporaryDirectory(prefix="mcp-resili-base-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), revision],
            check=True,
            capture_output=True,
        )
        try:
            yield tree
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True
            )


def tree_env(tree: Path, **extra: str) -> dict[str, str]:
    """The environment that makes ``python -m mcp_resili`` import the package from ``tree``."""
    return {**os.environ, "PYTHONPATH": str(tree), **extra}


def revision_of(tree: Path) -> str:
    """The short commit of ``tree`` (``+`` when it has uncommitted changes)."""
    head = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return head + ("+" if dirty else "")


def rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of process ``pid`` in MiB (Linux /proc)."""
    values: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Finished:
    """A child process run to its end: its exit code, its rusage (``wait4``), its output, its wall time."""

    code: int
    usage: resource.struct_rusage
    stdout: str
    stderr: str
    wall: float


def run_measured(
    argv: list[str], cwd: Path, env: dict[str, str], while_running: Callable[[int], object] | None = None
) -> Finished:
    """Run ``argv`` to its end, measured from outside (``while_running(pid)`` is called once it started)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err)
        if while_running is not None:
            while_running(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        return Finished(os.waitstatus_to_exitcode(status), usage, out.read(), err.read(), wall)
