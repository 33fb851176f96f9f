"""A fake model API on a real loopback socket, for driving the real anthropic and openai SDKs.

It serves ``POST /v1/chat/completions`` (OpenAI) and ``POST /v1/messages`` (Anthropic). Each request is
parsed into a neutral `Exchange` (the task prompt, the offered function names, the tool calls and
results so far) and answered by a *policy*: a function of the exchange only, so replies are
deterministic and a resumed run meets the same model as an uninterrupted one (call ids too: they
count the calls so far, where a real API's are random).

Scripted trouble: ``failures(n)`` may answer request number ``n`` with an HTTP error (429, 500, ...);
``latency`` delays every answer (the throughput benchmark); ``hold_after_finishes`` makes every
request after the N-th ``finish`` reply wait until ``release`` is set (the SIGKILL test).

Run standalone (for the benchmark): ``python tests/fakes/model_server.py --port 0 --latency 0.5``
prints ``PORT`` on stdout, then serves until killed.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


@dataclass(frozen=True)
class ToolExchange:
    """One tool call the model made, and the result it got back."""

    name: str
    arguments: dict[str, Any]
    result: str
    is_error: bool


@dataclass(frozen=True)
class Exchange:
    """What a policy sees: the API, the first user prompt, the offered tools, the calls so far."""

    api: str
    prompt: str
    tools: tuple[str, ...]
    history: tuple[ToolExchange, ...]
    model: str


@dataclass(frozen=True)
class Reply:
    """What the model says: text and ``(function name, arguments)`` calls."""

    text: str = ""
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()


@dataclass(frozen=True)
class Failure:
    """An HTTP error answer."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "scripted failure"
    code: str | None = None


Policy = Callable[[Exchange], Reply | Awaitable[Reply]]


def finish_call(summary: str = "done", status: str = "completed") -> tuple[str, dict[str, Any]]:
    """A call of the MCP ``finish`` tool."""
    return ("finish", {"status": status, "summary": summary})


def one_tool_then_finish(tool: str, arguments: dict[str, Any]) -> Policy:
    """Calls ``tool`` once, then finishes."""

    def policy(exchange: Exchange) -> Reply:
        if not exchange.history:
            return Reply(calls=((tool, arguments),))
        return Reply(calls=(finish_call(),))

    return policy


def oracle_policy(suite_name: str = "tiny") -> Policy:
    """The scripted oracle behind an API: it recognises the task of suite ``suite_name`` from the
    prompt, then reads results.

    It reuses ``scripted:oracle``'s decisions, rebuilt from the wire conversation only (function names,
    argument JSON, result text), so everything the real SDKs and our mappings carry is exercised.
    """
    from mcp_resili.agents.model import (
        AssistantMessage,
        ModelRequest,
        ToolCall,
        ToolResult,
        ToolResultsMessage,
        UserMessage,
    )
    from mcp_resili.agents.scripted import OracleAgent
    from mcp_resili.registry.loader import get_suite

    suite = get_suite(suite_name)
    by_prompt = {suite.prompt(t): t for t in suite.tasks}
    agent = OracleAgent()

    async def policy(exchange: Exchange) -> Reply:
        task = by_prompt[exchange.prompt]
        messages: list[Any] = [UserMessage(exchange.prompt)]
        for n, ex in enumerate(exchange.history):
            call = ToolCall(f"c{n}", ex.name, ex.arguments)
            structured = None if ex.is_error else json.loads(ex.result)
            messages.append(AssistantMessage("", (call,)))
            messages.append(
                ToolResultsMessage((ToolResult(call.id, ex.name, ex.result, ex.is_error, structured),))
            )
        response = await agent.generate(ModelRequest(messages=tuple(messages), tools=(), task=task))
        return Reply(text=response.text, calls=tuple((c.name, c.arguments) for c in response.tool_calls))

    return policy


def _openai_exchange(body: dict[str, Any]) -> Exchange:
    messages = body["messages"]
    prompt = next(m["content"] for m in messages if m["role"] == "user")
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    history: list[ToolExchange] = []
    for m in messages:
        if m["role"] == "assistant":
            for tc in m.get("tool_calls") or ():
                calls[tc["id"]] = (tc["function"]["name"], json.loads(tc["function"]["arguments"]))
        elif m["role"] == "tool":
            name, arguments = calls[m["tool_call_id"]]
            content = m["content"]
            # Chat Completions carries no error flag: our server's error results start with "Error ".
            history.append(ToolExchange(name, arguments, content, content.startswith("Error ")))
    tools = tuple(t["function"]["name"] for t in body.get("tools") or ())
    return Exchange("openai", prompt, tools, tuple(history), body["model"])


def _anthropic_exchange(body: dict[str, Any]) -> Exchange:
    messages = body["messages"]
    first = messages[0]["content"]
    prompt = first if isinstance(first, str) else "".join(b.get("text", "") for b in first)
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    history: list[ToolExchange] = []
    for m in messages:
        if isinstance(m["content"], str):
            continue
        for block in m["content"]:
            if block["type"] == "tool_use":
                calls[block["id"]] = (block["name"], block["input"])
            elif block["type"] == "tool_result":
                name, arguments = calls[block["tool_use_id"]]
                content = block["content"]
                text = content if isinstance(content, str) else "".join(c.get("text", "") for c in content)
                history.append(ToolExchange(name, arguments, text, bool(block.get("is_error"))))
    tools = tuple(t["name"] for t in body.get("tools") or ())
    return Exchange("anthropic", prompt, tools, tuple(history), body["model"])


def _openai_body(reply: Reply, exchange: Exchange, n: int) -> dict[str, Any]:
    tool_calls = [
        {
            "id": f"call_{len(exchange.history)}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for i, (name, args) in enumerate(reply.calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": exchange.model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}
        ],
        "usage": {
            "prompt_tokens": 100 + 10 * len(exchange.history),
            "completion_tokens": 20,
            "total_tokens": 0,
        },
    }


def _anthropic_body(reply: Reply, exchange: Exchange, n: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [
        {"type": "tool_use", "id": f"toolu_{len(exchange.history)}_{i}", "name": name, "input": args}
        for i, (name, args) in enumerate(reply.calls)
    ]
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": exchange.model,
        "content": content,
        "stop_reason": "tool_use" if reply.calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 100 + 10 * len(exchange.history), "output_tokens": 20},
    }


class FakeModelServer:
    """A scripted model API (see the module docstring)."""

    def __init__(
        self,
        policy: Policy,
        *,
        failures: Callable[[int], Failure | None] | None = None,
        latency: float = 0.0,
        hold_after_finishes: int | None = None,
    ) -> None:
        self.policy = policy
        self.failures = failures
        self.latency = latency
        self.hold_after_finishes = hold_after_finishes
        self.requests = 0
        self.answered = 0
        self.finishes = 0
        self.statuses: list[int] = []
        self.credentials: set[str] = set()
        self.exchanges: list[Exchange] = []
        self.release = anyio.Event()
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
            ]
        )

    async def _chat(self, request: Request) -> JSONResponse:
        return await self._answer(request, _openai_exchange, _openai_body, "openai")

    async def _messages(self, request: Request) -> JSONResponse:
        return await self._answer(request, _anthropic_exchange, _anthropic_body, "anthropic")

    async def _answer(
        self,
        request: Request,
        parse: Callable[[dict[str, Any]], Exchange],
        render: Callable[[Reply, Exchange, int], dict[str, Any]],
        api: str,
    ) -> JSONResponse:
        self.requests += 1
        n = self.requests
        for header in ("authorization", "x-api-key"):
            if header in request.headers:
                self.credentials.add(request.headers[header].removeprefix("Bearer "))
        body = await request.json()
        if self.hold_after_finishes is not None and self.finishes >= self.hold_after_finishes:
            await self.release.wait()
        if self.latency:
            await anyio.sleep(self.latency)
        failure = self.failures(n) if self.failures else None
        if failure is not None:
            self.statuses.append(failure.status)
            error = {"type": "error", "error": {"type": "api_error", "message": failure.message}}
            if api == "openai":
                error = {"error": {"message": failure.message, "type": "api_error", "code": failure.code}}
            return JSONResponse(error, status_code=failure.status, headers=failure.headers)
        exchange = parse(body)
        self.exchanges.append(exchange)
        reply = self.policy(exchange)
        if not isinstance(reply, Reply):
            reply = await reply
        if any(name == "finish" for name, _ in reply.calls):
            self.finishes += 1
        self.statuses.append(200)
        self.answered += 1
        return JSONResponse(render(reply, exchange, n))


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 (a free port) inside the caller's event loop; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Answers go out as two writes (head, body): without NODELAY the body waits for a delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        with anyio.fail_after(10):
            while not server.started:
                await anyio.sleep(0.005)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            server.force_exit = True
    sock.close()


def _main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--tool", default="file_operations_reader", help="the one tool the policy calls")
    parser.add_argument("--arguments", default='{"source": "data/sales.csv"}', help="its arguments (JSON)")
    args = parser.parse_args()
    fake = FakeModelServer(one_tool_then_finish(args.tool, json.loads(args.arguments)), latency=args.latency)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", args.port))
    print(sock.getsockname()[1], flush=True)
    server = uvicorn.Server(
        uvicorn.Config(fake.app, log_level="warning", lifespan="off", access_log=False, backlog=4096)
    )
    anyio.run(server.serve, [sock])


if __name__ == "__main__":
    sys.exit(_main())
