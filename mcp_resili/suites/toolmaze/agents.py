"""Scripted ToolMaze agents, one per recovery behaviour, so every judge branch has a known answer.

Each follows the shortest valid path s* and, when a call fails (an error) or its record looks
wrong (`sanity.anomalies`), applies its policy:

* ``scripted:retry``: call the same tool again (up to 2 retries), then abort;
* ``scripted:switch``: move to the cheapest untried member of the step's alternative group; abort
  when the step has no alternative;
* ``scripted:abort``: abort at once ("Task aborted: …");
* ``scripted:trusting``: retry errors like ``retry`` but never check data (it propagates corruption).

Like the other scripted agents they derive their state from the conversation alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from mcp_resili.agents.model import ModelRequest, ModelResponse, ToolCall
from mcp_resili.agents.scripted import call_results, finish_response, require_task
from mcp_resili.constants import FINISH_TOOL
from mcp_resili.suites.toolmaze.model import PathStep, ToolMazeTask, resolve_path_arguments
from mcp_resili.suites.toolmaze.sanity import anomalies

Policy = Literal["retry", "switch", "abort", "ignore"]
MAX_RETRIES = 2


def _switch(
    task: ToolMazeTask, path: list[tuple[int, PathStep]], pos: int, failed: set[str]
) -> list[tuple[int, PathStep]] | None:
    """``path`` with the failing step's group filled by its cheapest member avoiding ``failed`` tools."""
    number = path[pos][0]
    element = next(e for e in task.chain if e.step == number)
    if not element.is_alternative:
        return None
    group = task.group(str(element.alternative_id))
    members = [m for m in group.members if not failed & {s.tool for s in m}]
    if not members:
        return None
    member = min(members, key=len)
    before = [pair for pair in path if pair[0] < number]
    after = [pair for pair in path if pair[0] > number]
    return [*before, *((number, s) for s in member), *after]


@dataclass(frozen=True)
class ToolMazeAgent:
    """Follows s*; on an error or a suspicious record applies ``on_error`` / ``on_anomaly``."""

    #: It answers without awaiting anything: the episode's time limit runs out only between turns.
    answers_at_once: ClassVar[bool] = True
    name: str
    on_error: Policy
    on_anomaly: Policy

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The next call of the current path, or ``finish``."""
        task = require_task(request, self.name)
        if not isinstance(task, ToolMazeTask):
            raise ValueError(f"{self.name} plays ToolMaze tasks only, got {task.id}")
        pairs = [(c, r) for c, r in call_results(request) if c.name != FINISH_TOOL]
        turn = len(pairs) + 1
        path = task.path_steps()[task.shortest_path_index()]
        done: list[tuple[int, dict[str, Any]]] = []
        retries = 0
        failed: set[str] = set()
        for call, result in pairs:
            problems = [] if result.is_error else anomalies(call.name, call.arguments, result.structured)
            if not result.is_error and (not problems or self.on_anomaly == "ignore"):
                done.append((path[len(done)][0], result.structured or {}))
                retries = 0
                continue
            policy = self.on_error if result.is_error else self.on_anomaly
            why = result.text[:120] if result.is_error else "; ".join(problems)
            if policy == "retry" and retries < MAX_RETRIES:
                retries += 1
                continue
            if policy == "switch":
                failed.add(call.name)
                switched = _switch(task, path, len(done), failed)
                if switched is not None:
                    number = path[len(done)][0]
                    done = [d for d in done if d[0] < number]
                    path, retries = switched, 0
                    continue
            return finish_response(turn, "aborted", f"Task aborted: step {call.name} failed: {why}")
        if len(done) == len(path):
            return finish_response(turn, "completed", f"completed {len(path)} steps")
        number, step = path[len(done)]
        by_step: dict[int, dict[str, Any]] = {}
        for n, record in done:
            by_step[n] = record
        prev = done[-1][1] if done else None
        arguments = resolve_path_arguments(step, task.inputs, prev, by_step)
        call = ToolCall(id=f"call_{turn}_{step.tool}", name=step.tool, arguments=arguments)
        return ModelResponse(tool_calls=(call,), stop_reason="tool_use")


def retry_agent() -> ToolMazeAgent:
    """Retries failures and suspicious data, then aborts."""
    return ToolMazeAgent("scripted:retry", on_error="retry", on_anomaly="retry")


def switch_agent() -> ToolMazeAgent:
    """Switches to an alternative path; aborts where there is none."""
    return ToolMazeAgent("scripted:switch", on_error="switch", on_anomaly="switch")


def abort_agent() -> ToolMazeAgent:
    """Aborts at the first sign of trouble."""
    return ToolMazeAgent("scripted:abort", on_error="abort", on_anomaly="abort")


def trusting_agent() -> ToolMazeAgent:
    """Retries errors, trusts every record."""
    return ToolMazeAgent("scripted:trusting", on_error="retry", on_anomaly="ignore")
