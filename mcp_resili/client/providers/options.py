"""Options shared by the hosted providers, and the one place API keys are read (the environment)."""

from __future__ import annotations

import functools
import itertools
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from mcp_resili.client.model import ToolDefinition
from mcp_resili.client.providers.keys import API_KEY_ENV
from mcp_resili.client.providers.names import ToolNameMap
from mcp_resili.client.providers.retry import RetryPolicy, Sleeper
from mcp_resili.errors import UserError

#: Sent to local OpenAI-compatible servers that want no key (the SDK refuses an empty one).
PLACEHOLDER_KEY = "not-needed"


class MissingAPIKeyError(UserError):
    """A hosted provider was asked for without its key in the environment."""


@dataclass(frozen=True)
class ProviderOptions:
    """How hosted models are reached: endpoint, timeouts, output budget, retries."""

    base_url: str | None = None
    timeout: float = 120.0
    max_output_tokens: int = 4096
    temperature: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleeper: Sleeper = anyio.sleep
    #: An ``httpx2.AsyncClient`` to use instead of the SDK's own (tests, proxies).
    http_client: Any = None
    #: SDK clients (each with its own connection pool) used in turn; the runner sets one per 64
    #: episodes in flight.
    connection_pools: int = 1

    def __post_init__(self) -> None:
        if self.connection_pools < 1:
            raise ValueError(f"connection_pools must be at least 1, got {self.connection_pools}")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive, got {self.timeout}")


def api_key(provider: str, base_url: str | None) -> str:
    """The provider's key from the environment; a placeholder for a custom endpoint without one."""
    variable = API_KEY_ENV[provider]
    key = os.environ.get(variable, "")
    if key:
        return key
    if base_url is not None:
        return PLACEHOLDER_KEY
    raise MissingAPIKeyError(
        f"{provider} models need {variable} in the environment (or --base-url for a local server)"
    )


@functools.lru_cache(maxsize=64)
def _name_map(names: tuple[str, ...]) -> ToolNameMap:
    return ToolNameMap.build(names)


def name_map(tools: tuple[ToolDefinition, ...]) -> ToolNameMap:
    """The (cached) name mapping for a tool set."""
    return _name_map(tuple(t.name for t in tools))


#: Connections per SDK client: enough that high concurrency never queues on the pool.
MAX_CONNECTIONS = 1024
#: Episodes in flight per connection pool (see `ProviderOptions.connection_pools`).
EPISODES_PER_POOL = 16


@functools.cache
def _ssl_context() -> Any:
    """One TLS context for every pool: building one loads the CA bundle (~0.4 s)."""
    import httpx2

    return httpx2.create_ssl_context()


def tuned_http_client(factory: Callable[..., Any]) -> Any:
    """An SDK's default HTTP client with a pool sized for high concurrency, and ``TCP_NODELAY``.

    The SDKs keep at most 100 idle connections, so at a concurrency of 512 most requests would open
    a new connection. ``TCP_NODELAY`` stops a request written in two pieces from waiting for the
    peer's delayed ACK (40 ms on Linux).
    """
    import httpx2

    transport = httpx2.AsyncHTTPTransport(
        verify=_ssl_context(),
        limits=httpx2.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS),
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
    )
    return factory(transport=transport)


class SDKClientPool:
    """A few SDK clients used in turn, each built by ``make(http_client)`` with SDK retries off.

    One client's connection pool scans all its connections on every request, so one pool of 512
    connections costs more CPU than the model wait it serves; a shared test ``http_client`` gets one.
    """

    def __init__(self, make: Callable[[Any], Any], options: ProviderOptions, sdk_http_client: Any) -> None:
        shared = options.http_client
        count = 1 if shared is not None else options.connection_pools
        self._clients = [make(shared or tuned_http_client(sdk_http_client)) for _ in range(count)]
        self._turn = itertools.count()

    def next(self) -> Any:
        """The client for the next request."""
        return self._clients[next(self._turn) % len(self._clients)]

    async def aclose(self) -> None:
        """Close every client."""
        for client in self._clients:
            await client.close()
