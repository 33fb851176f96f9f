"""Live contract checks against any MCP server: listing, pagination, round trips, result schemas."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import jsonschema
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from mcp_resili.check.report import CheckReport, Finding, Severity
from mcp_resili.check.schema import check_tool_schemas

#: Declared error codes, as our servers publish them in a tool's ``_meta``.
ERRORS_META = "mcp-resili/errors"
MAX_PAGES = 1000
T = TypeVar("T")


def sample_arguments(schema: dict[str, Any]) -> Any:
    """A small instance of ``schema``: defaults, enums and examples first, else minimal values."""
    for key in ("default", "const"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][0]
    if schema.get("examples"):
        return schema["examples"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {name: sample_arguments(props.get(name, {})) for name in schema.get("required") or []}
    if kind == "array":
        return [sample_arguments(schema.get("items") or {}) for _ in range(schema.get("minItems", 0))]
    if kind == "string":
        return "x" * max(1, int(schema.get("minLength", 1)))
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "x"


async def _paginate(
    report: CheckReport, method: str, fetch: Callable[[str | None], Awaitable[tuple[list[T], str | None]]]
) -> list[T]:
    items: list[T] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        try:
            page, cursor = await fetch(cursor)
        except MCPError as exc:
            report.findings.append(
                Finding("error", f"{method}", f"{method} failed: {exc.code} {exc.error.message}")
            )
            return items
        except ValidationError as exc:
            for error in exc.errors():
                where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"]).lstrip(".")
                message = (
                    f"the response breaks the MCP schema at {where}: {error['msg']} (got {error['input']!r})"
                )
                report.findings.append(Finding("error", f"{method}-schema", message))
            return items
        items.extend(page)
        if not cursor:
            return items
        if cursor in seen:
            report.findings.append(
                Finding("error", "pagination", f"{method} returned cursor {cursor!r} twice")
            )
            return items
        seen.add(cursor)
    report.findings.append(Finding("error", "pagination", f"{method} did not end after {MAX_PAGES} pages"))
    return items


async def _list_tools(client: Client, cursor: str | None) -> tuple[list[types.Tool], str | None]:
    page = await client.list_tools(cursor=cursor)
    return list(page.tools), page.next_cursor


async def _list_prompts(client: Client, cursor: str | None) -> tuple[list[types.Prompt], str | None]:
    page = await client.list_prompts(cursor=cursor)
    return list(page.prompts), page.next_cursor


async def _list_resources(client: Client, cursor: str | None) -> tuple[list[types.Resource], str | None]:
    page = await client.list_resources(cursor=cursor)
    return list(page.resources), page.next_cursor


def _text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def _check_call(report: CheckReport, client: Client, tool: types.Tool) -> None:
    arguments = sample_arguments(dict(tool.input_schema))
    try:
        jsonschema.validate(arguments, tool.input_schema)
    except (jsonschema.ValidationError, jsonschema.SchemaError):
        report.findings.append(
            Finding("info", "call", "could not build valid sample arguments; not called", tool.name)
        )
        return
    report.calls += 1
    try:
        result = await client.call_tool(tool.name, arguments)
    except RuntimeError as exc:  # the SDK rejects structured content that breaks the output schema
        report.findings.append(Finding("error", "output-schema", str(exc), tool.name))
        return
    except MCPError as exc:
        severity: Severity = "warning" if exc.code != types.INTERNAL_ERROR else "error"
        report.findings.append(
            Finding(
                severity,
                "call",
                f"valid arguments got JSON-RPC error {exc.code}: {exc.error.message}",
                tool.name,
            )
        )
        return
    if result.is_error:
        declared = (tool.meta or {}).get(ERRORS_META)
        text = _text(result)
        if declared and not any(code in text for code in declared):
            report.findings.append(
                Finding(
                    "error",
                    "declared-errors",
                    f"error result names none of {declared}: {text[:120]!r}",
                    tool.name,
                )
            )
        return
    if tool.output_schema is not None:
        if result.structured_content is None:
            report.findings.append(
                Finding(
                    "error",
                    "output-schema",
                    "declares an output schema but returned no structured content",
                    tool.name,
                )
            )
        else:
            try:
                jsonschema.validate(result.structured_content, tool.output_schema)
            except jsonschema.ValidationError as exc:
                report.findings.append(Finding("error", "output-schema", exc.message, tool.name))


async def _check_invalid_input(report: CheckReport, client: Client, tool: types.Tool) -> None:
    if not (tool.input_schema.get("required") or []):
        return
    report.calls += 1
    try:
        result = await client.call_tool(tool.name, {})
    except MCPError as exc:
        if exc.code == types.INTERNAL_ERROR:
            report.findings.append(
                Finding(
                    "warning",
                    "invalid-input",
                    "missing arguments caused an internal error (-32603), "
                    "not an isError result or invalid params",
                    tool.name,
                )
            )
        return
    except RuntimeError:
        return
    if not result.is_error:
        report.findings.append(
            Finding("warning", "invalid-input", "accepted a call without its required arguments", tool.name)
        )


async def check_server(client: Client, target: str, *, call_tools: bool = False) -> CheckReport:
    """Run every contract check on a connected server. Calls tools only when ``call_tools``."""
    report = CheckReport(target=target)
    tools = await _paginate(report, "tools/list", lambda c: _list_tools(client, c))
    report.tools = len(tools)
    names = [t.name for t in tools]
    for name in sorted({n for n in names if names.count(n) > 1}):
        report.findings.append(Finding("error", "duplicate-name", f"listed {names.count(name)} times", name))
    for tool in tools:
        report.findings.extend(check_tool_schemas(tool))
    unknown = f"mcp-resili-check-{uuid.uuid4().hex[:8]}"
    report.calls += 1
    try:
        result = await client.call_tool(unknown, {})
        if not result.is_error:
            report.findings.append(
                Finding("error", "unknown-tool", f"calling unlisted tool {unknown!r} succeeded")
            )
    except MCPError:
        pass  # a JSON-RPC error is a fine answer to an unknown tool
    if call_tools:
        for tool in tools:
            await _check_call(report, client, tool)
            await _check_invalid_input(report, client, tool)
    capabilities = client.server_capabilities
    if capabilities.prompts is not None:
        await _paginate(report, "prompts/list", lambda c: _list_prompts(client, c))
    if capabilities.resources is not None:
        await _paginate(report, "resources/list", lambda c: _list_resources(client, c))
    return report
