"""Installing task-file servers on first use, each pinned, each install done once.

npm packages go into a cache directory, PyPI servers into virtual environments of their own (or are
found in ours).

The cache is ``$MCP_RESILI_CACHE_DIR`` (default ``~/.cache/mcp-resili``). An install prints one line
saying what it installs where; a registry that cannot be reached is one line naming the package and
what the installer said. Installs are locked against each other (several processes may start at once).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mcp_resili.errors import UserError
from mcp_resili.taskfiles.model import ServerDef

CACHE_ENV = "MCP_RESILI_CACHE_DIR"
INSTALL_TIMEOUT = 900.0
_MARKER = ".mcp-resili-installed"


class InstallError(UserError):
    """A server that could not be installed or found; one line."""


def cache_dir() -> Path:
    """Where servers are installed."""
    configured = os.environ.get(CACHE_ENV)
    base = Path(configured) if configured else Path.home() / ".cache" / "mcp-resili"
    return base / "servers"


@dataclass(frozen=True)
class Locks:
    """Lock files that pin a suite's servers with everything they depend on."""

    #: A directory holding ``package.json`` and ``package-lock.json`` for every npm server.
    npm: Path | None = None
    #: Requirements files (``pip freeze`` form) for PyPI servers with their own environment, by server.
    pip: dict[str, Path] | None = None


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _announce(what: str, where: Path) -> None:
    print(f"mcp-resili: installing {what} into {where} (first use)", file=sys.stderr, flush=True)


def _run(command: Sequence[str], what: str, registry: str) -> None:
    try:
        proc = subprocess.run(
            list(command),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise InstallError(f"cannot install {what}: {command[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise InstallError(
            f"cannot install {what}: {registry} did not finish in {INSTALL_TIMEOUT:g} s"
        ) from None
    if proc.returncode != 0:
        lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        said = next((line for line in lines if "ERR" in line or "ERROR" in line), lines[-1] if lines else "")
        raise InstallError(
            f"cannot install {what} from {registry} (exit {proc.returncode}; is the registry reachable?): "
            f"{said[:300]}"
        )


def server_argv(name: str, server: ServerDef, locks: Locks | None = None) -> list[str]:
    """The command line that starts ``server`` (placeholders not yet filled), installed and prepared."""
    argv = _installed_argv(name, server, locks or Locks())
    if server.prepare:
        own_venv = server.pypi is not None and server.venv == "own"
        python = Path(argv[0]).parent / "python" if own_venv else Path(sys.executable)
        _prepare(name, [part.replace("{python}", str(python)) for part in server.prepare])
    return argv


def _prepare(name: str, command: Sequence[str]) -> None:
    """Run a server's prepare command, its output kept aside; a failure is one line naming the server."""
    try:
        proc = subprocess.run(
            list(command), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=INSTALL_TIMEOUT
        )
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        raise InstallError(f"server {name!r}: its prepare command could not run: {exc}") from None
    if proc.returncode != 0:
        lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        said = lines[-1] if lines else "(no output)"
        raise InstallError(
            f"server {name!r}: its prepare command failed (exit {proc.returncode}): {said[:300]}"
        )


def _installed_argv(name: str, server: ServerDef, locks: Locks) -> list[str]:
    assert server.command is not None  # a url server is never started
    if server.npm is not None:
        bin_dir = _npm_install(server.npm, locks.npm)
        return [str(bin_dir / server.command), *server.args]
    if server.pypi is not None and server.venv == "shared":
        scripts = Path(sysconfig.get_path("scripts"))
        found = scripts / server.command
        if not found.exists():
            package = server.pypi.split("==")[0]
            raise InstallError(
                f"server {name!r} runs {server.command} from this Python environment, but {package} is not "
                f"installed here: pip install '{server.pypi}' (for the built-in realmcp suite: "
                "pip install 'mcp-resili[realmcp]')"
            )
        return [str(found), *server.args]
    if server.pypi is not None:
        lock = (locks.pip or {}).get(name)
        bin_dir = _venv_install(server.pypi, server.requirements, lock)
        return [str(bin_dir / server.command), *server.args]
    return [server.command, *server.args]


def _npm_install(spec: str, lock: Path | None) -> Path:
    if lock is not None:
        manifest = (lock / "package.json").read_text(encoding="utf-8")
        locked = (lock / "package-lock.json").read_text(encoding="utf-8")
        target = cache_dir() / "npm" / _key(manifest, locked)
    else:
        manifest, locked = "", ""
        target = cache_dir() / "npm" / _key(spec)
    bin_dir = target / "node_modules" / ".bin"
    with _locked(target):
        if (target / _MARKER).exists():
            return bin_dir
        npm = shutil.which("npm")
        if npm is None:
            raise InstallError(f"cannot install {spec}: npm is not on PATH (install Node.js 20 or later)")
        target.mkdir(parents=True, exist_ok=True)
        if lock is not None:
            _announce(f"the npm servers pinned by {lock}", target)
            (target / "package.json").write_text(manifest, encoding="utf-8")
            (target / "package-lock.json").write_text(locked, encoding="utf-8")
            command = [npm, "ci", "--prefix", str(target), "--no-audit", "--no-fund", "--loglevel=error"]
        else:
            _announce(spec, target)
            (target / "package.json").write_text(json.dumps({"private": True}), encoding="utf-8")
            command = [
                npm,
                "install",
                "--prefix",
                str(target),
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                spec,
            ]
        _run(command, spec, "the npm registry")
        (target / _MARKER).write_text(spec, encoding="utf-8")
    return bin_dir


def venv_dir(pins: str) -> Path:
    """Where a PyPI server with these pins gets its virtual environment.

    Keyed by the base interpreter, which the new environment runs on (`venv` run from inside a
    virtual environment uses its base): every environment made from one Python shares the server's.
    """
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    return cache_dir() / "venv" / _key(pins, version, base)


def _venv_install(spec: str, requirements: Sequence[str], lock: Path | None) -> Path:
    pins = lock.read_text(encoding="utf-8") if lock is not None else "\n".join([spec, *requirements])
    target = venv_dir(pins)
    bin_dir = target / "bin"
    with _locked(target):
        if (target / _MARKER).exists():
            return bin_dir
        _announce(spec if lock is None else f"{spec} (pinned by {lock})", target)
        if target.exists():
            shutil.rmtree(target)  # a half-built environment from an interrupted install
        _run([sys.executable, "-m", "venv", str(target)], spec, "venv")
        requirements_file = target / "requirements.txt"
        requirements_file.write_text(pins + "\n", encoding="utf-8")
        pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        _run([*pip, "-r", str(requirements_file)], spec, "PyPI")
        (target / _MARKER).write_text(spec, encoding="utf-8")
    return bin_dir
