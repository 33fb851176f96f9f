"""Our scripted agents as an inspect model provider: ``--model mcp_resili/oracle``, ``mcp_resili/naive``...

They play offline and deterministically, like ``scripted:NAME`` in ``mcp-resili run``: they read the
task's ground truth (found through the sample's store, see `episode`) and the conversation so far.
Every answer carries its token usage (zero), so inspect never counts tokens itself: its default
counter (tiktoken) downloads its tables at run time and fails offline.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    ModelUsage,
    modelapi,
)
from inspect_ai.tool import ToolCall as InspectToolCall
from inspect_ai.tool import ToolChoice, ToolInfo
from inspect_ai.util import store

from mcp_resili.integrations.inspect.episode import EPISODE_KEY, SampleEpisode
from mcp_resili.integrations.inspect.errors import ArgumentError

if TYPE_CHECKING:
    from mcp_resili.agents.model import Message, Model, ToolDefinition, ToolResult


def to_messages(chat: list[ChatMessage]) -> tuple[str | None, list[Message]]:
    """The inspect conversation as our agents read it: (system text, messages).

    Consecutive tool messages become one `ToolResultsMessage`. A successful result's text is our
    server's JSON, parsed back into ``structured`` (inspect keeps only the text of a tool result).
    """
    from mcp_resili.agents.model import AssistantMessage, ToolResultsMessage, UserMessage

    system: list[str] = []
    messages: list[Message] = []
    for message in chat:
        if isinstance(message, ChatMessageSystem):
            system.append(message.text)
        elif isinstance(message, ChatMessageUser):
            messages.append(UserMessage(message.text))
        elif isinstance(message, ChatMessageAssistant):
            messages.append(AssistantMessage(message.text, _calls(message)))
        elif isinstance(message, ChatMessageTool):
            result = _result(message)
            if messages and isinstance(messages[-1], ToolResultsMessage):
                messages[-1] = ToolResultsMessage((*messages[-1].results, result))
            else:
                messages.append(ToolResultsMessage((result,)))
    return ("\n\n".join(system) or None), messages


def _calls(message: ChatMessageAssistant) -> tuple[Any, ...]:
    from mcp_resili.agents.model import ToolCall

    return tuple(ToolCall(c.id, c.function, dict(c.arguments)) for c in message.tool_calls or ())


def _result(message: ChatMessageTool) -> ToolResult:
    from mcp_resili.agents.model import ToolResult

    if message.error is not None:
        return ToolResult(message.tool_call_id or "", message.function or "", message.error.message, True)
    text = message.text
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    structured = parsed if isinstance(parsed, dict) else None
    return ToolResult(message.tool_call_id or "", message.function or "", text, False, structured)


def to_definitions(tools: list[ToolInfo]) -> tuple[ToolDefinition, ...]:
    """The tools inspect offers, as our agents see them."""
    from mcp_resili.agents.model import ToolDefinition

    return tuple(
        ToolDefinition(t.name, t.description, t.parameters.model_dump(exclude_none=True)) for t in tools
    )


class ScriptedAgentAPI(ModelAPI):
    """One of our scripted agents (``model_name``) behind inspect's `ModelAPI`."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),  # noqa: B008 (inspect's own signature)
        **model_args: Any,
    ) -> None:
        super().__init__(model_name, base_url, api_key, [], config)
        from mcp_resili.registry.loader import installed_agents

        agents = installed_agents()
        if model_name not in agents:
            raise ArgumentError(
                f"unknown scripted agent {model_name!r}; one of: "
                + ", ".join(f"mcp_resili/{n}" for n in sorted(agents))
            )
        self.agent: Model = agents[model_name]()

    async def count_text_tokens(self, text: str) -> int:
        """A rough count (4 characters a token): inspect's default needs tiktoken's downloaded tables."""
        return max(1, len(text) // 4)

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        """The agent's next turn in the sample's episode."""
        from mcp_resili.agents.model import ModelRequest
        from mcp_resili.registry.loader import get_suite

        episode = SampleEpisode.from_store(store().get(EPISODE_KEY))
        system, messages = to_messages(input)
        request = ModelRequest(
            messages=tuple(messages),
            tools=to_definitions(tools),
            system=system,
            task=get_suite(episode.suite).task(episode.task),
            max_turns=episode.max_turns,
        )
        response = await self.agent.generate(request)
        calls = [
            InspectToolCall(id=c.id, function=c.name, arguments=c.arguments) for c in response.tool_calls
        ]
        message = ChatMessageAssistant(
            content=response.text, tool_calls=calls or None, model=self.model_name, source="generate"
        )
        return ModelOutput(
            model=self.model_name,
            choices=[ChatCompletionChoice(message=message, stop_reason="tool_calls" if calls else "stop")],
            usage=ModelUsage(
                input_tokens=response.input_tokens,
                output_tokens=response.output_tokens,
                total_tokens=response.input_tokens + response.output_tokens,
            ),
        )


@modelapi(name="mcp_resili")
def scripted_agents() -> type[ModelAPI]:
    """The provider of ``mcp_resili/NAME`` models: our scripted agents (``oracle``, ``naive``, ...)."""
    return ScriptedAgentAPI
