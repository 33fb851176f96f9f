"""Static checks of tool schemas: valid JSON Schema, MCP names, portability to Anthropic and OpenAI."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import mcp_types as types

from mcp_resili.check.report import Finding, Severity
from mcp_resili.tools.spec import TOOL_NAME_PATTERN

#: OpenAI function names: letters, digits, underscore and dash, at most 64 characters.
OPENAI_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: OpenAI strict mode: at most this many nesting levels and object properties in total.
OPENAI_STRICT_MAX_DEPTH = 10
OPENAI_STRICT_MAX_PROPERTIES = 5000


def _objects(schema: Any, depth: int = 1) -> Iterator[tuple[dict[str, Any], int]]:
    """Every object-typed subschema with its nesting depth."""
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "object" or "properties" in schema:
        yield schema, depth
    for key in ("properties", "$defs", "definitions"):
        for sub in (schema.get(key) or {}).values():
            yield from _objects(sub, depth + 1 if key == "properties" else depth)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _objects(schema[key], depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            yield from _objects(sub, depth)


def strict_mode_problems(schema: dict[str, Any]) -> list[str]:
    """Why ``schema`` could not be sent to OpenAI with ``strict: true`` (empty when it could)."""
    problems = []
    objects = list(_objects(schema))
    for obj, _ in objects:
        props = set((obj.get("properties") or {}).keys())
        if obj.get("additionalProperties") is not False:
            problems.append("an object schema does not set additionalProperties: false")
        missing = props - set(obj.get("required") or [])
        if missing:
            problems.append(f"optional properties {sorted(missing)} (strict mode requires every property)")
    depth = max((d for _, d in objects), default=0)
    if depth > OPENAI_STRICT_MAX_DEPTH:
        problems.append(f"nesting depth {depth} exceeds {OPENAI_STRICT_MAX_DEPTH}")
    total = sum(len(obj.get("properties") or {}) for obj, _ in objects)
    if total > OPENAI_STRICT_MAX_PROPERTIES:
        problems.append(f"{total} properties exceed {OPENAI_STRICT_MAX_PROPERTIES}")
    return sorted(set(problems))


def check_tool_schemas(tool: types.Tool) -> list[Finding]:
    """Findings for one tool's name, description and schemas."""
    findings: list[Finding] = []

    def add(severity: Severity, check: str, message: str) -> None:
        findings.append(Finding(severity=severity, check=check, tool=tool.name, message=message))

    if not TOOL_NAME_PATTERN.match(tool.name):
        add("error", "mcp-name", f"name {tool.name!r} does not match {TOOL_NAME_PATTERN.pattern}")
    if not OPENAI_NAME.match(tool.name):
        add(
            "warning",
            "openai-name",
            f"name {tool.name!r} is not a valid OpenAI function name (a runner must map it)",
        )
    if not (tool.description or "").strip():
        add("warning", "description", "no description: models choose tools by their descriptions")
    for label, schema in (("input", tool.input_schema), ("output", tool.output_schema)):
        if schema is None:
            continue
        try:
            jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(
                schema
            )
        except jsonschema.SchemaError as exc:
            add("error", f"{label}-schema-valid", f"{label} schema is not valid JSON Schema: {exc.message}")
            continue
        if schema.get("type") != "object":
            add(
                "error", f"{label}-schema-object", f"{label} schema root must be type object (MCP, Anthropic)"
            )
    if isinstance(tool.input_schema, dict) and tool.input_schema.get("type") == "object":
        problems = strict_mode_problems(tool.input_schema)
        if problems:
            add("info", "openai-strict", "not usable with OpenAI strict mode: " + "; ".join(problems))
    return findings
