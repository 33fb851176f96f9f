"""The paper's text protocol: a text-only model acts through ``<tool_search>``, ``<tool_info>`` and tags.

`TextProtocolModel` wraps any `Model` (model spec ``text:INNER``, e.g. ``text:scripted:text-oracle``).
The inner model sees no tool definitions, only text: the task prompt plus a protocol preamble, and
after every turn a feedback message in the reference executor's shape ("X executed successfully.
Output: ...", "X failed. Error: ...", "Current progress: N tools executed successfully."). Its
reply is parsed as the reference executor does (paper §4.1, App. A):

1. any ``<tool_search>query</tool_search>`` → one ``search_tools`` call (the rest of the reply is ignored);
2. else any ``<tool_info>name</tool_info>`` → one ``tool_info`` call;
3. else the **first** ``<tool_call>...</tool_call>`` → one tool call (one tool per turn, which the
   paper states and we enforce). The tag holds a tool name, optionally followed by a JSON object of
   arguments. Names match exactly, then case-insensitively, then by substring either way;
4. else no call: with a completion phrase ("task completed", ...) the episode ends as completed;
   otherwise the model gets a "NO ACTION DETECTED" reminder of the syntax and the episode goes on
   (the reply still used a turn), as in the reference executor.

A bare tool name carries no arguments, as in the paper. With ``auto_arguments`` (the default) the
wrapper fills them from the task's ground-truth bindings and the results so far, which is what the
paper's argument-free calls amount to; without it the server answers ``INVALID_INPUT`` naming the
missing parameters.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import ClassVar

from mcp_resili.agents.model import (
    CONTINUE_WITH,
    AssistantMessage,
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResultsMessage,
    UserMessage,
)
from mcp_resili.constants import COMPLETION_PHRASES, DISCOVERY_TOOLS
from mcp_resili.tasks.model import StepBinding, Task, resolve_arguments

SEARCH_TOOL, INFO_TOOL = DISCOVERY_TOOLS
_SEARCH = re.compile(r"<tool_search>(.*?)</tool_search>", re.DOTALL)
_INFO = re.compile(r"<tool_info>(.*?)</tool_info>", re.DOTALL)
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

NO_ACTION = (
    "NO ACTION DETECTED. Act with exactly one tag: <tool_search>keywords</tool_search>, "
    "<tool_info>tool_name</tool_info> or <tool_call>tool_name</tool_call>. "
    'If every step has succeeded, say "Task completed".'
)
PREAMBLE = """\
You act only through these tags, one per response:
- <tool_search>keywords</tool_search> finds tools (e.g. <tool_search>file reader writer</tool_search>)
- <tool_info>tool_name</tool_info> shows a tool's parameters and dependencies
- <tool_call>tool_name</tool_call> executes a tool; arguments may follow the name as a JSON object
Execute only ONE tool per response. When every step has succeeded, say "Task completed"."""


def parse_call(body: str, known: list[str]) -> tuple[str, dict[str, object] | None] | None:
    """(tool name, arguments or None) from a ``<tool_call>`` body, or None for an unknown tool."""
    text = body.strip()
    name, _, rest = text.partition(" ") if not text.startswith("{") else ("", "", text)
    arguments: dict[str, object] | None = None
    if rest.strip():
        try:
            loaded = json.loads(rest)
        except json.JSONDecodeError:
            loaded = None
        if isinstance(loaded, dict):
            if not name:  # {"name": ..., "arguments": {...}}
                name = str(loaded.get("name", ""))
                args = loaded.get("arguments")
                arguments = dict(args) if isinstance(args, dict) else None
            else:
                arguments = loaded
    resolved = _match(name.strip(), known)
    return None if resolved is None else (resolved, arguments)


def _match(name: str, known: list[str]) -> str | None:
    if not name:
        return None
    if name in known:
        return name
    lowered = {k.lower(): k for k in known}
    if name.lower() in lowered:
        return lowered[name.lower()]
    partial = [k for k in known if name.lower() in k.lower() or k.lower() in name.lower()]
    return partial[0] if len(partial) == 1 else None


def _auto_arguments(task: Task | None, tool: str, request: ModelRequest) -> dict[str, object]:
    """The ground-truth arguments of ``tool``'s step, fed with the latest successful upstream results."""
    if task is None:
        return {}
    step = next((s for s in task.workflow.steps if s.tool == tool), None)
    if step is None:
        return {}
    results: dict[str, object] = {}
    tool_of = {s.id: s.tool for s in task.workflow.steps}
    structured = _successes(request)
    for binding in step.arguments.values():
        if isinstance(binding, StepBinding):
            results[binding.step] = structured.get(tool_of[binding.step], {"data": {}})
    return resolve_arguments(step, task.inputs, results)


def _successes(request: ModelRequest) -> dict[str, object]:
    out: dict[str, object] = {}
    for message in request.messages:
        if isinstance(message, ToolResultsMessage):
            for result in message.results:
                if not result.is_error and result.structured is not None:
                    out[result.name] = result.structured
    return out


def _feedback(message: ToolResultsMessage, executed: int) -> str:
    parts = []
    for result in message.results:
        if result.name in DISCOVERY_TOOLS:
            parts.append(result.text)
        elif result.is_error:
            parts.append(f"{result.name} failed.\nError: {result.text}")
        else:
            parts.append(f"{result.name} executed successfully.\nOutput: {result.text}")
    parts.append(
        f"Current progress: {executed} tools executed successfully. Continue with the next step, "
        'or say "Task completed" when every step has succeeded.'
    )
    return "\n\n".join(parts)


def text_conversation(request: ModelRequest) -> tuple[Message, ...]:
    """The conversation as a text-only model sees it: tags in, feedback messages back."""
    out: list[Message] = []
    executed = 0
    for message in request.messages:
        if isinstance(message, UserMessage):
            text = message.text if out else f"{message.text}\n\n{PREAMBLE}"
            out.append(UserMessage(text))
        elif isinstance(message, AssistantMessage):
            out.append(AssistantMessage(message.text))
        else:
            executed += sum(1 for r in message.results if not r.is_error and r.name not in DISCOVERY_TOOLS)
            out.append(UserMessage(_feedback(message, executed)))
    return tuple(out)


@dataclass(frozen=True)
class TextProtocolModel:
    """Runs a text-only model through the tag protocol (see the module docstring)."""

    inner: Model
    auto_arguments: bool = True

    @property
    def name(self) -> str:
        """``text:`` plus the inner model's spec."""
        return f"text:{self.inner.name}"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One turn: ask the inner model (text only), turn its first tag into at most one tool call."""
        inner_request = ModelRequest(
            messages=text_conversation(request),
            tools=(),
            system=request.system,
            task=request.task,
            max_turns=request.max_turns,
        )
        response = await self.inner.generate(inner_request)
        turn = sum(1 for m in request.messages if isinstance(m, AssistantMessage)) + 1
        call = self._action(response.text, request, turn)
        said_done = any(p in response.text.lower() for p in COMPLETION_PHRASES)
        return ModelResponse(
            text=response.text,
            tool_calls=() if call is None else (call,),
            stop_reason="tool_use" if call else response.stop_reason,
            input_tokens=response.input_tokens,
            output_tokens=response.output_tokens,
            extra={} if call is not None or said_done else {CONTINUE_WITH: NO_ACTION},
        )

    def _action(self, text: str, request: ModelRequest, turn: int) -> ToolCall | None:
        if found := _SEARCH.search(text):
            return ToolCall(f"text_{turn}", SEARCH_TOOL, {"query": found.group(1).strip() or "tool"})
        if found := _INFO.search(text):
            return ToolCall(f"text_{turn}", INFO_TOOL, {"name": found.group(1).strip()})
        if found := _CALL.search(text):
            known = [t.name for t in request.tools if t.name not in DISCOVERY_TOOLS]
            parsed = parse_call(found.group(1), known)
            if parsed is None:
                return None
            name, arguments = parsed
            if arguments is None:
                arguments = _auto_arguments(request.task, name, request) if self.auto_arguments else {}
            return ToolCall(f"text_{turn}", name, arguments)
        return None


@dataclass(frozen=True)
class TextOracleAgent:
    """A scripted text-only agent: a search, then ``<tool_call>`` per pending step, then "Task completed".

    It reads only the feedback text (which tools "executed successfully") and the task's ground truth.
    """

    #: It answers without awaiting anything: the episode's time limit runs out only between turns.
    answers_at_once: ClassVar[bool] = True
    name: str = "scripted:text-oracle"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The next tag."""
        if request.task is None:
            raise ValueError(f"{self.name} needs the task's ground truth")
        replies = [m for m in request.messages if isinstance(m, AssistantMessage)]
        if not replies:
            first = request.task.required_tools[0].split("_")[-1]
            return ModelResponse(text=f"I will look for tools first. <tool_search>{first}</tool_search>")
        feedback = " ".join(m.text for m in request.messages if isinstance(m, UserMessage))
        for step in request.task.workflow.steps:
            if f"{step.tool} executed successfully." not in feedback:
                return ModelResponse(text=f"Next step. <tool_call>{step.tool}</tool_call>")
        return ModelResponse(text="All steps succeeded. Task completed.")
