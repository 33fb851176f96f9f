import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_resili.registry import loader as _loader
from mcp_resili.server import backend as _backend

REPO_ROOT = Path(__file__).resolve().parents[1]

# Every result of a library that declares fresh results is checked, in this process and in every
# server it starts (`mcp_resili.server.backend.verify_fresh_results`), even if a plugin imported the
# package before this file set the variable.
os.environ["MCP_RESILI_CHECK_FRESH_RESULTS"] = "1"
_backend.verify_fresh_results = True


@pytest.fixture
def anyio_backend():
    return "asyncio"


# --- the tiny suite, installed as a third party's suite would be ----------------------------------

TINY_PACKAGE = REPO_ROOT / "tests" / "tiny_suite"


def install_tiny_suite(root: Path) -> Path:
    """Register ``tests/tiny_suite`` under ``root`` the way pip would: a ``tiny_suite-0.0.0.dist-info``
    (METADATA, and entry_points.txt naming ``tiny = tiny_suite:suite`` in ``mcp_resili.suites``) and
    the package linked beside it. With ``root`` on the path, `importlib.metadata` lists the entry point
    and ``get_suite("tiny")`` imports the package."""
    dist = root / "tiny_suite-0.0.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tiny-suite\nVersion: 0.0.0\n", encoding="utf-8"
    )
    (dist / "entry_points.txt").write_text("[mcp_resili.suites]\ntiny = tiny_suite:suite\n", encoding="utf-8")
    link = root / "tiny_suite"
    if not link.exists():
        link.symlink_to(TINY_PACKAGE, target_is_directory=True)
    return root


#: Where the tiny suite is installed for this test session: created by the first test process (the
#: pytest-xdist controller, or the one process with ``-n 0``), whose workers inherit it through the
#: environment. It is on ``sys.path`` here and on ``PYTHONPATH`` for every process a test starts
#: (`servers.child_env` copies it), so ``--suite tiny`` resolves by name everywhere, through a real
#: entry point.
_INHERITED_SITE = os.environ.get("MCP_RESILI_TESTS_TINY_SITE")
_OWN_SITE = not (_INHERITED_SITE and Path(_INHERITED_SITE, "tiny_suite-0.0.0.dist-info").is_dir())
TINY_SITE = (
    install_tiny_suite(Path(tempfile.mkdtemp(prefix="mcp-resili-tiny-site-")))
    if _OWN_SITE
    else Path(str(_INHERITED_SITE))
)
os.environ["MCP_RESILI_TESTS_TINY_SITE"] = str(TINY_SITE)
if str(TINY_SITE) not in sys.path:
    sys.path.append(str(TINY_SITE))
_PATHS = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if str(TINY_SITE) not in _PATHS:
    os.environ["PYTHONPATH"] = os.pathsep.join([str(TINY_SITE), *_PATHS])
_loader.registered_suites.cache_clear()  # in case anything listed the suites before it was installed
_loader.get_suite.cache_clear()


#: The files that keep a worker longest (wall time summed over their tests, measured in a fresh clone),
#: started first: pytest-xdist hands out whole files (``--dist loadfile``) in collection order (its own
#: reordering by test count is off: ``--no-loadscope-reorder`` in pyproject.toml), and one of these
#: started last keeps one core busy while the other idles. Order only; every file still runs.
LONGEST_FILES = (
    "test_ray.py",
    "test_proxy_transparent.py",
    "test_harnesses.py",
    "test_third_party_suite.py",
    "test_framework_outside.py",
    "test_quality.py",
    "test_transports.py",
    "test_proxy_third_party.py",
    "test_taskfiles.py",
    "test_layout.py",
    "test_resume_and_secrets.py",
    "test_protocol_real_clients.py",
    "test_sessions.py",
    "test_readme_commands.py",
    "test_handles.py",
    "test_agent_cmd.py",
    "test_validator.py",
    "test_llm_cli.py",
    "test_conformance.py",
    "test_proxy.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: n for n, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWN_SITE:  # the process that made it removes it, after its workers are done
        shutil.rmtree(TINY_SITE, ignore_errors=True)


PEERS = REPO_ROOT / "tests" / "peers"
INSPECTOR = PEERS / "node_modules" / ".bin" / "mcp-inspector"
#: Every peer package.json pins; a missing one means node_modules is stale and gets reinstalled.
PEER_BINS = (INSPECTOR, PEERS / "node_modules" / ".bin" / "mcp-server-everything")
NPM_TIMEOUT = 600.0


@contextlib.contextmanager
def exclusive(name: str) -> Iterator[None]:
    """Hold an exclusive lock across test processes (pytest-xdist workers) for a one-time install."""
    with open(Path(os.environ.get("TMPDIR", "/tmp")) / f"mcp-resili-tests-{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def inspector() -> Path:
    """The Inspector's executable, installed from tests/peers/package-lock.json when missing."""
    with exclusive("npm-peers"):
        return _install_peers()


def _install_peers() -> Path:
    if not all(path.exists() for path in PEER_BINS):
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(
                "npm is not on PATH: install Node.js and npm, then run `npm ci --prefix tests/peers`",
                pytrace=False,
            )
        proc = subprocess.run(
            [npm, "ci", "--prefix", str(PEERS), "--no-audit", "--no-fund"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT,
            check=False,
        )
        if proc.returncode != 0 or not all(path.exists() for path in PEER_BINS):
            pytest.fail(
                f"`npm ci --prefix {PEERS}` exited with {proc.returncode}"
                f" and did not install every peer ({', '.join(p.name for p in PEER_BINS)}):\n"
                f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}",
                pytrace=False,
            )
    if shutil.which("node") is None:
        pytest.fail("node is not on PATH: the Inspector CLI needs Node.js", pytrace=False)
    return INSPECTOR


CHROMIUM = Path("/usr/bin/chromium")
APT_TIMEOUT = 900.0


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's chromium, installed with apt-get when missing; an install failure fails loudly."""
    with exclusive("chromium"):
        return _install_chromium()


def _install_chromium() -> Path:
    if not CHROMIUM.exists():
        for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
            proc = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=APT_TIMEOUT,
                check=False,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
            if proc.returncode != 0:
                pytest.fail(
                    f"`{' '.join(command)}` exited with {proc.returncode} (the HTML report tests need "
                    f"Debian's chromium):\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}",
                    pytrace=False,
                )
        if not CHROMIUM.exists():
            pytest.fail(f"apt-get installed chromium but {CHROMIUM} is missing", pytrace=False)
    return CHROMIUM
