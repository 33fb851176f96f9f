"""An agent on the older MCP SDK (mcp<2), run from its own venv: smolagents or LangGraph against a server.

    python agent.py smolagents|langgraph --policy URL (--stdio JSON_ARGV | --url MCP_URL)

The framework's own MCP adapter lists the server's tools and calls them; its model is a scripted one
that asks the test process what to do next (``POST URL`` with the tools it was given and its history of
calls and results, answered ``{"name", "arguments"}`` or ``{"name": null}`` to stop). It prints one JSON
line: the final answer and the calls it made. Nothing here imports mcp-resili (it needs mcp 2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.request
from typing import Any


def ask(policy: str, tools: list[dict[str, Any]], history: list[dict[str, Any]]) -> dict[str, Any]:
    body = json.dumps({"tools": tools, "history": history}).encode()
    request = urllib.request.Request(policy, data=body, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        decided: dict[str, Any] = json.loads(answer.read())
        return decided


def is_error_text(text: str) -> bool:
    return text.startswith("Error ")


# --- smolagents --------------------------------------------------------------------------------------


def run_smolagents(policy: str, server: Any) -> dict[str, Any]:
    from smolagents import ToolCallingAgent, ToolCollection
    from smolagents.memory import ActionStep
    from smolagents.models import (
        ChatMessage,
        ChatMessageToolCall,
        ChatMessageToolCallFunction,
        MessageRole,
        Model,
    )

    class Scripted(Model):
        def __init__(self) -> None:
            super().__init__(model_id="scripted")
            self.agent: Any = None

        def history(self) -> list[dict[str, Any]]:
            steps = []
            for step in self.agent.memory.steps:
                if isinstance(step, ActionStep) and step.tool_calls:
                    call = step.tool_calls[0]
                    text = (step.observations if step.error is None else str(step.error)) or ""
                    failed = step.error is not None or is_error_text(text)
                    steps.append(
                        {
                            "name": call.name,
                            "arguments": call.arguments or {},
                            "text": text,
                            "is_error": failed,
                        }
                    )
            return steps

        def generate(
            self,
            messages: Any,
            stop_sequences: Any = None,
            response_format: Any = None,
            tools_to_call_from: Any = None,
            **kwargs: Any,
        ) -> Any:
            tools = [
                {"name": t.name, "description": t.description, "schema": {}} for t in tools_to_call_from or []
            ]
            history = self.history()
            decided = ask(policy, tools, history)
            name = decided["name"] or "final_answer"
            arguments = decided["arguments"] if decided["name"] else {"answer": "done"}
            function = ChatMessageToolCallFunction(name=name, arguments=arguments)
            call = ChatMessageToolCall(id=f"call_{len(history)}", type="function", function=function)
            return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])

    model = Scripted()
    with ToolCollection.from_mcp(server, trust_remote_code=True, structured_output=False) as collection:
        # The adapter declares every MCP argument required (smolagents requires what is not nullable):
        # a call without an optional argument would be refused before it reaches the server. Let the
        # server's own schema decide, as a user of smolagents must.
        for tool in collection.tools:
            for spec in tool.inputs.values():
                spec["nullable"] = True
        agent = ToolCallingAgent(tools=[*collection.tools], model=model, max_steps=100, verbosity_level=0)
        model.agent = agent
        answer = agent.run("Do the task.")
        return {
            "answer": answer,
            "calls": [s["name"] for s in model.history() if s["name"] != "final_answer"],
        }


# --- LangGraph through langchain-mcp-adapters ---------------------------------------------------------


async def run_langgraph(policy: str, connection: dict[str, Any]) -> dict[str, Any]:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_mcp_adapters.tools import load_mcp_tools
    from langgraph.prebuilt import create_react_agent

    offered: list[dict[str, Any]] = []

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            offered[:] = [{"name": t.name, "description": t.description or "", "schema": {}} for t in tools]
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
            calls: dict[str, dict[str, Any]] = {}
            history = []
            for message in messages:
                if isinstance(message, AIMessage):
                    calls.update({c["id"]: c for c in message.tool_calls})
                elif isinstance(message, ToolMessage) and message.tool_call_id in calls:
                    call = calls[message.tool_call_id]
                    content = message.content
                    text = (
                        content
                        if isinstance(content, str)
                        else "".join(
                            str(part.get("text", part)) if isinstance(part, dict) else str(part)
                            for part in content
                        )
                    )
                    failed = message.status == "error" or is_error_text(text)
                    history.append(
                        {"name": call["name"], "arguments": call["args"], "text": text, "is_error": failed}
                    )
            decided = ask(policy, offered, history)
            if decided["name"] is None:
                reply = AIMessage(content="done")
            else:
                reply = AIMessage(
                    content="",
                    tool_calls=[
                        {"name": decided["name"], "args": decided["arguments"], "id": f"call_{len(history)}"}
                    ],
                )
            return ChatResult(generations=[ChatGeneration(message=reply)])

    client = MultiServerMCPClient({"server": connection})
    # One session for the whole run: `client.get_tools()` alone opens a new session (over stdio, a new
    # server process) for every tool call, and each would be an episode of its own.
    async with client.session("server") as session:
        tools = await load_mcp_tools(session)
        agent = create_react_agent(Scripted(), tools)
        state = await agent.ainvoke({"messages": [("user", "Do the task.")]}, {"recursion_limit": 200})
    final = state["messages"][-1]
    called = [c["name"] for m in state["messages"] if isinstance(m, AIMessage) for c in m.tool_calls]
    return {"answer": final.content, "calls": called}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("framework", choices=("smolagents", "langgraph"))
    parser.add_argument("--policy", required=True)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--stdio", help="the server's command line, as a JSON list")
    target.add_argument("--url")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME")}
    if args.framework == "smolagents":
        from mcp import StdioServerParameters

        if args.stdio:
            argv = json.loads(args.stdio)
            server: Any = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
        else:
            server = {"url": args.url, "transport": "streamable-http"}
        result = run_smolagents(args.policy, server)
    else:
        if args.stdio:
            argv = json.loads(args.stdio)
            connection = {"transport": "stdio", "command": argv[0], "args": argv[1:], "env": env}
        else:
            connection = {"transport": "streamable_http", "url": args.url}
        result = asyncio.run(run_langgraph(args.policy, connection))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
