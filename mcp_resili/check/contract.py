"""Live contract checks against any MCP server: listing, pagination, round trips, result schemas."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import jsonschema
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import methods as protocol
from pydantic import ValidationError

from mcp_resili.check.report import CheckReport, Finding, Severity
from mcp_resili.check.schema import check_tool_schemas
from mcp_resili.errors import UserError
from mcp_resili.proxy.upstream import CONNECT_TIMEOUT, MAX_UNPARSED, UpstreamError, connect_upstream

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


class CheckError(UserError):
    """The check could not be completed (unreachable, died, timed out): exit status 2, one line."""


def _fatal(exc: BaseException, during: str) -> CheckError | None:
    """The `CheckError` for a failure that ends the check, or None for the server's own answer."""
    if isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
        return CheckError(f"the server closed the connection during {during} (it exited or crashed)")
    if isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)):
        return CheckError(f"the server closed the connection during {during} (it exited or crashed)")
    if isinstance(exc, TimeoutError) or (isinstance(exc, MCPError) and exc.code == types.REQUEST_TIMEOUT):
        return CheckError(f"the server did not answer {during} in time")
    return None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _where(loc: Sequence[int | str]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def _schema_findings(
    report: CheckReport,
    method: str,
    exc: ValidationError,
    raw: Mapping[str, Any] | None,
    key: str,
    model: Any,
    version: str,
) -> list[Any]:
    """Findings for a page the SDK refused, item by item from the raw page; the valid items."""
    items = raw.get(key) if raw is not None else None
    for error in exc.errors():
        if isinstance(items, list) and error["loc"][:1] == (key,):
            continue  # told item by item below
        message = (
            f"the response breaks the MCP schema at {_where(error['loc'])}: {error['msg']} "
            f"(got {_shown(error['input'])})"
        )
        report.findings.append(Finding("error", f"{method}-schema", message))
    if not isinstance(items, list):
        return []
    valid = []
    for index, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) and isinstance(item.get("name"), str) else None
        try:
            # The negotiated version's own rules (stricter than the version-free model).
            protocol.validate_server_result(method, version, {key: [item]})
            valid.append(model.model_validate(item, by_name=False))
        except (ValidationError, KeyError, ValueError) as item_exc:
            errors = item_exc.errors() if isinstance(item_exc, ValidationError) else []
            for error in errors:
                loc = [index if part == 0 and i == 1 else part for i, part in enumerate(error["loc"])]
                message = (
                    f"breaks the MCP schema at {_where(loc)}: {error['msg']} (got {_shown(error['input'])})"
                )
                report.findings.append(Finding("error", f"{method}-schema", message, name))
            if not errors:
                report.findings.append(Finding("error", f"{method}-schema", f"item {index} is invalid", name))
    return valid


async def _paginate(
    report: CheckReport,
    method: str,
    key: str,
    model: Any,
    fetch: Callable[[str | None], Awaitable[tuple[list[T], str | None]]],
    raw_result: Callable[[], Mapping[str, Any] | None],
    version: str,
) -> list[T]:
    items: list[T] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        try:
            page, cursor = await fetch(cursor)
        except MCPError as exc:
            fatal = _fatal(exc, method)
            if fatal is not None:
                raise fatal from None
            report.findings.append(
                Finding("error", method, f"{method} failed: {exc.code} {exc.error.message}")
            )
            return items
        except ValidationError as exc:
            items.extend(_schema_findings(report, method, exc, raw_result(), key, model, version))
            return items
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, TimeoutError) as exc:
            raise _fatal(exc, method) or CheckError(f"{method} failed: {exc!r}") from None
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


async def _call(
    report: CheckReport, client: Client, tool: types.Tool, arguments: dict[str, Any], check: str
) -> types.CallToolResult | MCPError | None:
    """Call ``tool``; the result, the server's JSON-RPC error, or None when a finding says why not."""
    report.calls += 1
    during = f"tools/call {tool.name!r}"
    try:
        return await client.call_tool(tool.name, arguments)
    except MCPError as exc:
        if exc.code == types.REQUEST_TIMEOUT:
            report.findings.append(
                Finding("error", check, "no answer in time (the call timed out)", tool.name)
            )
            return None
        fatal = _fatal(exc, during)
        if fatal is not None:
            raise fatal from None
        return exc
    except ValidationError as exc:
        error = exc.errors()[0]
        message = f"the result breaks the MCP schema at {_where(error['loc'])}: {error['msg']}"
        report.findings.append(Finding("error", "tools/call-schema", message, tool.name))
        return None
    except RuntimeError as exc:  # the SDK rejects structured content that breaks the output schema
        report.findings.append(Finding("error", "output-schema", str(exc), tool.name))
        return None
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, TimeoutError) as exc:
        raise _fatal(exc, during) or CheckError(f"{during} failed: {exc!r}") from None


def _text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def _check_call(report: CheckReport, client: Client, tool: types.Tool) -> None:
    try:
        arguments = sample_arguments(dict(tool.input_schema))
        jsonschema.validate(arguments, tool.input_schema)
    except Exception:  # whatever the schema holds, the check goes on (schema findings say why)
        report.findings.append(
            Finding("info", "call", "could not build valid sample arguments; not called", tool.name)
        )
        return
    result = await _call(report, client, tool, arguments, "call")
    if result is None:
        return
    if isinstance(result, MCPError):
        severity: Severity = "warning" if result.code != types.INTERNAL_ERROR else "error"
        message = f"valid arguments got JSON-RPC error {result.code}: {result.error.message}"
        report.findings.append(Finding(severity, "call", message, tool.name))
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
    result = await _call(report, client, tool, {}, "invalid-input")
    if result is None:
        return
    if isinstance(result, MCPError):
        if result.code == types.INTERNAL_ERROR:
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
    if not result.is_error:
        report.findings.append(
            Finding("warning", "invalid-input", "accepted a call without its required arguments", tool.name)
        )


async def check_server(
    client: Client,
    target: str,
    *,
    call_tools: bool = False,
    raw_result: Callable[[], Mapping[str, Any] | None] = lambda: None,
    unparsed: Sequence[str] = (),
) -> CheckReport:
    """Run every contract check on a connected server. Calls tools only when ``call_tools``.

    ``raw_result`` gives the last response's raw ``result`` (see `WireTap`): a listing the SDK refuses
    is then checked tool by tool, the valid ones further. ``unparsed`` collects what the server wrote
    that was no JSON-RPC (a live list, read at the end). Raises `CheckError` when the server dies or
    stops answering.
    """
    report = CheckReport(target=target)
    version = client.protocol_version
    tools = await _paginate(
        report, "tools/list", "tools", types.Tool, lambda c: _list_tools(client, c), raw_result, version
    )
    report.tools = len(tools)
    names = [t.name for t in tools]
    for name in sorted({n for n in names if names.count(n) > 1}):
        report.findings.append(Finding("error", "duplicate-name", f"listed {names.count(name)} times", name))
    for tool in tools:
        try:
            report.findings.extend(check_tool_schemas(tool))
        except Exception as exc:  # a schema odd enough to break the analysis is itself a finding
            message = f"its schemas could not be analysed: {type(exc).__name__}: {exc}"
            report.findings.append(Finding("error", "schema", message, tool.name))
    unknown = types.Tool(name=f"mcp-resili-check-{uuid.uuid4().hex[:8]}", input_schema={"type": "object"})
    result = await _call(report, client, unknown, {}, "unknown-tool")
    if isinstance(result, types.CallToolResult) and not result.is_error:
        message = f"calling unlisted tool {unknown.name!r} succeeded"
        report.findings.append(Finding("error", "unknown-tool", message))
    if call_tools:
        for tool in tools:
            await _check_call(report, client, tool)
            await _check_invalid_input(report, client, tool)
    capabilities = client.server_capabilities
    if capabilities.prompts is not None:
        await _paginate(
            report,
            "prompts/list",
            "prompts",
            types.Prompt,
            lambda c: _list_prompts(client, c),
            raw_result,
            version,
        )
    if capabilities.resources is not None:
        await _paginate(
            report,
            "resources/list",
            "resources",
            types.Resource,
            lambda c: _list_resources(client, c),
            raw_result,
            version,
        )
    if unparsed:
        count = f"{len(unparsed)}{'+' if len(unparsed) >= MAX_UNPARSED else ''}"
        shown = "; ".join(repr(line) for line in unparsed[:3])
        message = f"wrote {count} line(s) to stdout that are not JSON-RPC (log to stderr instead): {shown}"
        report.findings.append(Finding("error", "stdout", message))
    return report


async def check_target(
    target: str, *, call_tools: bool = False, timeout: float = CONNECT_TIMEOUT
) -> CheckReport:
    """Start or dial ``target`` (a command line or a URL) and check it.

    Every request may take ``timeout`` seconds. Raises `CheckError` with one line saying why when
    the server cannot be checked: not startable, unreachable, dead, or not answering.
    """
    try:
        async with connect_upstream(target, read_timeout_seconds=timeout, capture_stderr=True) as upstream:
            tap = upstream.tap

            def last_result() -> Mapping[str, Any] | None:
                return tap.last_result

            try:
                return await check_server(
                    upstream.client,
                    target,
                    call_tools=call_tools,
                    raw_result=last_result,
                    unparsed=tap.unparsed,
                )
            except CheckError as exc:
                tail = upstream.stderr_tail()
                raise CheckError(f"{exc}; its last stderr line: {tail}" if tail else str(exc)) from None
    except CheckError as exc:
        raise CheckError(f"could not check {target!r}: {exc}") from None
    except UpstreamError as exc:
        raise CheckError(f"could not check: {exc}") from None
