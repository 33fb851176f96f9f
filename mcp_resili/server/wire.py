"""Results in their wire form: what the SDK's handler path would send, built directly.

A middleware that answers a request itself owns its whole response envelope (the SDK does not shape it
afterwards), so these helpers give such answers what the handler path gives every 2026-era result: a
``resultType`` and the ``serverInfo`` stamp in ``_meta`` (spec #3002).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from mcp_types import SERVER_INFO_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

#: ``json.dumps(value, sort_keys=True)``, without building an encoder on every call.
# No circular-reference bookkeeping (a third of the encoding): a result that contains itself fails as
# RecursionError instead of ValueError, and either way the call is a tool crash (`SimulatedBackend`).
_SORTED_JSON = json.JSONEncoder(sort_keys=True, check_circular=False)


def result_json_text(value: Any) -> str:
    """The text block of a result: its JSON with sorted keys (NaN and infinities as bare words)."""
    return _SORTED_JSON.encode(value)


def tool_result(
    text: str, is_error: bool, structured: Any = None, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``CallToolResult`` with one text block, as its JSON dump (before any version's shaping)."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": is_error}
    if structured is not None:
        result["structuredContent"] = structured
    if meta is not None:
        result["_meta"] = meta
    return result


def modern_tool_result(result: dict[str, Any], server_info: dict[str, Any]) -> dict[str, Any]:
    """`tool_result`'s output exactly as the SDK sends it on a 2026-era connection.

    Same keys in the same order (the surface model's fields; a ``_meta`` the result lacked comes last,
    where the stamp adds it) and a fresh copy of the stamp, as `tests/test_wire_form.py` checks against
    the SDK itself.
    """
    wire: dict[str, Any] = {}
    meta = result.get("_meta")
    if meta is not None:
        wire["_meta"] = {**meta, SERVER_INFO_META_KEY: _fresh(server_info)}
    wire["content"] = [{"text": block["text"], "type": block["type"]} for block in result["content"]]
    wire["isError"] = result["isError"]
    wire["resultType"] = "complete"
    if "structuredContent" in result:
        wire["structuredContent"] = result["structuredContent"]
    if meta is None:
        wire["_meta"] = {SERVER_INFO_META_KEY: _fresh(server_info)}
    return wire


def shaped(protocol_version: str, result: dict[str, Any], server_info: dict[str, Any]) -> dict[str, Any]:
    """A result a middleware answers with, as ``protocol_version`` needs it.

    2026-era results get a ``resultType`` (``complete`` unless set) and the ``serverInfo`` stamp; older
    ones are unchanged.
    """
    if protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return result
    result.setdefault("resultType", "complete")
    meta = result.get("_meta")
    if meta is None:
        result["_meta"] = {SERVER_INFO_META_KEY: _fresh(server_info)}
    elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
        result["_meta"] = {**meta, SERVER_INFO_META_KEY: _fresh(server_info)}
    return result


def _fresh(server_info: dict[str, Any]) -> dict[str, Any]:
    """A copy of the stamp no answer shares with another (flat, as servers' usually are: cheap)."""
    if all(isinstance(value, str) for value in server_info.values()):
        return dict(server_info)
    return copy.deepcopy(server_info)
