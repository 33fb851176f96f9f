"""An `openai-agents` agent on the episode's MCP server, for `run --agent-cmd`.

Install it with ``pip install 'mcp-resili[frameworks]'``.

It reads only the contract's environment (docs/harnesses.md). The model is Chat Completions through the
SDK's own client (OPENAI_BASE_URL / OPENAI_API_KEY); the MCP server is the episode's Streamable HTTP
URL. The run stops at the `finish` tool, as the task asks.

    mcp-resili run --agent-cmd "python examples/harnesses/openai_agents_agent.py" \
        --faults resilibench --llm-faults llm:medium
"""

from __future__ import annotations

import asyncio
import os

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI


async def main() -> None:
    set_tracing_disabled(True)  # nothing leaves the machine
    turns = int(os.environ.get("MCP_RESILI_MAX_TURNS", "20"))
    server = MCPServerStreamableHttp(
        {"url": os.environ["MCP_RESILI_MCP_URL"]}, client_session_timeout_seconds=60
    )
    async with server:
        agent = Agent(
            name="mcp-resili",
            instructions="Do the task with the tools. Call `finish` when it is done or cannot be done.",
            model=OpenAIChatCompletionsModel(
                model=os.environ["MCP_RESILI_MODEL"], openai_client=AsyncOpenAI()
            ),
            mcp_servers=[server],
            tool_use_behavior={"stop_at_tool_names": ["finish"]},
        )
        # The call budget counts finish: with the run stopping at finish, one model turn per call.
        result = await Runner.run(agent, os.environ["MCP_RESILI_TASK_PROMPT"], max_turns=turns)
        print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
