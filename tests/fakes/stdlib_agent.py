"""A small agent program on the standard library alone, for `run --agent-cmd` tests (starts in ~50 ms).

MCP through ``MCP_RESILI_MCP_COMMAND`` (the runner's stdio bridge, handshake era), the model through a
plain HTTP POST to ``OPENAI_BASE_URL/chat/completions``: the loop of examples/harnesses/openai_loop.py
without any SDK. Flags make it misbehave on purpose:

    --crash-after N     exit 3 (a traceback line on stderr) after N model calls
    --hang PIDFILE      after the first model call, start a child (its pid in PIDFILE) and hang
    --garbage           print 300 KB of binary garbage on stdout and stderr, then exit 0
    --env-dump FILE     write the environment's contract names to FILE (JSON), then play on
    --secret-stderr     print the OPENAI_API_KEY it was given on stderr, then crash
    --retries N         retry a failed model call N times (default 0: any model-API error crashes it)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request

CONTRACT = (
    "MCP_RESILI_TASK_PROMPT",
    "MCP_RESILI_MCP_URL",
    "MCP_RESILI_MCP_COMMAND",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "MCP_RESILI_MODEL",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "MCP_RESILI_EPISODE",
    "MCP_RESILI_TIME_LIMIT",
    "MCP_RESILI_MAX_TURNS",
)


class Mcp:
    """A JSON-RPC client over the stdio bridge."""

    def __init__(self, command: str) -> None:
        self.process = subprocess.Popen(shlex.split(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.next_id = 0

    def send(self, message: dict) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("the MCP bridge closed")
            message = json.loads(line)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"MCP error: {message['error']}")
                return message["result"]


def chat(messages: list, tools: list, retries: int) -> dict:
    body = {"model": os.environ["MCP_RESILI_MODEL"], "messages": messages, "tools": tools}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "content-type": "application/json",
            "authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
        },
    )
    for attempt in range(retries + 1):
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            if attempt == retries:
                raise
    raise AssertionError("unreachable")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--crash-after", type=int)
    parser.add_argument("--hang")
    parser.add_argument("--garbage", action="store_true")
    parser.add_argument("--env-dump")
    parser.add_argument("--secret-stderr", action="store_true")
    parser.add_argument("--retries", type=int, default=0)
    args = parser.parse_args()
    if args.env_dump:
        with open(args.env_dump, "w") as out:
            json.dump({name: os.environ.get(name) for name in CONTRACT} | {"stdin": sys.stdin.read()}, out)
    if args.secret_stderr:
        print(f"my key is {os.environ['OPENAI_API_KEY']}", file=sys.stderr)
        return 1
    if args.garbage:
        noise = bytes(range(256)) * 1200
        sys.stdout.buffer.write(noise)
        sys.stderr.buffer.write(noise)
        return 0
    mcp = Mcp(os.environ["MCP_RESILI_MCP_COMMAND"])
    mcp.request(
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "stdlib-agent", "version": "1"},
        },
    )
    mcp.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    listed = mcp.request("tools/list", {})["tools"]
    tools = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t["inputSchema"],
            },
        }
        for t in listed
    ]
    messages: list = [{"role": "user", "content": os.environ["MCP_RESILI_TASK_PROMPT"]}]
    for turn in range(int(os.environ["MCP_RESILI_MAX_TURNS"])):
        if args.crash_after is not None and turn >= args.crash_after:
            print("Traceback (most recent call last):\nRuntimeError: crashed on purpose", file=sys.stderr)
            return 3
        message = chat(messages, tools, args.retries)["choices"][0]["message"]
        if args.hang:
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
            with open(args.hang, "w") as out:
                out.write(str(child.pid))
            time.sleep(3600)
        calls = message.get("tool_calls") or []
        messages.append(
            {
                "role": "assistant",
                "content": message.get("content"),
                **({"tool_calls": calls} if calls else {}),
            }
        )
        if not calls:
            print(message.get("content") or "")
            return 0
        finished = False
        for call in calls:
            arguments = json.loads(call["function"]["arguments"] or "{}")
            result = mcp.request("tools/call", {"name": call["function"]["name"], "arguments": arguments})
            text = "\n".join(c["text"] for c in result["content"] if c["type"] == "text")
            finished = finished or (call["function"]["name"] == "finish" and not result.get("isError"))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
        if finished:
            print("task completed")
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
