"""A plain agent loop on the `anthropic` SDK (Messages, streamed) and the `mcp` client, for `run --agent-cmd`.

It reads only the contract's environment (docs/harnesses.md): the task prompt, the episode's MCP URL,
the model name, and the SDK's own ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY. Answers are streamed
(`messages.stream`); the SDK's default retries are all the robustness it has.

    mcp-resili run --agent-cmd "python examples/harnesses/anthropic_loop.py" \
        --faults resilibench --llm-faults llm:medium
"""

from __future__ import annotations

import asyncio
import os
import re

from anthropic import AsyncAnthropic
from mcp import Client


def tool_name(tool: str) -> str:
    """An MCP tool name as an Anthropic tool name (``[a-zA-Z0-9_-]{1,64}``)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", tool)[:64]


async def main() -> None:
    prompt = os.environ["MCP_RESILI_TASK_PROMPT"]
    model = os.environ["MCP_RESILI_MODEL"]
    turns = int(os.environ.get("MCP_RESILI_MAX_TURNS", "20"))
    llm = AsyncAnthropic()  # ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY from the environment
    async with Client(os.environ["MCP_RESILI_MCP_URL"]) as mcp:
        listed = (await mcp.list_tools()).tools
        names = {tool_name(t.name): t.name for t in listed}
        tools = [
            {"name": tool_name(t.name), "description": t.description or "", "input_schema": t.input_schema}
            for t in listed
        ]
        messages: list[dict] = [{"role": "user", "content": prompt}]
        for _ in range(turns):
            async with llm.messages.stream(
                model=model, max_tokens=1024, messages=messages, tools=tools
            ) as stream:
                reply = await stream.get_final_message()
            content = []
            for block in reply.content:
                if block.type == "text":
                    content.append({"type": "text", "text": block.text})
                elif block.type == "tool_use":
                    content.append(
                        {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
                    )
            messages.append({"role": "assistant", "content": content})
            uses = [b for b in reply.content if b.type == "tool_use"]
            if not uses:
                print("".join(b.text for b in reply.content if b.type == "text"))
                return
            results, finished = [], False
            for use in uses:
                tool = names.get(use.name, use.name)
                result = await mcp.call_tool(tool, use.input if isinstance(use.input, dict) else {})
                text = "\n".join(c.text for c in result.content if c.type == "text")
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "content": text,
                        "is_error": bool(result.is_error),
                    }
                )
                finished = finished or (tool == "finish" and not result.is_error)
            messages.append({"role": "user", "content": results})
            if finished:
                print("task completed")
                return


if __name__ == "__main__":
    asyncio.run(main())
