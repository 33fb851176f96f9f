"""A `pydantic-ai` agent on the episode's MCP server, for `run --agent-cmd`.

Install it with ``pip install 'mcp-resili[frameworks]'``.

It reads only the contract's environment (docs/harnesses.md): the model is Chat Completions at
OPENAI_BASE_URL with OPENAI_API_KEY, the MCP server the episode's Streamable HTTP URL. The agent ends
when the model answers in text (after `finish`, as the task asks).

    mcp-resili run --agent-cmd "python examples/harnesses/pydantic_ai_agent.py" \
        --faults resilibench --llm-faults llm:medium
"""

from __future__ import annotations

import asyncio
import os

from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits


async def main() -> None:
    provider = OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    turns = int(os.environ.get("MCP_RESILI_MAX_TURNS", "20"))
    agent = Agent(
        OpenAIChatModel(os.environ["MCP_RESILI_MODEL"], provider=provider),
        instructions="Do the task with the tools. Call `finish` when it is done or cannot be done.",
        toolsets=[MCPToolset(os.environ["MCP_RESILI_MCP_URL"])],
        # A failed tool call goes back to the model as a retry; the default (1) ends the run at a tool's
        # second failure in a row, which transient tool faults cause (docs/harnesses.md).
        retries=turns,
    )
    async with agent:
        result = await agent.run(
            os.environ["MCP_RESILI_TASK_PROMPT"], usage_limits=UsageLimits(request_limit=turns)
        )
    print(result.output)


if __name__ == "__main__":
    asyncio.run(main())
