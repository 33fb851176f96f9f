"""A deliberately broken MCP server for `mcp-resili check` tests.

``python tests/fakes/broken_server.py``: a listing the SDK accepts but that breaks the contract (bad
name, invalid JSON Schema, a result that contradicts its output schema, endless pagination).
"""

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    types.Tool(name="bad name", description="spaces are not allowed", input_schema={"type": "object"}),
    types.Tool(
        name="invalid_schema",
        description="not JSON Schema",
        input_schema={"type": "object", "properties": {"a": {"type": "strin"}}},
    ),
    types.Tool(
        name="lies_about_output",
        description="declares an integer, returns a string",
        input_schema={"type": "object", "properties": {}},
        output_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    ),
]
MALFORMED = types.Tool(
    name="string_root", description="root is not an object", input_schema={"type": "object"}
)


async def list_tools(ctx, params):
    # Pagination that never ends: the same cursor comes back forever.
    return types.ListToolsResult(tools=TOOLS if not (params and params.cursor) else [], next_cursor="again")


async def call_tool(ctx, params):
    if params.name == "lies_about_output":
        return types.CallToolResult(
            content=[types.TextContent(type="text", text='{"n": "three"}')], structured_content={"n": "three"}
        )
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])


server = Server("broken", version="0.0.1", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
