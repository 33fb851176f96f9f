"""Options shared by the hosted providers, and the one place API keys are read (the environment)."""

from __future__ import annotations

import contextvars
import functools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from mcp_resili.agents.model import ToolDefinition
from mcp_resili.client.providers.keys import API_KEY_ENV
from mcp_resili.client.providers.names import ToolNameMap
from mcp_resili.client.providers.retry import (
    FailureKind,
    ProviderFailure,
    RetryPolicy,
    Sleeper,
    classify_status,
    parse_retry_after,
)
from mcp_resili.client.providers.wire import read_json_object
from mcp_resili.errors import UserError

#: Sent to local OpenAI-compatible servers that want no key (the SDK refuses an empty one).
PLACEHOLDER_KEY = "not-needed"
#: Extra headers every model request of the current episode carries (None: none). A runner that puts
#: a fault gateway before the models names each call's episode this way (``run --llm-faults``).
REQUEST_HEADERS: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "mcp_resili_request_headers", default=None
)


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
    #: An ``httpx2.AsyncClient`` to use instead of the SDK's aiohttp one (tests, proxies).
    http_client: Any = None

    def __post_init__(self) -> None:
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


#: The request URL aiohttp appends to an error message (``…, url='http://host/v1?key=…'``).
_URL_IN_ERROR = re.compile(r",? url='[^']*'")
#: Connections per SDK client: enough that high concurrency never queues on the pool.
MAX_CONNECTIONS = 1024


@functools.cache
def _ssl_context() -> Any:
    """One TLS context for every client: building one loads the CA bundle (~0.4 s)."""
    import httpx2

    return httpx2.create_ssl_context()


def aiohttp_client(sdk_aiohttp_client: Callable[..., Any]) -> Any:
    """The SDK's aiohttp-backed HTTP client, its pool sized for high concurrency.

    The SDKs' default transport (httpx2) spent ~1.4 ms of CPU per request against a local server,
    and its pool scans every connection on each request (we split it into one pool per 16 episodes);
    the SDKs' own aiohttp transport spends ~0.8 ms in one pool, even at a concurrency of 512: the
    runner's CPU per episode with a hosted model fell to 0.76× (`bench/hosted_cpu.py`). aiohttp sets
    ``TCP_NODELAY`` itself.
    """
    import httpx2

    limits = httpx2.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS)
    return sdk_aiohttp_client(verify=_ssl_context(), limits=limits)


def connection_failure(exc: BaseException, *, timed_out: bool) -> ProviderFailure:
    """A failed connection as a retryable provider failure, named after its transport-level cause.

    The SDKs say only "Connection error." or "Request timed out." (the aiohttp transport even maps a
    dropped connection to a connect timeout); the cause says what happened, e.g.
    ``ServerDisconnectedError: Server disconnected``: the first aiohttp error in the chain, else the
    innermost exception.
    """
    import aiohttp

    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    cause: BaseException | None = next((e for e in chain if isinstance(e, aiohttp.ClientError)), None)
    if cause is not None:
        timed_out = isinstance(cause, aiohttp.ServerTimeoutError)
    elif len(chain) > 1:
        cause = chain[-1]
    else:
        return ProviderFailure("timeout" if timed_out else "connection", str(exc))
    kind: FailureKind = "timeout" if timed_out else "connection"
    # aiohttp's parser errors span several lines (a failure's detail is one) and end with the request
    # URL, whose query may carry a token: neither goes into traces.
    detail = _URL_IN_ERROR.sub("", " ".join(f"{type(cause).__name__}: {cause}".split()))
    return ProviderFailure(kind, detail)


class SDKEndpoint:
    """A provider SDK's client that posts encoded bodies and reads plain JSON (`providers/wire.py`).

    Auth, headers, timeouts and error answers stay the SDK's; every failure comes out classified as a
    `ProviderFailure`. SDK retries are off: ours classify failures and keep provider trouble out of
    agent scores.
    """

    def __init__(self, sdk: Any, client_class: Any, provider: str, options: ProviderOptions) -> None:
        self._sdk = sdk
        self._client = client_class(
            api_key=api_key(provider, options.base_url),
            base_url=options.base_url,
            timeout=options.timeout,
            max_retries=0,
            http_client=options.http_client or aiohttp_client(sdk.DefaultAioHttpClient),
        )
        import aiohttp

        # What the SDKs let through unwrapped from their aiohttp transport (an answer that is not
        # HTTP reaches the openai SDK's caller as ``aiohttp.ClientResponseError``).
        self._transport_errors = (aiohttp.ClientError,)

    async def post(self, path: str, body: bytes) -> dict[str, Any]:
        """One attempt: ``body`` posted to ``path``, the answer's JSON object, or `ProviderFailure`."""
        sdk = self._sdk
        headers = REQUEST_HEADERS.get()
        try:
            if headers is None:
                raw = await self._client.post(path, content=body, cast_to=bytes)
            else:
                raw = await self._client.post(
                    path, content=body, cast_to=bytes, options={"headers": dict(headers)}
                )
        except sdk.APIStatusError as exc:
            message = f"{exc.message} {getattr(exc, 'code', None) or ''}".strip()
            raise ProviderFailure(
                classify_status(exc.status_code, message),
                message,
                status=exc.status_code,
                retry_after=parse_retry_after(exc.response.headers),
            ) from None
        except sdk.APIConnectionError as exc:  # timeouts are connection errors too
            raise connection_failure(exc, timed_out=isinstance(exc, sdk.APITimeoutError)) from None
        except self._transport_errors as exc:
            raise connection_failure(exc, timed_out=False) from None
        return read_json_object(raw)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.close()
