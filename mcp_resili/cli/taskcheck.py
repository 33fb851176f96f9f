"""``tasks check PATH``: validate task files, then prove each task on its real servers, with no faults.

Per task, three episodes play through the same pipeline a run uses: the ground truth (the scripted
oracle) must pass every verifier; an agent that does nothing must fail one; and where the task
requires reading (``gold.reads``), an agent that writes the expected output without reading must fail
one. A task that breaks any of the three is refused with one line naming why (the verifier whose
check failed). Files that do not validate are one line per problem (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import anyio

from mcp_resili.agents.model import ModelRequest, ModelResponse, ToolCall
from mcp_resili.agents.scripted import OracleAgent, call_results, finish_response
from mcp_resili.client.plan import PlannedEpisode, RunConfig, RunPlan
from mcp_resili.client.session import connect_recorded, play_planned
from mcp_resili.constants import FINISH_TOOL
from mcp_resili.errors import UserError
from mcp_resili.registry.suites import Suite
from mcp_resili.taskfiles.load import TaskFileError, load_directory
from mcp_resili.taskfiles.model import FileTask
from mcp_resili.taskfiles.suite import suite_from_directory
from mcp_resili.taskfiles.verify import judge
from mcp_resili.trace import ToolCallEvent, Trace


@dataclass(frozen=True)
class NothingAgent:
    """Says it is done at once: a task it passes proves nothing."""

    answers_at_once: ClassVar[bool] = True
    name: str = "scripted:nothing"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Finish without a call."""
        return finish_response(1, "completed", "done")


@dataclass(frozen=True)
class BlindWriterAgent:
    """Knows the answer key: makes the ground truth's calls except its reads, then gives its answer."""

    calls: tuple[tuple[str, dict[str, Any]], ...]
    answer: str
    answers_at_once: ClassVar[bool] = True
    name: str = "scripted:blind"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The next remembered call, then ``finish`` with the gold answer."""
        done = len(call_results(request))
        if done < len(self.calls):
            tool, arguments = self.calls[done]
            call = ToolCall(id=f"blind_{done}", name=tool, arguments=arguments)
            return ModelResponse(tool_calls=(call,), stop_reason="tool_use")
        return finish_response(done + 1, "completed", self.answer)


@dataclass
class TaskVerdict:
    """What the check found for one task."""

    task: str
    problems: list[str]

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems


def _blind_calls(task: FileTask, gold: Trace) -> tuple[tuple[tuple[str, dict[str, Any]], ...], str]:
    """The gold run's successful calls minus the reading steps, and its final answer."""
    skipped = {task.workflow.step(step_id).tool for step_id in task.reads}
    calls = tuple(
        (event.tool, dict(event.arguments))
        for event in gold.tool_calls
        if not event.is_error and event.tool not in skipped
    )
    finish = gold.finish
    return calls, finish.summary if finish is not None else "done"


async def _play(plan: RunPlan, task: FileTask, agent: Any, label: str, session: Any) -> Trace:
    client, recorded = session
    planned = PlannedEpisode(model=label, faults="none", task_id=task.id, trial=0)
    row, _ = await play_planned(plan, "check", planned, client, [], {"kind": "none"}, agent, (), recorded)
    return Trace.from_lines(row.trace.splitlines())


async def check_suite(suite: Suite, tasks: Sequence[FileTask]) -> list[TaskVerdict]:
    """Play the three agents on every task (one environment, started once)."""
    config = RunConfig(suite=suite.name, models=("scripted:oracle",), faults=("none",), stop_rules="none")
    plan = RunPlan.resolve(config, suite)
    verdicts = []
    async with connect_recorded(plan, "none") as session:
        for task in tasks:
            verdicts.append(await _check_task(plan, task, session))
    return verdicts


async def _check_task(plan: RunPlan, task: FileTask, session: Any) -> TaskVerdict:
    problems: list[str] = []
    if not task.workflow.steps:
        return TaskVerdict(task.id, ["it has no ground truth ([[gold.steps]]): nothing proves it solvable"])
    gold = await _play(plan, task, OracleAgent(), "scripted:oracle", session)
    failed = [(name, why) for name, ok, why in judge(task, gold) if not ok]
    if failed:
        problems.extend(f"its ground truth fails verifier {name!r}: {why}" for name, why in failed)
        errors = [c for c in gold.tool_calls if c.is_error]
        if errors:
            first = errors[0]
            message = (first.result or {}).get("message", "")
            problems.append(f"first failing gold call: {first.tool}: {str(message)[:200]}")
        return TaskVerdict(task.id, problems)
    nothing = await _play(plan, task, NothingAgent(), "scripted:nothing", session)
    if all(ok for _, ok, _ in judge(task, nothing)):
        problems.append("an agent that does nothing passes every verifier: add one the untouched state fails")
    if task.reads:
        calls, answer = _blind_calls(task, gold)
        blind = await _play(plan, task, BlindWriterAgent(calls, answer), "scripted:blind", session)
        if all(ok for _, ok, _ in judge(task, blind)):
            problems.append(
                f"an agent that skips reading ({', '.join(task.reads)}) and writes the expected output "
                "passes every verifier: add a calls verifier requiring the read"
            )
    return TaskVerdict(task.id, problems)


def tasks_check_command(args: argparse.Namespace) -> int:
    """Validate and prove a task directory; exit 1 when a task is refused, 2 when files are invalid."""
    try:
        directory = load_directory(args.path)
    except TaskFileError as exc:
        for problem in exc.problems:  # one line per problem, all of them
            print(f"mcp-resili: error: {problem}", file=sys.stderr)
        return 2
    if args.tasks:
        unknown = sorted(set(args.tasks) - {t.id for t in directory.tasks})
        if unknown:
            raise UserError(f"no task {', '.join(unknown)} in {directory.root}")
        chosen = tuple(t for t in directory.tasks if t.id in args.tasks)
        used = {name for t in chosen for name in t.servers}
        servers = {n: s for n, s in directory.servers.items() if n in used}
        directory = replace(directory, tasks=chosen, servers=servers)
    suite = suite_from_directory(directory, name=str(directory.root))
    tasks = [t for t in suite.tasks if isinstance(t, FileTask)]
    verdicts = anyio.run(check_suite, suite, tasks)
    for verdict in verdicts:
        if args.json:
            print(json.dumps({"task": verdict.task, "ok": verdict.ok, "problems": verdict.problems}))
        elif verdict.ok:
            print(f"ok      {verdict.task}")
        else:
            for problem in verdict.problems:
                print(f"REFUSED {verdict.task}: {problem}")
    refused = sum(1 for v in verdicts if not v.ok)
    print(f"{len(verdicts) - refused} of {len(verdicts)} tasks pass their checks", file=sys.stderr)
    return 1 if refused else 0


__all__ = ["FINISH_TOOL", "ToolCallEvent", "check_suite", "tasks_check_command"]
