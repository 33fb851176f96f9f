"""Serving a model-API app on a socket, with the connection-level acts faults need.

A plain ASGI app cannot reset its connection: an exception before the headers makes the server answer
500, and one after them closes the connection with an error in the log. The model API's faults need
both a real reset (a TCP RST before any byte) and a clean cut mid-answer, so the app is served by
uvicorn with `ConnectionAwareH11`, the stock HTTP/1.1 protocol that also hands each request its
connection (`reset_connection`, `close_connection`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import anyio
import uvicorn
from starlette.types import ASGIApp, Receive
from uvicorn.protocols.http.h11_impl import H11Protocol

from mcp_resili.server.transports import HttpAccess, check_exposure

#: The connection the current request came in on (set per connection by `ConnectionAwareH11`).
_CONNECTION: ContextVar[asyncio.Transport | None] = ContextVar(
    "mcp_resili_model_api_connection", default=None
)
#: How long a closed connection may take to be reported gone (it is at once on a live event loop).
_GONE_SECONDS = 5.0


class ConnectionAwareH11(H11Protocol):
    """uvicorn's h11 protocol; requests read their connection from a context variable.

    uvicorn starts each request's task from the connection's data callback, so the task's context
    is a copy of the connection's: the variable set here is the request's own connection.
    """

    def data_received(self, data: bytes) -> None:
        """Note the connection, then parse as usual."""
        _CONNECTION.set(self.transport)
        super().data_received(data)


class ConnectionUnavailableError(RuntimeError):
    """The app is not served by `ConnectionAwareH11` (e.g. an in-memory test transport)."""


def _connection() -> asyncio.Transport:
    transport = _CONNECTION.get()
    if transport is None:
        raise ConnectionUnavailableError(
            "the model-API app must be served by modelapi.hosting to cut connections"
        )
    return transport


async def _gone(receive: Receive) -> None:
    """Wait until the server has seen the connection close (so it logs no unfinished answer)."""
    with anyio.move_on_after(_GONE_SECONDS):
        while (await receive())["type"] != "http.disconnect":
            pass


async def reset_connection(receive: Receive) -> None:
    """Reset the request's connection (TCP RST: the client reads "connection reset by peer")."""
    transport = _connection()
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            # Linger on, for zero seconds: closing sends RST instead of FIN.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
    await _gone(receive)


async def close_connection(receive: Receive) -> None:
    """Close the request's connection after what was sent so far (an answer cut mid-way)."""
    _connection().close()
    await _gone(receive)


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
        http=ConnectionAwareH11,
        lifespan="on",
        log_level="warning",
        access_log=False,
        # A gateway passes its upstream's own headers on; the model server needs none of uvicorn's.
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=2,
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
