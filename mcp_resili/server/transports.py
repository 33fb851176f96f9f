"""Run an MCP server of ours (a suite server or the proxy) over stdio or Streamable HTTP."""

from __future__ import annotations

import logging
import socket
from typing import Any, Protocol

import anyio
import uvicorn
from mcp.server import Server
from mcp.server.stdio import stdio_server

logger = logging.getLogger(__name__)


class Serves(Protocol):
    """Anything that holds a lowlevel MCP server (our suite server, the proxy)."""

    @property
    def mcp(self) -> Server[Any]:
        """The MCP server to expose."""
        ...


async def serve_stdio(server: Serves) -> None:
    """Serve one client over stdin/stdout until it disconnects. Never writes anything else to stdout."""
    async with stdio_server() as (read, write):
        await server.mcp.run(read, write, server.mcp.create_initialization_options())


async def serve_http(
    server: Serves,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    sock: socket.socket | None = None,
    started: anyio.Event | None = None,
) -> None:
    """Serve Streamable HTTP at ``http://HOST:PORT/mcp`` until cancelled.

    Pass an already bound ``sock`` (e.g. port 0 in tests) to learn the port before serving;
    ``started`` is set once the server accepts connections.
    """
    app = server.mcp.streamable_http_app(streamable_http_path="/mcp", host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(http.serve, [sock] if sock is not None else None)
        while not http.started:
            await anyio.sleep(0.01)
            if http.should_exit:
                raise OSError(f"could not start the HTTP server on {host}:{port}")
        logger.info("serving MCP at http://%s:%d/mcp", host, port if sock is None else sock.getsockname()[1])
        if started is not None:
            started.set()
