"""Building an episode's starting state: files, SQLite databases, git repositories and memory graphs.

Each task's fixture is built once into a template (git runs a handful of processes per commit), then
copied into the episode's directories for every episode: the workspace (the only directory the
servers are pointed at) and a private state directory beside it. Git runs with a fixed identity and
fixed dates, so a fixture repository has the same commit ids every time.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

from mcp_resili.taskfiles.model import Fixture, GitFixture

#: The environment every git command (ours and the servers') runs with: same identity, same clock.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "mcp-resili",
    "GIT_AUTHOR_EMAIL": "fixture@mcp-resili.invalid",
    "GIT_COMMITTER_NAME": "mcp-resili",
    "GIT_COMMITTER_EMAIL": "fixture@mcp-resili.invalid",
    "GIT_AUTHOR_DATE": "1767268800 +0000",
    "GIT_COMMITTER_DATE": "1767268800 +0000",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
}
STATE_PREFIX = "{state}/"


class FixtureError(RuntimeError):
    """A fixture that cannot be built (bad SQL, a failing git command): a problem of the task file."""


def resolve(path: str, workspace: Path, state: Path) -> Path:
    """A fixture or verifier path: relative to the workspace, or to the state directory (``{state}/``)."""
    if path.startswith(STATE_PREFIX):
        return state / path.removeprefix(STATE_PREFIX)
    return workspace / path


def git_env() -> dict[str, str]:
    """The environment of a git command: ours with a fixed identity and clock."""
    return {**os.environ, **GIT_ENV}


def run_git(repo: Path, *args: str) -> str:
    """Run ``git ARGS`` in ``repo``; `FixtureError` with git's message when it fails."""
    proc = subprocess.run(
        ["git", *args], cwd=repo, env=git_env(), capture_output=True, text=True, check=False, timeout=60
    )
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        raise FixtureError(f"git {' '.join(args)} failed: {said[-1] if said else proc.returncode}")
    return proc.stdout


def build(fixture: Fixture, workspace: Path, state: Path) -> None:
    """Build ``fixture`` into empty ``workspace`` and ``state`` directories."""
    for item in fixture.files:
        _write(resolve(item.path, workspace, state), item.content)
    for db in fixture.sqlite:
        target = resolve(db.path, workspace, state)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with sqlite3.connect(target) as connection:
                connection.executescript(db.sql)
            connection.close()
        except sqlite3.Error as exc:
            raise FixtureError(f"fixture.sqlite {db.path}: {exc}") from None
    for repo in fixture.git:
        _build_repo(repo, resolve(repo.path, workspace, state))
    if fixture.memory is not None:
        lines = [
            json.dumps(
                {"type": "entity", "name": e.name, "entityType": e.type, "observations": list(e.observations)}
            )
            for e in fixture.memory.entities
        ] + [
            json.dumps({"type": "relation", "from": r.source, "to": r.target, "relationType": r.type})
            for r in fixture.memory.relations
        ]
        _write(resolve(fixture.memory.path, workspace, state), "\n".join(lines))


def _write(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")


def _build_repo(spec: GitFixture, repo: Path) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    run_git(repo, "init", "-q", "-b", spec.default_branch)
    branches = {spec.default_branch}
    for commit in spec.commits:
        if commit.branch is not None and commit.branch != _current(repo):
            run_git(repo, "checkout", "-q", *(["-b"] if commit.branch not in branches else []), commit.branch)
            branches.add(commit.branch)
        for path, content in commit.files.items():
            _write(repo / path, content)
        for path in commit.remove:
            run_git(repo, "rm", "-q", "--", path)
        run_git(repo, "add", "-A")
        run_git(repo, "commit", "-q", "--allow-empty", "-m", commit.message)
    for args in spec.script:
        run_git(repo, *args)
    for path, content in spec.uncommitted.items():
        _write(repo / path, content)


def _current(repo: Path) -> str:
    return run_git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() if (repo / ".git").exists() else ""


def clear(directory: Path) -> None:
    """Empty ``directory`` but keep it: servers started in it keep a valid working directory."""
    directory.mkdir(parents=True, exist_ok=True)
    for child in directory.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


class Templates:
    """Each task's fixture built once, copied into an episode's directories on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._built: dict[str, tuple[Path, Path]] = {}
        # Episodes open in worker threads, several at once: one builds a template at a time.
        self._lock = threading.Lock()

    def lay(self, task_id: str, fixture: Fixture, workspace: Path, state: Path) -> None:
        """Empty ``workspace`` and ``state``, then copy the task's fixture into them."""
        with self._lock:
            template = self._built.get(task_id)
            if template is None:
                base = self.root / f"t{len(self._built)}"
                template = (base / "ws", base / "state")
                for directory in template:
                    directory.mkdir(parents=True, exist_ok=True)
                build(fixture, *template)
                self._built[task_id] = template
        for source, target in zip(template, (workspace, state), strict=True):
            clear(target)
            shutil.copytree(source, target, dirs_exist_ok=True, symlinks=True)


def site_pages(fixture: Fixture) -> Mapping[str, tuple[int, str, bytes]]:
    """The fixture site as URL → (status, content type, body)."""
    return {url: (page.status, page.type, page.body.encode("utf-8")) for url, page in fixture.site.items()}
