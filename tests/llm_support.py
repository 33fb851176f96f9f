"""Shared by the model-API tests: serving an app on loopback, SDK clients, an SDK agent loop over MCP."""

from __future__ import annotations

import contextlib
import functools
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anthropic
import anyio
import httpx2
import mcp_types as types
import openai
from mcp import Client

from mcp_resili import FINISH_TOOL, META_EPISODE
from mcp_resili.client.providers.names import ToolNameMap
from mcp_resili.faults.model_api import ModelFaultPlan
from mcp_resili.modelapi import GatewaySettings, ModelGateway, bind, serve_app
from mcp_resili.modelserver import ModelServer
from mcp_resili.registry.loader import load_all_suites

#: One model server for every test (its task index is built once per process).
_MODEL_SERVER: ModelServer | None = None


def model_server() -> ModelServer:
    global _MODEL_SERVER
    if _MODEL_SERVER is None:
        _MODEL_SERVER = ModelServer(load_all_suites())
        _MODEL_SERVER.prepare()
    return _MODEL_SERVER


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` on a free loopback port; yield its base URL; stop it on exit."""
    sock = bind("127.0.0.1", 0)
    urls: list[str] = []
    started = anyio.Event()

    def on_started(url: str) -> None:
        urls.append(url)
        started.set()

    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(serve_app, app, sock, on_started=on_started))
        with anyio.fail_after(30):
            await started.wait()
        try:
            yield urls[0]
        finally:
            group.cancel_scope.cancel()


def plan_of(*rules: dict[str, Any]) -> ModelFaultPlan:
    return ModelFaultPlan.model_validate({"rules": list(rules)})


@contextlib.asynccontextmanager
async def gateway(upstream: str, *rules: dict[str, Any], **settings: Any) -> AsyncIterator[str]:
    """A fault gateway in front of ``upstream`` with ``rules``; yields its base URL."""
    options = {"time_scale": 0.001, **settings}
    served = ModelGateway(GatewaySettings(upstream=upstream, plan=plan_of(*rules), **options))
    sock = bind("127.0.0.1", 0)
    urls: list[str] = []
    started = anyio.Event()

    def on_started(url: str) -> None:
        urls.append(url)
        started.set()

    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(served.serve, sock, on_started=on_started))
        with anyio.fail_after(30):
            await started.wait()
        try:
            yield urls[0]
        finally:
            group.cancel_scope.cancel()


#: One TLS context for every test client: building one per client (the default) costs ~80 ms.
_TLS = ssl.create_default_context()


def _http(options: dict[str, Any]) -> dict[str, Any]:
    client = httpx2.AsyncClient(verify=_TLS)
    return {"api_key": "sk-placeholder", "max_retries": 0, "http_client": client, **options}


def openai_client(url: str, **options: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", **_http(options))


def anthropic_client(url: str, **options: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, **_http(options))


def tool_text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def play_over_mcp(
    api: str,
    stream: bool,
    url: str,
    mcp: Client,
    prompt: str,
    episode: dict[str, Any],
    *,
    model: str = "scripted:oracle",
    max_turns: int = 40,
) -> int:
    """A plain SDK agent loop: the model at ``url`` plays ``prompt`` with ``mcp``'s tools until ``finish``.

    Returns the number of model calls. Tool names go through `ToolNameMap` as any harness would map them.
    """
    listed = (await mcp.list_tools()).tools
    names = ToolNameMap.build(t.name for t in listed)
    call: Callable[[list[Any]], Awaitable[tuple[str, list[tuple[str, str, dict[str, Any]]]]]]
    if api == "openai":
        client: Any = openai_client(url)
        tools = [
            {
                "type": "function",
                "function": {
                    "name": names.provider_name(t.name),
                    "description": t.description or "",
                    "parameters": t.input_schema,
                },
            }
            for t in listed
        ]
        messages: list[Any] = [{"role": "user", "content": prompt}]
        call = functools.partial(_openai_turn, client, tools, model, stream)
    else:
        client = anthropic_client(url)
        tools = [
            {
                "name": names.provider_name(t.name),
                "description": t.description or "",
                "input_schema": t.input_schema,
            }
            for t in listed
        ]
        messages = [{"role": "user", "content": prompt}]
        call = functools.partial(_anthropic_turn, client, tools, model, stream)
    async with client:
        for turn in range(1, max_turns + 1):
            assistant, calls = await call(messages)
            messages.append(assistant)
            if not calls:
                return turn
            results = []
            finished = False
            for call_id, name, arguments in calls:
                mcp_name = names.mcp_name(name)
                result = await mcp.call_tool(mcp_name, arguments, meta={META_EPISODE: episode})
                results.append((call_id, tool_text(result), bool(result.is_error)))
                finished = finished or (mcp_name == FINISH_TOOL and not result.is_error)
            if api == "openai":
                messages += [{"role": "tool", "tool_call_id": i, "content": text} for i, text, _ in results]
            else:
                blocks = [
                    {"type": "tool_result", "tool_use_id": i, "content": text, "is_error": error}
                    for i, text, error in results
                ]
                messages.append({"role": "user", "content": blocks})
            if finished:
                return turn
    raise AssertionError(f"no finish within {max_turns} turns")


async def _openai_turn(client: Any, tools: list[Any], model: str, stream: bool, messages: list[Any]) -> Any:
    if not stream:
        reply = await client.chat.completions.create(model=model, messages=messages, tools=tools)
        message = reply.choices[0].message
        calls = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()]
        return message.model_dump(exclude_none=True), calls
    text, pieces = "", {}
    events = await client.chat.completions.create(model=model, messages=messages, tools=tools, stream=True)
    async for chunk in events:
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for piece in delta.tool_calls or ():
            entry = pieces.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += piece.id or ""
            entry["name"] += (piece.function.name or "") if piece.function else ""
            entry["arguments"] += (piece.function.arguments or "") if piece.function else ""
    calls = [(p["id"], p["name"], json.loads(p["arguments"] or "{}")) for _, p in sorted(pieces.items())]
    assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        assistant["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ]
    return assistant, calls


async def _anthropic_turn(
    client: Any, tools: list[Any], model: str, stream: bool, messages: list[Any]
) -> Any:
    if stream:
        async with client.messages.stream(
            model=model, max_tokens=4096, messages=messages, tools=tools
        ) as events:
            reply = await events.get_final_message()
    else:
        reply = await client.messages.create(model=model, max_tokens=4096, messages=messages, tools=tools)
    calls = [(b.id, b.name, b.input) for b in reply.content if b.type == "tool_use"]
    return {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}, calls
