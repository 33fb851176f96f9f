"""Fair shares of one HTTP server: no client, however careless or hostile, slows the others down much.

`FairShare` is ASGI middleware in front of the MCP app. Before a request's body is even read:

- **per client** at most `FairLimits.per_client` requests are served at once; more wait their turn
  (their bodies unread, in the socket) and past `FairLimits.queue` waiting the client is told to slow
  down (HTTP 429 with ``Retry-After``). A client is its Streamable HTTP session, else the episode it
  names in the ``x-mcp-resili-episode`` header, else its bearer token, else its TCP connection.
- **heavy work** yields to light work: a request whose body is larger than `FairLimits.heavy_bytes`,
  or any request of a client whose previous answer was, is heavy. Heavy requests are served one at a
  time, clients taking turns (the longest waiting first), and only once no light request has been
  served for `FairLimits.quiet_seconds`, or once the heavy lane has waited `FairLimits.starve_seconds`
  (so heavy clients are slowed, never starved). After each heavy request the lane rests for as long
  as it ran (`FairLimits.duty`). A light request is served at once, whatever the number of heavy
  clients.

Parsing a body and answering it run on the event loop (the MCP SDK's transport); the call pipeline
checks large arguments in a worker thread (`mcp_resili.server.pipeline.OFF_LOOP_BYTES`). What still
blocks the loop for a heavy request is its parsing and the encoding of its answer, one heavy request
at a time.
"""

from __future__ import annotations

import collections
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

#: Default limits (see the module docstring).
PER_CLIENT = 4
QUEUE = 64
HEAVY_BYTES = 256 * 1024
QUIET_SECONDS = 0.05
STARVE_SECONDS = 10.0
DUTY = 0.5


@dataclass(frozen=True)
class FairLimits:
    """How much of the server one client may take at once (see the module docstring)."""

    per_client: int = PER_CLIENT
    queue: int = QUEUE
    heavy_bytes: int = HEAVY_BYTES
    #: A heavy request waits until no light request was served for this long (an agent's next call
    #: follows its last answer within milliseconds)...
    quiet_seconds: float = QUIET_SECONDS
    #: ... or until it has waited this long.
    starve_seconds: float = STARVE_SECONDS
    #: Share of the time heavy requests may have: after one that took t seconds, the lane rests
    #: ``t * (1 - duty) / duty``.
    duty: float = DUTY

    def __post_init__(self) -> None:
        if (
            self.per_client < 1
            or self.queue < 0
            or self.heavy_bytes < 0
            or self.starve_seconds < 0
            or self.quiet_seconds < 0
            or not 0 < self.duty <= 1
        ):
            raise ValueError(f"invalid fairness limits: {self}")


class _Client:
    """One client's share: how many of its requests run, how many wait, whether it is heavy."""

    __slots__ = ("heavy", "running", "waiting")

    def __init__(self) -> None:
        self.running = 0
        self.waiting: collections.deque[anyio.Event] = collections.deque()
        self.heavy = False


def client_key(scope: dict[str, Any]) -> str:
    """Who sent the request (see the module docstring)."""
    headers: dict[bytes, bytes] = dict(scope.get("headers") or ())
    session = headers.get(b"mcp-session-id")
    if session:
        return "s:" + session.decode("latin-1")
    named = headers.get(b"x-mcp-resili-episode")
    if named:
        return "e:" + hashlib.sha256(named).hexdigest()[:32]
    token = headers.get(b"authorization")
    if token:
        return "t:" + hashlib.sha256(token).hexdigest()[:32]
    peer = scope.get("client") or ("?", 0)
    return f"c:{peer[0]}:{peer[1]}"  # its TCP connection


def _content_length(scope: dict[str, Any]) -> int | None:
    for key, value in scope.get("headers") or ():
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class FairShare:
    """ASGI middleware sharing the server between clients (see the module docstring)."""

    #: Clients remembered; past this the longest idle are forgotten (they start light again).
    MAX_CLIENTS = 10_000

    def __init__(
        self, app: Any, limits: FairLimits | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.app = app
        self.limits = limits or FairLimits()
        self._clock = clock
        self._clients: collections.OrderedDict[str, _Client] = collections.OrderedDict()
        self._heavy_busy = False
        self._heavy_waiting: collections.deque[anyio.Event] = collections.deque()
        self._heavy_free_at = 0.0
        #: Light requests being served now, and an event set whenever none is.
        self._light = 0
        self._no_light = anyio.Event()
        self._no_light.set()
        self._light_ended = -float("inf")
        #: Requests told to slow down (HTTP 429), for logs and benchmarks.
        self.refused = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve the request within its client's share."""
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        key = client_key(scope)
        client = self._client(key)
        if client.running >= self.limits.per_client:
            if len(client.waiting) >= self.limits.queue:
                self.refused += 1
                await _too_many(send, self.limits.per_client)
                return
            turn = anyio.Event()
            client.waiting.append(turn)
            try:
                await turn.wait()  # handed a running slot by a finishing request of the same client
            except BaseException:
                if turn.is_set():
                    self._pass_on(client)
                else:
                    client.waiting.remove(turn)
                raise
        else:
            client.running += 1
        try:
            length = _content_length(scope)
            heavy = client.heavy or length is None or length > self.limits.heavy_bytes
            if heavy:
                await self._heavy_turn()
            else:
                self._light += 1
                if self._no_light.is_set():
                    self._no_light = anyio.Event()
            answered = 0

            async def measuring_send(message: Any) -> None:
                nonlocal answered
                if message.get("type") == "http.response.body":
                    answered += len(message.get("body", b""))
                await send(message)

            started = self._clock()
            try:
                await self.app(scope, receive, measuring_send)
            finally:
                client.heavy = answered > self.limits.heavy_bytes  # its next request, that is
                if heavy:
                    self._heavy_done(self._clock() - started)
                else:
                    self._light -= 1
                    self._light_ended = self._clock()
                    if self._light == 0:
                        self._no_light.set()
        finally:
            self._pass_on(client)
            if client.running == 0 and not client.waiting and not client.heavy:
                self._clients.pop(key, None)

    def _client(self, key: str) -> _Client:
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = _Client()
            while len(self._clients) > self.MAX_CLIENTS:
                oldest_key, oldest = next(iter(self._clients.items()))
                if oldest.running or oldest.waiting:
                    self._clients.move_to_end(oldest_key)
                    break
                del self._clients[oldest_key]
        else:
            self._clients.move_to_end(key)
        return client

    @staticmethod
    def _pass_on(client: _Client) -> None:
        """A request of ``client`` ended: its slot goes to the client's next waiting request."""
        if client.waiting:
            client.waiting.popleft().set()  # the slot stays taken, by that request
        else:
            client.running -= 1

    async def _heavy_turn(self) -> None:
        """Wait for the heavy lane: no other heavy request, no light one (or waited long enough), rested."""
        if self._heavy_busy or self._heavy_waiting:
            turn = anyio.Event()
            self._heavy_waiting.append(turn)
            try:
                await turn.wait()
            except BaseException:
                if turn.is_set():
                    self._heavy_release()
                else:
                    self._heavy_waiting.remove(turn)
                raise
        else:
            self._heavy_busy = True
        try:
            rest = self._heavy_free_at - self._clock()
            if rest > 0:
                await anyio.sleep(rest)
            with anyio.move_on_after(self.limits.starve_seconds):
                while True:  # light requests go first
                    if not self._no_light.is_set():
                        await self._no_light.wait()
                        continue
                    quiet = self._light_ended + self.limits.quiet_seconds - self._clock()
                    if quiet <= 0:
                        break
                    await anyio.sleep(quiet)
        except BaseException:
            self._heavy_release()
            raise

    def _heavy_done(self, spent: float) -> None:
        duty = self.limits.duty
        self._heavy_free_at = self._clock() + spent * (1 - duty) / duty
        self._heavy_release()

    def _heavy_release(self) -> None:
        if self._heavy_waiting:
            self._heavy_waiting.popleft().set()  # the lane stays busy, now for that request
        else:
            self._heavy_busy = False


async def _too_many(send: Any, per_client: int) -> None:
    body = (
        b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": "too many requests from this '
        b"client at once (more than "
        + str(per_client).encode()
        + b' running and the queue full): slow down"}}'
    )
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", b"1"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
