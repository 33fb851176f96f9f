"""Request bodies and answers of the provider APIs as JSON text, around the SDKs' own transport.

Both providers send an encoded body through their SDK's ``post`` (auth, headers, errors, timeouts
and connection pools stay the SDK's) and read the answer as plain JSON. The SDKs' own paths walk and
copy every tool schema of every request and build typed objects of every answer: at a concurrency of
hundreds, that CPU, not the model, bounded a run's throughput.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcp_resili.agents.model import InfrastructureError, ModelResponse, ToolDefinition
from mcp_resili.client.providers.names import ToolNameMap
from mcp_resili.client.providers.retry import ProviderFailure


def dumps(value: Any) -> str:
    """JSON as the SDKs encode bodies (and httpx): compact, UTF-8 kept, no NaN."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_body(fields: dict[str, Any], tools_json: str | None = None) -> bytes:
    """The request body as the SDK would encode ``fields``, plus ``"tools"`` given as JSON text."""
    body = dumps(fields)
    if tools_json is None:
        return body.encode()
    return f'{body[:-1]}{"," if fields else ""}"tools":{tools_json}}}'.encode()


def read_json_object(raw: bytes) -> dict[str, Any]:
    """An answer's JSON object; anything else is a provider failure (never the agent's doing)."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ProviderFailure("fatal", f"the answer is not a JSON object: {raw[:200]!r}")
    return data


def parse_answer(
    parse: Callable[[dict[str, Any], ToolNameMap], ModelResponse],
    reply: dict[str, Any],
    names: ToolNameMap,
    *,
    model: str,
    what: str,
) -> ModelResponse:
    """``parse(reply, names)``; an answer of another shape (not ``what``) is an infrastructure error."""
    try:
        return parse(reply, names)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise InfrastructureError(
            f"{model}: the answer is not {what} ({type(exc).__name__}: {exc})"
        ) from None


class ToolsJSON:
    """A provider's ``tools`` as JSON text, encoded once per tool set.

    Every turn of every episode of a run sends the same tool list (`tool_definitions` keeps one tuple
    per listing), so the last set seen is kept by identity.
    """

    def __init__(self, render: Callable[[ToolDefinition, ToolNameMap], dict[str, Any]]) -> None:
        self._render = render
        self._last: tuple[tuple[ToolDefinition, ...], str] | None = None

    def __call__(self, tools: tuple[ToolDefinition, ...], names: ToolNameMap) -> str:
        """The JSON list of ``tools`` as the provider declares them."""
        if self._last is None or self._last[0] is not tools:
            self._last = (tools, dumps([self._render(t, names) for t in tools]))
        return self._last[1]
