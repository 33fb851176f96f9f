"""Real mcp-resili servers for end-to-end tests: stdio launch parameters and HTTP subprocesses on 127.0.0.1.

An HTTP server is started as ``python -m mcp_resili serve --transport http`` on a free loopback port and
is ready once it accepts a TCP connection: readiness is polled with a bounded deadline (``anyio.fail_after``),
never assumed after a fixed sleep. A server that exits early fails the test with its stderr.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import socket
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
from mcp import Client, StdioServerParameters

from mcp_resili.constants import META_EPISODE, META_EVENT

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
#: Bound on how long a server may take to start accepting connections, and on any one CLI run.
START_TIMEOUT = 60.0
CLI_TIMEOUT = 60.0
#: Times an HTTP server is restarted on a new port when the free port was taken in between.
PORT_ATTEMPTS = 3

Transport = Literal["stdio", "http"]


class ServerStartError(RuntimeError):
    """The server subprocess exited, or did not accept connections before the deadline."""


def child_env(**extra: str) -> dict[str, str]:
    """The environment a child process needs: PATH, and PYTHONPATH pointing at this checkout."""
    pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
    for name in ("HOME", "MCP_RESILI_CHECK_FRESH_RESULTS"):  # the latter: tests/conftest.py
        if name in os.environ:
            env[name] = os.environ[name]
    env.update(extra)
    return env


def with_test_path(command: str) -> str:
    """``command`` (a shell-style command line) run with `child_env`'s ``PYTHONPATH``.

    The runner starts a ``--server`` command with the MCP SDK's default environment, which has no
    ``PYTHONPATH``: a suite installed for the tests only (the tiny suite, see tests/conftest.py) is
    found there through this, as a user would name where their suite lives.
    """
    return f"env PYTHONPATH={shlex.quote(child_env()['PYTHONPATH'])} {command}"


def cli_command(*args: str) -> list[str]:
    """``mcp-resili ARGS``: the installed console script next to this interpreter, else ``python -m``."""
    script = Path(sys.executable).with_name("mcp-resili")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), *args]
    return [sys.executable, "-m", "mcp_resili", *args]


@contextlib.contextmanager
def process(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` with its output in ``log``; on exit stop it (terminate, then kill)."""
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, env=env
        )
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=START_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def accepting(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until ``proc`` accepts connections on ``port``; fail with its log if it exits first."""
    with anyio.fail_after(START_TIMEOUT):
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)  # polling another process's socket; nothing is timed
                continue
            await stream.aclose()
            return


def interruptible(argv: list[str]) -> list[str]:
    """``argv`` started with Ctrl-C's default restored, so SIGINT stops it as it stops a user's.

    A process started where SIGINT is ignored (a test runner's worker, a shell's background job)
    passes that on to its children, and Python then installs no KeyboardInterrupt for them.
    """
    restore = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", restore, *argv]


def serve_command(*args: str) -> list[str]:
    """The command line of ``mcp-resili serve ARGS`` run by this interpreter."""
    return [sys.executable, "-m", "mcp_resili", "serve", *args]


def run_cli(*args: str, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run ``mcp-resili ARGS`` to completion with no standard input; capture stdout and stderr."""
    return subprocess.run(
        cli_command(*args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=timeout,
        check=False,
    )


def stored_episodes(db: Path) -> int:
    """Episodes stored in ``db`` so far (0 before the run has created it)."""
    try:
        with sqlite3.connect(db) as conn:
            return int(conn.execute("SELECT count(*) FROM episodes").fetchone()[0])
    except sqlite3.Error:
        return 0


async def signal_mid_run(run_args: list[str], db: Path, signum: int, *, stored: int = 3) -> tuple[int, str]:
    """Start ``mcp-resili run RUN_ARGS --db DB``, send ``signum`` once ``stored`` episodes are stored.

    Returns the exit status and stderr. The run must still be mid-way then: give it a model that
    holds its requests after a few episodes (`FakeModelServer`'s ``hold_after_finishes``).
    """
    # Ctrl-C must reach the run even where the test runner ignores SIGINT (which children inherit):
    # restore its default, which Python turns into KeyboardInterrupt, then become the run.
    become_run = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.executable, [sys.executable, '-m', 'mcp_resili', *sys.argv[1:]])"
    )
    argv = [sys.executable, "-c", become_run, "run", *run_args, "--db", str(db)]
    async with await anyio.open_process(argv, cwd=REPO_ROOT) as proc:
        with anyio.fail_after(START_TIMEOUT):
            while stored_episodes(db) < stored:
                await anyio.sleep(0.02)  # polling another process's database; nothing is timed
        proc.send_signal(signum)
        assert proc.stderr is not None
        with anyio.fail_after(CLI_TIMEOUT):
            stderr = b"".join([chunk async for chunk in proc.stderr])
            returncode = await proc.wait()
    return returncode, stderr.decode()


def stdio_parameters(*serve_args: str) -> StdioServerParameters:
    """Launch parameters for ``mcp-resili serve SERVE_ARGS`` over stdio."""
    command = serve_command(*serve_args)
    return StdioServerParameters(command=command[0], args=command[1:], env=child_env())


def free_port(host: str = HOST) -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def can_find_listening_ports() -> bool:
    """Whether `listening_ports` works here (Linux ``/proc``)."""
    return Path("/proc/self/fd").is_dir() and Path("/proc/net/tcp").is_file()


def listening_ports(pid: int) -> set[int]:
    """TCP ports process ``pid`` listens on, read from ``/proc`` (empty if it has none or is gone)."""
    try:
        inodes = {
            target[len("socket:[") : -1]
            for target in (os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir())
            if target.startswith("socket:[")
        }
    except OSError:
        return set()
    ports = set()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        if not table.is_file():
            continue
        for line in table.read_text(encoding="ascii").splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: TCP_LISTEN
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def new_episode(prefix: str, **fields: Any) -> dict[str, Any]:
    """A ``_meta`` for ``tools/call`` naming a fresh episode (``fields``: task, fault_key, seed)."""
    return {META_EPISODE: {"id": f"{prefix}-{uuid.uuid4().hex[:12]}", **fields}}


def event_of(result: Any) -> dict[str, Any]:
    """The trace event a server started with ``--expose-faults`` attached to a ``CallToolResult``."""
    meta = result.meta or {}
    assert META_EVENT in meta, f"result carries no {META_EVENT}: {result!r}"
    event: dict[str, Any] = meta[META_EVENT]
    return event


@dataclass(frozen=True)
class Target:
    """Where a test's client connects: a stdio server it spawns itself, or a running HTTP server."""

    transport: Transport
    serve_args: tuple[str, ...] = ()
    url: str | None = None

    def client(self, *, read_timeout_seconds: float = 30.0) -> Client:
        """A fresh (not yet entered) `mcp.Client` for this target."""
        if self.transport == "http":
            assert self.url is not None
            return Client(self.url, read_timeout_seconds=read_timeout_seconds)
        return Client(stdio_parameters(*self.serve_args), read_timeout_seconds=read_timeout_seconds)


class HttpServer:
    """An ``mcp-resili serve --transport http`` subprocess listening on 127.0.0.1.

    With ``port=None`` the server binds port 0 and its real port is read from ``/proc`` once it listens
    (Linux): no other process can take the port in between, and the port found is certainly this server's.
    """

    def __init__(self, serve_args: tuple[str, ...], port: int | None, stderr_path: Path, **env: str) -> None:
        """``env``: variables the server gets besides `child_env`'s."""
        self.serve_args = serve_args
        self.port = port
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("wb")
        self.process = subprocess.Popen(
            serve_command(*serve_args, "--transport", "http", "--host", HOST, "--port", str(port or 0)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=child_env(**env),
        )

    @property
    def url(self) -> str:
        """The Streamable HTTP endpoint."""
        if self.port is None:
            raise ServerStartError("the server's port is known once wait_until_accepting() returned")
        return f"http://{HOST}:{self.port}/mcp"

    @property
    def target(self) -> Target:
        """A `Target` connecting to this server."""
        return Target("http", self.serve_args, self.url)

    def stderr(self) -> str:
        """What the server has written to stderr so far."""
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    async def wait_until_accepting(self, timeout: float = START_TIMEOUT) -> None:
        """Return once the server accepts TCP connections; `ServerStartError` if it exits or times out."""
        delay = 0.005
        try:
            with anyio.fail_after(timeout):
                while True:
                    if self.process.poll() is not None:
                        raise ServerStartError(
                            f"server exited with {self.process.returncode} before accepting connections "
                            f"on {HOST}:{self.port or 0}; stderr:\n{self.stderr()}"
                        )
                    if self.port is None:
                        ports = listening_ports(self.process.pid)
                        if len(ports) > 1:
                            raise ServerStartError(f"server listens on several ports: {sorted(ports)}")
                        self.port = next(iter(ports), None)
                    if self.port is not None:
                        try:
                            stream = await anyio.connect_tcp(HOST, self.port)
                        except OSError:
                            pass  # refused: not listening yet
                        else:
                            await stream.aclose()
                            return
                    # Not ready: back off a little before looking again (bounded by the deadline above).
                    await anyio.sleep(delay)
                    delay = min(delay * 2, 0.1)
        except TimeoutError:
            raise ServerStartError(
                f"server did not accept connections on {HOST}:{self.port or 0} within {timeout} s; "
                f"stderr:\n{self.stderr()}"
            ) from None

    def stop(self) -> None:
        """Terminate the server and reap it (kill it if it does not stop within the deadline)."""
        try:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=START_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=START_TIMEOUT)
        finally:
            self._stderr.close()


def _port_was_taken(server: HttpServer) -> bool:
    return server.process.poll() is not None and "address already in use" in server.stderr().lower()


async def start_http_server(*serve_args: str, workdir: Path, **env: str) -> HttpServer:
    """Start ``mcp-resili serve SERVE_ARGS`` over HTTP on a free port and return once it accepts connections.

    The server's stderr goes to ``workdir/server-N.stderr`` and is quoted when it fails to start; ``env``
    adds to its environment. Where
    ``/proc`` is missing a free port is picked first, and the server is started again on another one if
    that port was taken before the server bound it.
    """
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = None if can_find_listening_ports() else free_port()
        server = HttpServer(serve_args, port, workdir / f"server-{uuid.uuid4().hex[:8]}.stderr", **env)
        try:
            await server.wait_until_accepting()
        except ServerStartError:
            server.stop()
            if port is not None and _port_was_taken(server) and attempt < PORT_ATTEMPTS:
                continue
            raise
        except BaseException:
            server.stop()
            raise
        return server
    raise ServerStartError(f"no free port after {PORT_ATTEMPTS} attempts")


@contextlib.asynccontextmanager
async def running_http_server(*serve_args: str, workdir: Path, **env: str) -> AsyncIterator[HttpServer]:
    """`start_http_server` as an async context manager that stops the server on exit."""
    server = await start_http_server(*serve_args, workdir=workdir, **env)
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def http_server(*serve_args: str, workdir: Path) -> Iterator[HttpServer]:
    """Synchronous `running_http_server`, for fixtures and tests that run no event loop."""
    server = anyio.run(functools.partial(start_http_server, *serve_args, workdir=workdir))
    try:
        yield server
    finally:
        server.stop()


def run_inspector(inspector: Path, home: Path, *args: str, accept_tool_errors: bool = False) -> Any:
    """Run ``mcp-inspector --cli ARGS``; return its stdout parsed as JSON, or fail with its output.

    The target comes last in ``ARGS``: everything after its ``--`` is the server's command line.
    ``HOME`` and the catalog point into ``home`` so the Inspector writes nothing outside the test.
    With ``accept_tool_errors`` an ``isError`` result (the Inspector exits 5) is an answer, not a failure.
    """
    import json

    import pytest

    env = child_env(HOME=str(home), MCP_CATALOG_PATH=str(home / "mcp.json"))
    # The default 15 s connect timeout is too short for a Python server starting on a loaded 2-core
    # machine; the whole run stays bounded by CLI_TIMEOUT.
    command = [str(inspector), "--cli", "--connect-timeout", str(int(CLI_TIMEOUT * 1000)), *args]
    proc = subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    accepted = (0, 5) if accept_tool_errors else (0,)
    assert proc.returncode in accepted, (
        f"{command} exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    )
    start = proc.stdout.find("{")  # some servers print a banner first
    try:
        return json.loads(proc.stdout[start:] if start >= 0 else proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"the Inspector printed no JSON:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
