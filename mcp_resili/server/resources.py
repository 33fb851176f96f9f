"""A suite's tasks as MCP resources, and completion of task ids and prompt variants.

Each task is two read-only resources: its prompt (what the agent is asked, the baseline variant) and its
task file (the task's public part: id, type, complexity, description, inputs, constraints; never the
ground truth, the expected outputs or the metadata, which hold the answer key). An episode bound to a
task lists that task's resources; a request with no task lists the suite's tasks, paginated. Reading a
resource changes nothing: it is not a tool call, takes no fault decision and binds no task.

Completion (``completion/complete``): a prompt's ``variant`` argument (the suite's variants), and the
``task`` argument of the resource templates (task ids by prefix).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from mcp_resili.registry.suites import Suite, UnknownTaskError
from mcp_resili.tasks.model import Task

#: Tasks per ``resources/list`` page (two resources each).
RESOURCE_PAGE_TASKS = 50
#: Most completion values returned at once (the spec's cap).
MAX_COMPLETIONS = 100
#: The task fields a resource shows: the public part of a task (no ground truth, no answer key).
PUBLIC_FIELDS = ("id", "suite", "task_type", "complexity", "description", "inputs", "constraints")
_KINDS = {"prompt": "text/markdown", "task.json": "application/json"}


class TaskResources:
    """The resources of one suite's tasks (``serve --task`` shows only that task)."""

    def __init__(self, suite: Suite, fixed_task: Task | None = None) -> None:
        self.suite = suite
        self.fixed_task = fixed_task
        self._prefix = f"mcp-resili://{suite.name}/tasks/"
        self._uri = re.compile(rf"^{re.escape(self._prefix)}(?P<task>[^/]+)/(?P<kind>prompt|task\.json)$")

    def uri(self, task_id: str, kind: str) -> str:
        """The URI of a task's ``prompt`` or ``task.json``."""
        return f"{self._prefix}{task_id}/{kind}"

    def _resources(self, task: Task) -> list[types.Resource]:
        return [
            types.Resource(
                uri=self.uri(task.id, "prompt"),
                name=f"{task.id} prompt",
                description=f"The prompt of task {task.id} ({task.task_type}, {task.complexity})",
                mime_type=_KINDS["prompt"],
                annotations=types.Annotations(audience=["user", "assistant"]),
            ),
            types.Resource(
                uri=self.uri(task.id, "task.json"),
                name=f"{task.id} task",
                description=f"Task {task.id}: its public part (no ground truth)",
                mime_type=_KINDS["task.json"],
                annotations=types.Annotations(audience=["user"]),
            ),
        ]

    def listing(self, episode_task: Task | None, cursor: str | None) -> types.ListResourcesResult:
        """An episode's task's resources; without one, every task's, paginated."""
        task = episode_task or self.fixed_task
        if task is not None:
            return types.ListResourcesResult(resources=self._resources(task))
        tasks: Sequence[Task] = self.suite.tasks
        try:
            start = int(cursor) if cursor else 0
        except ValueError:
            raise MCPError(types.INVALID_PARAMS, f"invalid cursor {cursor!r}") from None
        if start < 0:
            raise MCPError(types.INVALID_PARAMS, f"invalid cursor {cursor!r}")
        page = tasks[start : start + RESOURCE_PAGE_TASKS]
        end = start + len(page)
        resources = [resource for task in page for resource in self._resources(task)]
        return types.ListResourcesResult(
            resources=resources, next_cursor=str(end) if end < len(tasks) else None
        )

    def templates(self) -> types.ListResourceTemplatesResult:
        """The two templates (a task's prompt, its task file), whose ``task`` argument completes."""
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=self._prefix + "{task}/" + kind,
                    name=f"task {kind}",
                    description=f"A task's {'prompt' if kind == 'prompt' else 'public task file'}",
                    mime_type=mime,
                )
                for kind, mime in _KINDS.items()
            ]
        )

    def read(self, uri: str) -> types.ReadResourceResult:
        """A resource's contents; an unknown one is a JSON-RPC error naming it."""
        match = self._uri.match(uri)
        if match is None:
            raise MCPError(types.INVALID_PARAMS, f"Resource not found: {uri!r} is not a task resource")
        task_id, kind = match["task"], match["kind"]
        if self.fixed_task is not None and task_id != self.fixed_task.id:
            raise MCPError(
                types.INVALID_PARAMS, f"Resource not found: this server plays task {self.fixed_task.id}"
            )
        try:
            task = self.suite.task(task_id)
        except UnknownTaskError as exc:
            raise MCPError(types.INVALID_PARAMS, f"Resource not found: {exc}") from None
        if kind == "prompt":
            text = self.suite.prompt(task)
        else:
            text = json.dumps(public_task(task), indent=2, sort_keys=True)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=_KINDS[kind], text=text)]
        )

    def complete(self, params: types.CompleteRequestParams) -> types.CompleteResult:
        """Values for a prompt's ``variant`` or a template's ``task``; nothing for anything else."""
        ref, argument = params.ref, params.argument
        prefix = argument.value or ""
        values: list[str] = []
        if isinstance(ref, types.PromptReference) and argument.name == "variant" and self._is_task(ref.name):
            values = [v for v in self.suite.variants if v.startswith(prefix)]
        elif (
            isinstance(ref, types.ResourceTemplateReference)
            and ref.uri.startswith(self._prefix)
            and argument.name == "task"
        ):
            values = self._task_ids(prefix)
        shown = values[:MAX_COMPLETIONS]
        return types.CompleteResult(
            completion=types.Completion(values=shown, total=len(values), has_more=len(values) > len(shown))
        )

    def _is_task(self, name: str) -> bool:
        try:
            self.suite.task(name)
        except UnknownTaskError:
            return False
        return True

    def _task_ids(self, prefix: str) -> list[str]:
        if self.fixed_task is not None:
            return [self.fixed_task.id] if self.fixed_task.id.startswith(prefix) else []
        return [summary.id for summary in self.suite.task_summaries if summary.id.startswith(prefix)]


def public_task(task: Task) -> dict[str, Any]:
    """A task's public part: what a task resource shows (never the ground truth or the answer key)."""
    dumped = task.model_dump(mode="json")
    return {name: dumped[name] for name in PUBLIC_FIELDS if name in dumped}
