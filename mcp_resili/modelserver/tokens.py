"""Token counts for the scripted model server: deterministic, and of a real tokenizer's order.

A token is a run of word characters or one other non-space character (``{"a": 1}`` is 6). Real BPE
tokenizers give counts of the same order for English and JSON; what matters here is that a harness's
cost accounting sees plausible, reproducible numbers (the same request always costs the same).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from mcp_resili.agents.model import (
    AssistantMessage,
    Message,
    ModelResponse,
    ToolDefinition,
    ToolResultsMessage,
    UserMessage,
)

_TOKEN = re.compile(r"\w+|[^\w\s]")
#: Tokens every message costs besides its text (its role and separators, as real chat formats do).
PER_MESSAGE = 4


def count_tokens(text: str) -> int:
    """The tokens of ``text``."""
    return len(_TOKEN.findall(text))


def input_tokens(system: str, messages: Iterable[Message], tools: Iterable[ToolDefinition]) -> int:
    """The tokens of a request: system text, every message, every tool definition."""
    total = count_tokens(system)
    for message in messages:
        total += PER_MESSAGE
        if isinstance(message, UserMessage):
            total += count_tokens(message.text)
        elif isinstance(message, AssistantMessage):
            total += count_tokens(message.text)
            total += sum(
                count_tokens(c.name) + count_tokens(json.dumps(c.arguments)) for c in message.tool_calls
            )
        elif isinstance(message, ToolResultsMessage):
            total += sum(PER_MESSAGE + count_tokens(r.text) for r in message.results)
    for tool in tools:
        total += (
            count_tokens(tool.name)
            + count_tokens(tool.description)
            + count_tokens(json.dumps(tool.input_schema))
        )
    return total


def output_tokens(response: ModelResponse) -> int:
    """The tokens of an answer: its text and every tool call's name and arguments (at least 1)."""
    calls = sum(count_tokens(c.name) + count_tokens(json.dumps(c.arguments)) for c in response.tool_calls)
    return max(1, count_tokens(response.text) + calls)
