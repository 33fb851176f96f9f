"""A hand-written stdio upstream for the proxy's tests, and a client callback collecting its logs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types

#: A hand-written JSON-RPC server over stdio (handshake era). ``wait`` is answered once ``release`` is
#: called, and logs on the way; ``hang`` logs, then never answers and stops reading its input.
UPSTREAM = r"""
import json, sys, threading

TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("wait", "release", "hang")]
waiting = []

def send(message):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()

def log(data):
    send({"method": "notifications/message", "params": {"level": "info", "data": data}})

def reply(message_id, text):
    send({"id": message_id, "result": {"content": [{"type": "text", "text": text}]}})

for line in sys.stdin:
    request = json.loads(line)
    method, message_id = request.get("method"), request.get("id")
    if message_id is None:
        continue
    if method == "initialize":
        send({"id": message_id, "result": {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}, "logging": {}},
            "serverInfo": {"name": "review-upstream", "version": "0"},
        }})
    elif method == "tools/list":
        send({"id": message_id, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name = request["params"]["name"]
        if name == "wait":
            waiting.append(message_id)
            log("waiting")
        elif name == "release":
            log("released")  # written for the waiting call, but nothing on stdio says so
            for waiter in waiting:
                reply(waiter, "released")
            reply(message_id, "done")
        elif name == "hang":
            log("hanging")
            threading.Event().wait()  # hung: never answers, never reads again
    else:
        send({"id": message_id, "result": {}})
"""


def upstream_command(where: Path) -> str:
    """The command line of `UPSTREAM`, written as a script into the directory ``where``."""
    script = where / "upstream.py"
    script.write_text(UPSTREAM)
    return f"{sys.executable} {script}"


def log_collector(logs: list[Any], heard: anyio.Event) -> Callable[[Any], Any]:
    async def on_message(message: Any) -> None:
        if isinstance(message, types.LoggingMessageNotification):
            logs.append(message.params.data)
            heard.set()

    return on_message
