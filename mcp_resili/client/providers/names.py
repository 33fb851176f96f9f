"""Reversible mapping between MCP tool names and provider function names.

MCP allows ``[A-Za-z0-9._-]{1,128}``; OpenAI (and Anthropic) function names allow no dots and at most
64 characters. Names that already fit pass through unchanged, so prompts and traces stay readable;
the others are sanitised, cut, and given a short hash of the original so distinct MCP names never
collide. The mapping is a pure function of the set of names, hence the same in every episode.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

MAX_FUNCTION_NAME = 64
_VALID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_INVALID_CHAR = re.compile(r"[^A-Za-z0-9_-]")


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


def _candidate(name: str) -> str:
    """A provider-safe name for ``name`` (before collision handling)."""
    if _VALID.match(name):
        return name
    cleaned = _INVALID_CHAR.sub("_", name) or "tool"
    suffix = "_" + _digest(name)
    return cleaned[: MAX_FUNCTION_NAME - len(suffix)] + suffix


@dataclass(frozen=True)
class ToolNameMap:
    """Both directions of the mapping for one tool set."""

    to_provider: dict[str, str] = field(default_factory=dict)
    to_mcp: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, names: Iterable[str]) -> ToolNameMap:
        """Map every MCP name; a name that would collide with another gets its hash suffix."""
        unique = sorted(set(names))
        to_provider: dict[str, str] = {}
        taken: set[str] = set()
        # Names valid as-is claim themselves first, so a sanitised name never steals a real one.
        for name in unique:
            if _VALID.match(name):
                to_provider[name] = name
                taken.add(name)
        for name in unique:
            if name in to_provider:
                continue
            candidate = _candidate(name)
            salt = 0
            while candidate in taken:
                salt += 1
                suffix = f"_{_digest(f'{name}#{salt}')}"
                candidate = _INVALID_CHAR.sub("_", name)[: MAX_FUNCTION_NAME - len(suffix)] + suffix
            to_provider[name] = candidate
            taken.add(candidate)
        return cls(to_provider, {v: k for k, v in to_provider.items()})

    def provider_name(self, mcp_name: str) -> str:
        """The function name the provider sees for ``mcp_name`` (unknown names are sanitised too)."""
        return self.to_provider.get(mcp_name) or _candidate(mcp_name)

    def mcp_name(self, provider_name: str) -> str:
        """The MCP tool a function name stands for; a name the model invented is passed through.

        Passing an invented name through lets the MCP server answer ``UNKNOWN_TOOL``, which is the
        agent's mistake to see and recover from.
        """
        return self.to_mcp.get(provider_name, provider_name)
