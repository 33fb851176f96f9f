"""A hand-written JSON-RPC MCP server (handshake era) that sends a listing breaking the MCP schema.

No SDK: a real third-party server may put anything on the wire, and `mcp-resili check` must say what.
One tool's input schema has an array root (the SDK refuses the whole page); the others are valid MCP,
one of them with a name no model provider accepts. It also prints a banner on stdout, as careless
servers do. With ``--bad-results`` it lists the valid tools only, and answers every call with a result
that breaks the MCP schema (``structuredContent`` an array).
"""

import json
import sys

TOOLS = [
    {"name": "array_root", "description": "root is not an object", "inputSchema": {"type": "array"}},
    {"name": "fine", "description": "a valid tool", "inputSchema": {"type": "object"}},
    {"name": "spaced name", "description": "a name with a space", "inputSchema": {"type": "object"}},
]


def reply(message_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message_id, "result": result}) + "\n")
    sys.stdout.flush()


BAD_RESULTS = "--bad-results" in sys.argv
if BAD_RESULTS:
    TOOLS = [t for t in TOOLS if t["name"] == "fine"]

print("raw server 0.0.1 starting", flush=True)
for line in sys.stdin:
    request = json.loads(line)
    method, message_id = request.get("method"), request.get("id")
    if message_id is None:
        continue  # notifications
    if method == "initialize":
        reply(
            message_id,
            {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "0.0.1"},
            },
        )
    elif method == "tools/list":
        reply(message_id, {"tools": TOOLS})
    elif method == "tools/call" and BAD_RESULTS:
        reply(message_id, {"content": [{"type": "text", "text": "[1, 2]"}], "structuredContent": [1, 2]})
    elif method == "tools/call":
        reply(message_id, {"content": [{"type": "text", "text": "ok"}], "isError": True})
    else:
        sys.stdout.write(
            json.dumps({"jsonrpc": "2.0", "id": message_id, "error": {"code": -32601, "message": method}})
            + "\n"
        )
        sys.stdout.flush()
