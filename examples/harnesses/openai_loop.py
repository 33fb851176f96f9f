"""A plain agent loop on the `openai` SDK (Chat Completions) and the `mcp` client, for `run --agent-cmd`.

It reads only the contract's environment (docs/harnesses.md): the task prompt, the episode's MCP URL,
the model name, and the SDK's own OPENAI_BASE_URL / OPENAI_API_KEY. Nothing here knows of faults: the
SDK's default retries are all the robustness it has.

    mcp-resili run --agent-cmd "python examples/harnesses/openai_loop.py" \
        --faults resilibench --llm-faults llm:medium
"""

from __future__ import annotations

import asyncio
import json
import os
import re

from mcp import Client
from openai import AsyncOpenAI


def function_name(tool: str) -> str:
    """An MCP tool name as a function name (OpenAI allows ``[a-zA-Z0-9_-]{1,64}``)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", tool)[:64]


async def main() -> None:
    prompt = os.environ["MCP_RESILI_TASK_PROMPT"]
    model = os.environ["MCP_RESILI_MODEL"]
    turns = int(os.environ.get("MCP_RESILI_MAX_TURNS", "20"))
    llm = AsyncOpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    async with Client(os.environ["MCP_RESILI_MCP_URL"]) as mcp:
        listed = (await mcp.list_tools()).tools
        names = {function_name(t.name): t.name for t in listed}
        tools = [
            {
                "type": "function",
                "function": {
                    "name": function_name(t.name),
                    "description": t.description or "",
                    "parameters": t.input_schema,
                },
            }
            for t in listed
        ]
        messages: list[dict] = [{"role": "user", "content": prompt}]
        for _ in range(turns):
            reply = await llm.chat.completions.create(model=model, messages=messages, tools=tools)
            message = reply.choices[0].message
            calls = message.tool_calls or []
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content,
                    **({"tool_calls": [c.model_dump() for c in calls]} if calls else {}),
                }
            )
            if not calls:
                print(message.content or "")
                return
            finished = False
            for call in calls:
                try:
                    arguments = json.loads(call.function.arguments or "{}")
                except json.JSONDecodeError as exc:
                    text = f"Error INVALID_ARGUMENTS: the arguments are not JSON ({exc})"
                else:
                    tool = names.get(call.function.name, call.function.name)
                    result = await mcp.call_tool(tool, arguments)
                    text = "\n".join(c.text for c in result.content if c.type == "text")
                    finished = finished or (tool == "finish" and not result.is_error)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
            if finished:
                print("task completed")
                return


if __name__ == "__main__":
    asyncio.run(main())
