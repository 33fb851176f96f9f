"""A hand-written JSON-RPC MCP server (handshake era) that dies on its first ``tools/call``.

It answers ``initialize`` and ``tools/list`` (one tool, ``crash``), then, on any tool call, writes one
line to stderr and exits with status 3 without answering: a server crashing mid-session.
"""

import json
import sys

TOOLS = [{"name": "crash", "description": "exits the server", "inputSchema": {"type": "object"}}]


def reply(message_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message_id, "result": result}) + "\n")
    sys.stdout.flush()


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
                "serverInfo": {"name": "dying", "version": "0.0.1"},
            },
        )
    elif method == "tools/list":
        reply(message_id, {"tools": TOOLS})
    elif method == "tools/call":
        sys.stderr.write("fatal: crashed on purpose\n")
        sys.stderr.flush()
        sys.exit(3)
    else:
        error = {"code": -32601, "message": f"Method not found: {method}"}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message_id, "error": error}) + "\n")
        sys.stdout.flush()
