"""Run an MCP server of ours (a suite server or the proxy) over stdio or Streamable HTTP."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
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
    on_started: Callable[[str], None] | None = None,
) -> None:
    """Serve Streamable HTTP at ``http://HOST:PORT/mcp`` until cancelled.

    The socket is bound here (or passed in), so a busy port raises `OSError` before anything starts,
    and ``on_started`` gets the real URL (port 0 binds a free port).
    """
    if sock is None:
        sock = socket.create_server((host, port))
    bound_port = sock.getsockname()[1]
    app = server.mcp.streamable_http_app(streamable_http_path="/mcp", host=host)
    config = uvicorn.Config(app, host=host, port=bound_port, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(http.serve, [sock])
        while not http.started:  # uvicorn offers no event to await
            await anyio.sleep(0.01)
            if http.should_exit:
                raise OSError(f"the HTTP server on {host}:{bound_port} did not start")
        url = f"http://{host}:{bound_port}/mcp"
        logger.info("serving MCP at %s", url)
        if on_started is not None:
            on_started(url)
