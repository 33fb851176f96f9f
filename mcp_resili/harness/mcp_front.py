"""Per-episode MCP URLs in front of one in-process server: ``/episodes/TOKEN/mcp``.

An agent program knows nothing of episodes: it is given a URL and connects. The front serves the
runner's own `ResiliServer` over Streamable HTTP (`mcp_resili.server.transports.http_app`: host checks,
protocol faults over HTTP) under one path per live episode, a random token, and hands each request on
with the episode named in the ``x-mcp-resili-episode`` header (one the client sent is replaced), so
every request through that URL, in any session and either protocol era, is that episode's. A path
that names no live episode gets 404. When the episode ends, the runner unbinds its token: the front
waits for the requests still under way, ends the HTTP sessions opened through it (DELETE), and later
requests get 404.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.types import Message, Receive, Scope, Send

from mcp_resili.constants import EPISODE_HEADER
from mcp_resili.server.episodes import SCOPE_CLIENT
from mcp_resili.server.transports import HttpAccess, Serves, http_app

#: The path prefix of every episode's URL.
PREFIX = "/episodes/"
_HEADER = EPISODE_HEADER.encode()
#: Seconds an unbinding waits for the episode's requests still under way.
QUIET_SECONDS = 10.0


@dataclass
class _Binding:
    header: bytes
    in_flight: int = 0
    quiet: anyio.Event = field(default_factory=anyio.Event)
    sessions: set[bytes] = field(default_factory=set)


def new_token() -> str:
    """An unguessable path segment (the URL is the capability to play the episode)."""
    return secrets.token_urlsafe(18)


def episode_header(named: Mapping[str, Any]) -> str:
    """The episode header's JSON form: ``{"id", "task", "trial", "seed", "fault_key"}``."""
    return json.dumps(dict(named), separators=(",", ":"))


class McpFront:
    """The ASGI app of one server's per-episode URLs (see the module docstring)."""

    def __init__(self, server: Serves, host: str = "127.0.0.1") -> None:
        self._inner = http_app(server, host, HttpAccess())
        self._host = host
        self._bindings: dict[str, _Binding] = {}

    def bind(self, token: str, named: Mapping[str, Any]) -> None:
        """Serve episode ``named`` (its id, task, trial, seed, fault key) at ``/episodes/TOKEN/mcp``."""
        binding = _Binding(episode_header(named).encode())
        binding.quiet.set()
        self._bindings[token] = binding

    async def unbind(self, token: str, authority: str) -> None:
        """Stop serving ``token``: end its HTTP sessions, then wait for its requests under way (bounded).

        ``authority``: ``HOST:PORT`` the front listens on (the inner app checks the ``Host`` header).
        Ending a session ends its streams, which a client that died may have left open.
        """
        binding = self._bindings.pop(token, None)
        if binding is None:
            return
        for session in binding.sessions:
            await self._delete_session(session, binding.header, authority)
        with anyio.move_on_after(QUIET_SECONDS):
            await binding.quiet.wait()

    async def _delete_session(self, session: bytes, header: bytes, authority: str) -> None:
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "DELETE",
            "scheme": "http",
            "path": "/mcp",
            "raw_path": b"/mcp",
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", authority.encode()),
                (b"mcp-session-id", session),
                (_HEADER, header),
            ],
            "client": ("127.0.0.1", 0),
            "server": (self._host, 0),
        }
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if sent:
                await anyio.sleep_forever()
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            return None

        with anyio.move_on_after(QUIET_SECONDS):
            await self._inner(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Route a request to its episode; lifespan events go to the inner app."""
        if scope["type"] != "http":
            await self._inner(scope, receive, send)
            return
        path: str = scope["path"]
        token, _, rest = path.removeprefix(PREFIX).partition("/")
        binding = self._bindings.get(token) if path.startswith(PREFIX) else None
        if binding is None or rest.rstrip("/") != "mcp":
            await _not_found(send)
            return
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != _HEADER]
        inner_scope = {
            **scope,
            "path": "/mcp",
            "raw_path": b"/mcp",
            "headers": [*headers, (_HEADER, binding.header)],
            # Whoever holds the URL is the episode's one client, in any session, cookie or era.
            SCOPE_CLIENT: f"episode-url:{token}",
        }

        async def noting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                for key, value in message.get("headers", []):
                    if key.lower() == b"mcp-session-id":
                        binding.sessions.add(value)
            await send(message)

        binding.in_flight += 1
        if binding.in_flight == 1:
            binding.quiet = anyio.Event()
        try:
            await self._inner(inner_scope, receive, noting_send)
        finally:
            binding.in_flight -= 1
            if binding.in_flight == 0:
                binding.quiet.set()


async def _not_found(send: Send) -> None:
    body = json.dumps(
        {"error": "no such episode: it ended, or this URL was never one of the runner's"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 404,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
