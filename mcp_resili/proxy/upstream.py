"""Connecting to an upstream MCP server and running calls on it."""

from __future__ import annotations

import os
import shlex
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp import Client, StdioServerParameters

from mcp_resili.errors import UserError
from mcp_resili.faults import ToolOutcome
from mcp_resili.registry import ToolSpec, ToolState

UPSTREAM_ERROR = "UPSTREAM_ERROR"


class UpstreamError(UserError):
    """An upstream target that cannot be used (empty command, ...)."""


@asynccontextmanager
async def connect_upstream(target: str, *, read_timeout_seconds: float = 60) -> AsyncIterator[Client]:
    """A client for ``target``: an ``http(s)://`` URL, or a command line started over stdio.

    A proxied command gets the proxy's whole environment: it is the user's own server on the user's
    machine, and many servers need their own variables (we never record them).
    """
    if target.startswith(("http://", "https://")):
        async with Client(target, read_timeout_seconds=read_timeout_seconds, mode="legacy") as client:
            yield client
        return
    argv = shlex.split(target)
    if not argv:
        raise UpstreamError("the upstream command is empty")
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with Client(params, read_timeout_seconds=read_timeout_seconds, mode="legacy") as client:
        yield client


async def list_all_tools(client: Client) -> list[types.Tool]:
    """Every tool of the upstream, following pagination."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def spec_of(tool: types.Tool) -> ToolSpec:
    """A `ToolSpec` view of an upstream tool, taken as is (its schemas are the upstream's business)."""
    annotations = tool.annotations
    return ToolSpec.model_construct(
        name=tool.name,
        description=tool.description or "",
        input_schema=dict(tool.input_schema),
        output_schema=None if tool.output_schema is None else dict(tool.output_schema),
        errors=(),
        dependencies=(),
        category="upstream",
        operation="",
        access="read" if annotations is not None and annotations.read_only_hint else "write",
    )


def result_text(result: types.CallToolResult) -> str:
    """The text blocks of a result, joined."""
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


class UpstreamBackend:
    """Runs calls on the upstream server (the proxy's `ToolBackend`)."""

    def __init__(self, client: Client, tools: Sequence[types.Tool]) -> None:
        self.client = client
        self.tools = list(tools)
        self._specs = tuple(spec_of(t) for t in self.tools)

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """The upstream's tools as specs."""
        return self._specs

    async def run(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        state: ToolState,
        meta: Mapping[str, Any] | None = None,
    ) -> ToolOutcome:
        """Forward the call with the caller's ``_meta``; an upstream error result keeps the original."""
        forwarded = {k: v for k, v in (meta or {}).items() if not k.startswith("io.modelcontextprotocol/")}
        result = await self.client.call_tool(spec.name, arguments, meta=forwarded or None)  # type: ignore[arg-type]
        if result.is_error:
            return ToolOutcome(
                structured=None, error_code=UPSTREAM_ERROR, message=result_text(result), upstream=result
            )
        structured = result.structured_content
        if structured is None:
            structured = {"text": result_text(result)}
        return ToolOutcome(structured=dict(structured), upstream=result)
