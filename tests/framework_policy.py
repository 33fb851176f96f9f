"""The scripted model every framework test plugs into its framework: the runner's oracle, seen from outside.

Each agent framework talks to our server its own way (its MCP client, its message format, its way of
surfacing ``isError``). What it hands its model is reduced here to tool descriptions and a history of
(tool, arguments, result text, error?), from which `GroundTruthPolicy` decides the next call exactly as
the runner's scripted oracle would: so an episode played through a framework can score as the runner's
episode of the same task, trial and seed. In handle mode (a stateless client on HTTP) the policy reads the
tool descriptions to start an episode and pass its handle, as a model would.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_resili.agents.model import (
    AssistantMessage,
    ModelRequest,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)
from mcp_resili.agents.scripted import OracleAgent
from mcp_resili.client.plan import RunConfig
from mcp_resili.client.runner import execute
from mcp_resili.registry.loader import get_suite
from mcp_resili.scoring.coping import score_episode
from mcp_resili.tasks.model import Task
from mcp_resili.trace import Trace


@dataclass(frozen=True)
class Step:
    """One call the framework made and what came back (text as the framework showed it)."""

    name: str
    arguments: Mapping[str, Any]
    text: str
    is_error: bool


@dataclass(frozen=True)
class Action:
    """The policy's next move: a tool call, or ``name=None`` to stop (the run ends with text)."""

    name: str | None
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolView:
    """A tool as the framework offered it: name, description, input schema."""

    name: str
    description: str
    schema: Mapping[str, Any]


def structured(text: str) -> dict[str, Any] | None:
    """A success result's structured content, read back from its text (our server's text is its JSON)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class GroundTruthPolicy:
    """The oracle's next call from what a model would see; stops after the task's turn budget."""

    def __init__(self, task: Task, *, start_arguments: Mapping[str, Any] | None = None) -> None:
        self.task = task
        self.start_arguments = dict(start_arguments or {})
        self.oracle = OracleAgent()
        self.budget = task.constraints.max_turns

    @staticmethod
    def start_tool(tools: Sequence[ToolView]) -> ToolView | None:
        found = [t for t in tools if "before any other tool" in t.description]
        return found[0] if found else None

    @staticmethod
    def handle_argument(tools: Sequence[ToolView], start: ToolView) -> str:
        names: set[str] | None = None
        for tool in tools:
            if tool.name == start.name:
                continue
            props = tool.schema.get("properties") or {}
            named = {n for n, p in props.items() if start.name in str((p or {}).get("description", ""))}
            names = named if names is None else names & named
        assert names is not None and len(names) == 1, names
        return names.pop()

    async def next(self, tools: Sequence[ToolView], history: Sequence[Step]) -> Action:
        """The next call (or stop), from the tools offered and the history so far."""
        start = self.start_tool(tools)
        handle: tuple[str, str] | None = None
        work = list(history)
        if start is not None:
            started = [s for s in history if s.name == start.name and not s.is_error]
            if not started:
                return Action(start.name, dict(self.start_arguments))
            argument = self.handle_argument(tools, start)
            # In the result's text (a line ``episode_handle: ...``), or its structured form, which some
            # frameworks show their model instead.
            match = re.search(rf"^{re.escape(argument)}: (\S+)$", started[0].text, re.MULTILINE)
            value = match.group(1) if match else (structured(started[0].text) or {}).get(argument)
            assert isinstance(value, str), started[0].text
            handle = (argument, value)
            work = [s for s in history if s.name != start.name]
        if any(s.name == "finish" and not s.is_error for s in work) or len(work) >= self.budget:
            return Action(None)
        messages: list[Any] = [UserMessage("task")]
        for n, step in enumerate(work):
            arguments = {k: v for k, v in step.arguments.items() if handle is None or k != handle[0]}
            call = ToolCall(id=f"c{n}", name=step.name, arguments=arguments)
            messages.append(AssistantMessage("", (call,)))
            result = ToolResult(
                f"c{n}", step.name, step.text, step.is_error, None if step.is_error else structured(step.text)
            )
            messages.append(ToolResultsMessage((result,)))
        offered = tuple(ToolDefinition(t.name, t.description, dict(t.schema)) for t in tools)
        response = await self.oracle.generate(
            ModelRequest(messages=tuple(messages), tools=offered, task=self.task, max_turns=self.budget)
        )
        (call,) = response.tool_calls
        arguments = dict(call.arguments)
        if handle is not None:
            arguments[handle[0]] = handle[1]
        return Action(call.name, arguments)


def is_error_text(text: str) -> bool:
    """Whether a result text is one of our server's error results (frameworks that hide ``isError``)."""
    return text.startswith("Error ")


#: Runner scores already computed in this process: (suite, faults, task, trial, seed) -> score.
_RUNNER: dict[tuple[str, str, str, int, int], Any] = {}


async def runner_score(suite: str, faults: str, task: str, trial: int, seed: int, db: Any) -> Any:
    """The score the runner's scripted oracle gets for this task, trial and seed (in process)."""
    key = (suite, faults, task, trial, seed)
    if key not in _RUNNER:
        run = await execute(
            RunConfig(
                suite=suite,
                models=("scripted:oracle",),
                faults=(faults,),
                tasks=(task,),
                trials=trial + 1,
                seed=seed,
                db=db,
                stop_rules="none",
                time_scale=0,
            )
        )
        (row,) = [r for r in run.rows if r.trial == trial]
        _RUNNER[key] = row
    return _RUNNER[key]


def traced_score(suite_name: str, trace_path: Any) -> tuple[Trace, Any]:
    """A trace file written by ``serve --trace-dir`` and its score, as ``mcp-resili score`` gives it."""
    suite = get_suite(suite_name)
    trace = Trace.read(trace_path)
    assert trace.header.task is not None
    return trace, score_episode(suite, suite.task(trace.header.task), trace)
