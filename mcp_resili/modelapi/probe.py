"""The gateway's startup check of its upstream: reachable, a model API, and accepting the key.

``GET /v1/models`` is served by OpenAI, Anthropic, the OpenAI-compatible servers (vLLM, Ollama,
llama.cpp, LM Studio) and our model server; it costs nothing and proves the three things a run
needs. The key sent is the caller's own from the environment (`probe_key`): never printed, logged
or stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx2

from mcp_resili.errors import UserError
from mcp_resili.modelapi.gateway import upstream_url

#: Seconds the check waits for the upstream.
PROBE_SECONDS = 15.0
#: ``anthropic-version`` sent to an Anthropic upstream (the API refuses a request without one).
ANTHROPIC_VERSION = "2023-06-01"


class UpstreamError(UserError):
    """An upstream a gateway cannot work with (unreachable, not a model API, refusing the key)."""


def check_upstream_url(url: str) -> str:
    """``url`` if it is an http(s) URL with a host (`UpstreamError` otherwise)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UpstreamError(f"--upstream must be an http(s):// URL of a model API, got {url!r}")
    return url


def probe_key(
    url: str, env: Mapping[str, str], variable: str | None = None
) -> tuple[str | None, dict[str, str]]:
    """The environment variable whose key the check sends, and the headers carrying it.

    ``variable`` when given; else ``ANTHROPIC_API_KEY`` for an anthropic.com upstream, else
    ``OPENAI_API_KEY`` when set, else ``ANTHROPIC_API_KEY`` when set (a compatible gateway), else none.
    """
    host = urlsplit(url).hostname or ""
    if variable is None:
        if host == "anthropic.com" or host.endswith(".anthropic.com"):
            variable = "ANTHROPIC_API_KEY"
        elif env.get("OPENAI_API_KEY"):
            variable = "OPENAI_API_KEY"
        elif env.get("ANTHROPIC_API_KEY"):
            variable = "ANTHROPIC_API_KEY"
    key = env.get(variable, "") if variable else ""
    if not key:
        return variable, {}
    if variable == "ANTHROPIC_API_KEY":
        return variable, {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
    return variable, {"authorization": f"Bearer {key}"}


async def probe_upstream(url: str, env: Mapping[str, str], variable: str | None = None) -> None:
    """Check the upstream; `UpstreamError` in one line saying what is wrong."""
    check_upstream_url(url)
    used, headers = probe_key(url, env, variable)
    target = upstream_url(url, "/v1/models", "")
    try:
        async with httpx2.AsyncClient(timeout=PROBE_SECONDS, trust_env=False) as client:
            response = await client.get(target, headers=headers)
    except httpx2.TimeoutException:
        raise UpstreamError(f"upstream {url} did not answer within {PROBE_SECONDS:g}s") from None
    except httpx2.HTTPError as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise UpstreamError(f"upstream {url} is unreachable ({reason})") from None
    status = response.status_code
    if status in (401, 403):
        where = f"the key in {used}" if headers else "no key"
        hint = f"set {used or 'OPENAI_API_KEY or ANTHROPIC_API_KEY'} to a valid key, or pass --no-probe"
        raise UpstreamError(f"upstream {url} refused {where} (HTTP {status}): {hint}")
    if status != 200 or not _model_list(response):
        what = f"HTTP {status}" if status != 200 else "something that is not a model list"
        raise UpstreamError(
            f"upstream {url} does not look like an OpenAI- or Anthropic-compatible API: GET /v1/models "
            f"answered {what} (--no-probe skips this check)"
        )


def _model_list(response: httpx2.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("data"), list)
