"""The tool specification: everything the server, the scorer and the docs know about one tool."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mcp_resili.tools.validator import schema_error

#: MCP tool names (SEP-986): letters, digits, dot, underscore and dash, 1 to 128 characters.
TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class ErrorCode(BaseModel):
    """An error a tool declares it may return."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    description: str


class ToolSpec(BaseModel):
    """One tool, as data: its MCP surface plus the facts fault policies and scorers need."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    errors: tuple[ErrorCode, ...] = ()
    dependencies: tuple[str, ...] = ()
    category: str = "general"
    operation: str = ""
    access: Literal["read", "write"] = "read"

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not TOOL_NAME_PATTERN.match(name):
            raise ValueError(f"tool name {name!r} is not a valid MCP tool name ({TOOL_NAME_PATTERN.pattern})")
        return name

    @field_validator("input_schema", "output_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is None:
            return None
        error = schema_error(schema)  # jsonschema's check_schema, the verdict cached per schema
        if error is not None:
            raise error
        if schema.get("type") != "object":
            raise ValueError("tool schemas must have an object root (MCP and Anthropic require it)")
        return schema

    @property
    def error_codes(self) -> tuple[str, ...]:
        """The declared error codes, in declaration order."""
        return tuple(error.code for error in self.errors)
