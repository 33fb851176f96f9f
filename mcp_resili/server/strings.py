"""Strings JSON can carry but UTF-8 cannot: lone surrogates, found in arguments and refused."""

from __future__ import annotations

import json
import re
from typing import Any

import pydantic_core

#: A UTF-16 surrogate code point: in a Python string only from a JSON ``\ud800`` escape left unpaired.
_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(value: Any) -> str | None:
    r"""The path of the first string (a value or a key) in ``value`` holding a lone surrogate, or None.

    JSON parsers take ``"\ud800"`` (valid JSON), but no UTF-8 text, trace or reply can carry it:
    a tool's arguments that hold one are refused before any tool runs, like on stdio.
    """
    # A look at C speed first: encoding to UTF-8 JSON fails on any lone surrogate (in a key too), so
    # arguments that encode hold none; the path-building walk runs only when encoding fails.
    try:
        pydantic_core.to_json(value)
    except (pydantic_core.PydanticSerializationError, ValueError, RecursionError):
        return _first(value, "")
    return None


def lone_surrogate_problem(tool: str, path: str) -> str:
    """The INVALID_INPUT message of a call of ``tool`` whose arguments hold a lone surrogate at ``path``."""
    return (
        f"invalid arguments for {tool}: {path}: a string holds a lone surrogate (an unpaired "
        "\\ud800-\\udfff escape), which UTF-8 text cannot carry"
    )


def _first(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return None if value.isascii() or _SURROGATE.search(value) is None else path or "(value)"
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}/{key}" if path else str(key)
            if isinstance(key, str) and not key.isascii() and _SURROGATE.search(key) is not None:
                return (f"{path}/" if path else "") + _printable(key) + " (a key)"
            found = _first(item, where)
            if found is not None:
                return _printable(found)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _first(item, f"{path}/{index}" if path else str(index))
            if found is not None:
                return found
    return None


def _printable(path: str) -> str:
    """``path`` with each surrogate written as its escape (a key on the path may hold one)."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", path)


#: A ``\uD800``-``\uDFFF`` escape in JSON text: only a body holding one is looked at twice.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abAB]|\\u[dD][c-fC-F]")
#: Where `LoneSurrogateGuard` leaves, in the ASGI scope, the path of the lone surrogate it replaced.
SCOPE_KEY = "mcp-resili.lone-surrogate"


def scrubbed(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings and keys replaced by U+FFFD."""
    if isinstance(value, str):
        return value if value.isascii() else _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {scrubbed(key): scrubbed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [scrubbed(item) for item in value]
    return value


def refused_call(body: bytes) -> tuple[bytes, str] | None:
    """A ``tools/call`` body whose arguments hold a lone surrogate: (the body scrubbed, its path).

    The MCP SDK's JSON parser refuses such a body outright (a JSON-RPC parse error under id null, the
    call never reaches the tool or the trace); a tool's bad input is a tool result instead. None for
    any other body (passed on unchanged).
    """
    if _SURROGATE_ESCAPE.search(body) is None:
        return None
    try:
        pydantic_core.from_json(body)
        return None  # surrogate pairs, or an escaped backslash: nothing lone
    except ValueError:
        pass
    try:
        message = json.loads(body)  # Python's parser keeps lone surrogates
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    params = message.get("params")
    if not isinstance(params, dict):
        return None
    path = lone_surrogate(params.get("arguments"))
    if path is None:
        return None
    return json.dumps(scrubbed(message)).encode(), path


class LoneSurrogateGuard:
    """ASGI middleware that turns a lone surrogate in a call's arguments into a tool's bad input.

    Such a ``tools/call`` reaches the server scrubbed (`scrubbed`), the path left in the scope
    (`SCOPE_KEY`): the server records the call and refuses it as INVALID_INPUT.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Read a POST's body, pass it on (scrubbed when `refused_call` says so)."""
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: let the app see it
                await self.app(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        refused = refused_call(body)
        if refused is not None:
            body, path = refused
            scope = {**scope, SCOPE_KEY: path}
        await self.app(scope, _replay([{"type": "http.request", "body": body}], receive), send)


def _replay(messages: list[dict[str, Any]], receive: Any) -> Any:
    """A ``receive`` that gives ``messages`` first, then whatever ``receive`` gives."""
    pending = list(messages)

    async def replaying() -> Any:
        return pending.pop(0) if pending else await receive()

    return replaying
