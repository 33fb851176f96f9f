"""A lean fake Chat Completions server for the throughput benchmark (plain asyncio, HTTP/1.1 keep-alive).

It answers every ``POST /v1/chat/completions`` after ``--latency`` seconds: a call of one tool when the
conversation has no tool result yet, else a call of ``finish``. It reads only the request's headers and
looks for a tool message in the raw body, so it spends a fraction of the CPU of a full web framework
(tests/fakes/model_server.py, which parses and keeps every request): on a 2-core machine the fake's
CPU is CPU the runner under test does not get.

    python bench/lean_model.py --latency 2     # prints its port, then serves on 127.0.0.1
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import socket

TOOL_MESSAGE = (b'"role":"tool"', b'"role": "tool"')


def _answer(n: int, name: str, arguments: dict[str, object]) -> bytes:
    body = json.dumps(
        {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 0,
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": f"call_{n}",
                                "type": "function",
                                "function": {"name": name, "arguments": json.dumps(arguments)},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }
    ).encode()
    head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


class LeanModel(asyncio.Protocol):
    """One connection: requests are answered in order, each after the latency."""

    counter = itertools.count()

    def __init__(self, latency: float, first: tuple[str, dict[str, object]]) -> None:
        self.latency = latency
        self.first = first
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].lower()
            marker = head.find(b"content-length:")
            length = int(head[marker + 15 : head.find(b"\r\n", marker)]) if marker >= 0 else 0
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            finished = any(m in body for m in TOOL_MESSAGE)
            reply = (
                _answer(next(self.counter), "finish", {"status": "completed", "summary": "done"})
                if finished
                else _answer(next(self.counter), *self.first)
            )
            loop = asyncio.get_running_loop()
            loop.call_later(self.latency, self._send, reply)

    def _send(self, reply: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(reply)


async def serve(latency: float, tool: str, arguments: dict[str, object]) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: LeanModel(latency, (tool, arguments)), "127.0.0.1", 0, backlog=4096
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--tool", default="file_operations_reader")
    parser.add_argument("--arguments", default='{"source": "data/sales.csv"}')
    args = parser.parse_args()
    asyncio.run(serve(args.latency, args.tool, json.loads(args.arguments)))


if __name__ == "__main__":
    main()
