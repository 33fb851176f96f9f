"""Binding a model-API server's socket, and serving an ASGI app (the model server) on it with uvicorn.

The fault gateway serves itself (`mcp_resili.modelapi.gateway.ModelGateway.serve`, on aiohttp).
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import uvicorn
from starlette.types import ASGIApp

from mcp_resili.server.transports import HttpAccess, check_exposure


class _Server(uvicorn.Server):
    """uvicorn with a start event (no polling), leaving signal handlers alone when embedded."""

    def __init__(self, config: uvicorn.Config, *, handle_signals: bool) -> None:
        super().__init__(config)
        self.ready = anyio.Event()
        self._handle_signals = handle_signals

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start, then say so."""
        await super().startup(sockets)
        self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Uvicorn's signal handling (Ctrl-C stops it) only for a command-line server."""
        if self._handle_signals:
            with super().capture_signals():
                yield
        else:
            yield


def loop_options() -> dict[str, Any]:
    """`anyio.run` options for a command-line server: uvloop as the event loop, when it is installed.

    A proxy's CPU is mostly event-loop and socket work: uvloop cut the gateway's per call by 10-20%
    (docs/benchmarks.md). It is a dependency where it builds (not Windows); elsewhere, asyncio's loop.
    """
    return {"use_uvloop": importlib.util.find_spec("uvloop") is not None}


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0 picks a free port); a busy port raises `OSError` now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    # Answers go out as several writes (head, events): without NODELAY a write waits for an ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def base_url(sock: socket.socket) -> str:
    """``http://HOST:PORT`` of a bound socket."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


async def serve_app(
    app: ASGIApp,
    sock: socket.socket,
    *,
    on_started: Callable[[str], Any] | None = None,
    handle_signals: bool = False,
) -> None:
    """Serve ``app`` on ``sock`` until cancelled; ``on_started`` gets the base URL once it listens."""
    config = uvicorn.Config(
        app,
        http="h11",
        lifespan="on",
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=2,
        # Longer than any client's idle reuse (aiohttp keeps 15 s by default): a client never sends on
        # a connection we are closing.
        timeout_keep_alive=75,
    )
    server = _Server(config, handle_signals=handle_signals)
    stopped = anyio.Event()

    async def run() -> None:
        try:
            # Shielded: a cancelled caller stops the server through `should_exit` (a graceful shutdown
            # that ends its connections and lifespan), never by cancelling uvicorn mid-way.
            with anyio.CancelScope(shield=True):
                await server.serve([sock])
        finally:
            stopped.set()
            server.ready.set()

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        try:
            await server.ready.wait()
            if not server.started:
                raise OSError(f"the model-API server on {base_url(sock)} did not start")
            if on_started is not None:
                on_started(base_url(sock))
            await stopped.wait()
        finally:
            server.should_exit = True


def open_socket(host: str, port: int, access: HttpAccess) -> socket.socket:
    """Bind ``host:port`` after the exposure check (a non-loopback host needs a token or insecure)."""
    warning = check_exposure(host, access)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    return bind(host, port)
