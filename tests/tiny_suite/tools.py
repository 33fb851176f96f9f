"""The tiny suite's five tools: specs (data) bound to deterministic simulators (code).

``lookup`` declares an error of its own (``NOT_FOUND``); ``record`` is a write that changes the
episode's state and depends on ``lookup``; ``list_records`` reads that state back.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from mcp_resili import ErrorCode, ToolFailure, ToolLibrary, ToolSpec, ToolState

#: What ``lookup`` finds (fixed, so every run is reproducible).
TABLE = {"apple": 3, "pear": 5, "plum": 7, "fig": 11, "kiwi": 13}


def _schema(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


SPECS = (
    ToolSpec(
        name="lookup",
        description="The number filed under a key.",
        input_schema=_schema({"key": {"type": "string", "pattern": "^[a-z]{1,16}$"}}, "key"),
        output_schema=_schema({"key": {"type": "string"}, "value": {"type": "integer"}}, "key", "value"),
        errors=(ErrorCode(code="NOT_FOUND", description="no entry has this key"),),
        category="table",
        operation="read",
    ),
    ToolSpec(
        name="scale",
        description="A whole number multiplied by a factor.",
        input_schema=_schema(
            {
                "value": {"type": "integer", "minimum": -1_000_000, "maximum": 1_000_000},
                "factor": {"type": "integer", "minimum": 0, "maximum": 100},
            },
            "value",
            "factor",
        ),
        output_schema=_schema({"value": {"type": "integer"}}, "value"),
        category="math",
        operation="scale",
    ),
    ToolSpec(
        name="echo",
        description="The text it is given.",
        input_schema=_schema({"text": {"type": "string", "maxLength": 100_000}}, "text"),
        output_schema=_schema({"text": {"type": "string"}}, "text"),
        category="text",
        operation="echo",
    ),
    ToolSpec(
        name="record",
        description="File a labelled number (a write: a retry after a lost reply files it twice).",
        input_schema=_schema(
            {
                "label": {"type": "string", "minLength": 1, "maxLength": 64},
                "value": {"type": "integer", "minimum": -100_000_000, "maximum": 100_000_000},
            },
            "label",
            "value",
        ),
        output_schema=_schema({"record_id": {"type": "string"}, "count": {"type": "integer"}}, "record_id"),
        dependencies=("lookup",),
        category="table",
        operation="write",
        access="write",
    ),
    ToolSpec(
        name="list_records",
        description="Every number filed in this episode, in order.",
        input_schema=_schema({}),
        output_schema=_schema(
            {
                "records": {
                    "type": "array",
                    "items": _schema(
                        {"label": {"type": "string"}, "value": {"type": "integer"}}, "label", "value"
                    ),
                },
                "count": {"type": "integer"},
            },
            "records",
        ),
        category="table",
        operation="list",
    ),
)


def lookup(arguments: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """The entry under ``key``; an unknown key is the tool's own declared error."""
    key = arguments["key"]
    if key not in TABLE:
        raise ToolFailure("NOT_FOUND", f"no entry {key!r}")
    return {"key": key, "value": TABLE[key]}


def scale(arguments: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """``value × factor``."""
    return {"value": arguments["value"] * arguments["factor"]}


def echo(arguments: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """The text, unchanged."""
    return {"text": arguments["text"]}


def record(arguments: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Append the labelled number to the episode's records."""
    records = state.setdefault("records", [])
    records.append({"label": arguments["label"], "value": arguments["value"]})
    return {"record_id": f"R-{len(records):04d}", "count": len(records)}


def list_records(arguments: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Copies of the episode's records (the library promises fresh results)."""
    records = [dict(entry) for entry in state.get("records", [])]
    return {"records": records, "count": len(records)}


SIMULATORS = {
    "lookup": lookup,
    "scale": scale,
    "echo": echo,
    "record": record,
    "list_records": list_records,
}


@cache
def library() -> ToolLibrary:
    """The five tools; ``lookup`` and ``echo`` may run on the server's loop."""
    return ToolLibrary("tiny", SPECS, SIMULATORS, inline=frozenset({"lookup", "echo"}), fresh_results=True)
