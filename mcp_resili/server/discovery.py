"""Tool discovery: ``search_tools`` (ranked, offline lexical search) and ``tool_info`` (a tool's details).

ResiliBench agents search the library before they call (paper §4.1, App. A: ``<tool_search>`` and
``<tool_info>``). Served when the suite enables discovery; never faulted, never required, and left
out of the termination rules and of scoring (like the reference executor's search and info turns).
"""

from __future__ import annotations

import difflib
from typing import Any

import mcp_types as types

from mcp_resili.constants import DISCOVERY_TOOLS
from mcp_resili.tools import ToolLibrary
from mcp_resili.tools.search import ToolIndex
from mcp_resili.tools.validator import argument_problems, compiled

SEARCH_TOOL, INFO_TOOL = DISCOVERY_TOOLS
DEFAULT_LIMIT = 5
MAX_LIMIT = 10

SEARCH_SPEC = types.Tool(
    name=SEARCH_TOOL,
    description=(
        "Find tools by keywords (e.g. 'file reader writer', 'data validation parser', 'network api fetch'). "
        "Returns the best matches, most relevant first, with their parameters and dependencies."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    annotations=types.ToolAnnotations(read_only_hint=True),
    _meta={"mcp-resili/errors": ["INVALID_INPUT"]},  # arguments its schema refuses, an unknown tool
)
INFO_SPEC = types.Tool(
    name=INFO_TOOL,
    description="Show one tool's description, parameters, returns, possible errors and dependencies.",
    input_schema={
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1}},
        "required": ["name"],
        "additionalProperties": False,
    },
    annotations=types.ToolAnnotations(read_only_hint=True),
    _meta={"mcp-resili/errors": ["INVALID_INPUT"]},
)


#: Each discovery tool's published schema, which its arguments must meet like any tool's.
_CHECKS = {spec.name: compiled(spec.input_schema) for spec in (SEARCH_SPEC, INFO_SPEC)}


class Discovery:
    """Answers discovery calls for one library."""

    def __init__(self, library: ToolLibrary) -> None:
        self.library = library
        self.index = ToolIndex(library.specs)

    def describe(self, name: str, relevance: float | None = None) -> dict[str, Any]:
        """A tool's registry entry as the agent reads it."""
        spec = self.library.spec(name)
        schema = spec.input_schema
        required = set(schema.get("required", []))
        entry: dict[str, Any] = {
            "name": spec.name,
            "category": spec.category,
            "description": spec.description,
            "parameters": [
                {
                    "name": param,
                    "required": param in required,
                    "type": prop.get("type", "any"),
                    "description": prop.get("description", ""),
                }
                for param, prop in schema.get("properties", {}).items()
            ],
            "returns": sorted((spec.output_schema or {}).get("properties", {})),
            "errors": list(spec.error_codes),
            "dependencies": list(spec.dependencies),
        }
        if relevance is not None:
            entry["relevance"] = relevance
        return entry

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Answer ``search_tools`` or ``tool_info``: the text and the structured result.

        Raises `DiscoveryError` for arguments it cannot answer (the server makes it an error result).
        """
        problem = argument_problems(_CHECKS[name], arguments)
        if problem is not None:
            raise DiscoveryError(f"invalid arguments for {name}: {problem}")
        if name == SEARCH_TOOL:
            query, limit = arguments["query"], arguments.get("limit", DEFAULT_LIMIT)
            if not query.strip():  # the schema allows a query of spaces; it matches nothing
                raise DiscoveryError("search_tools needs a non-empty string 'query'")
            hits = self.index.search(query, limit)
            results = [self.describe(h.name, h.score) for h in hits]
            lines = [f"Tool search results for {query!r}:"] if hits else [f"No tool matches {query!r}."]
            for r in results:
                deps = f"; requires {', '.join(r['dependencies'])}" if r["dependencies"] else ""
                lines.append(f"- {r['name']} (relevance {r['relevance']:.2f}): {r['description']}{deps}")
            return "\n".join(lines), {"results": results}
        tool = arguments["name"]
        if tool not in self.library:
            close = difflib.get_close_matches(tool, list(self.library.by_name), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise DiscoveryError(f"unknown tool {tool!r}{hint}")
        entry = self.describe(tool)
        text = f"{tool}: {entry['description']}"
        if entry["dependencies"]:
            text += f"\nThese tools must succeed before this one: {', '.join(entry['dependencies'])}"
        return text, entry


class DiscoveryError(Exception):
    """Discovery arguments that cannot be answered (their message is the error the agent reads)."""
