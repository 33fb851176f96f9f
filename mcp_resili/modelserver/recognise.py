"""Which task a conversation is about, read from its prompt (a real model is told only the prompt too).

Scripted agents need the task's ground truth; a request to the model server carries only messages. The
`TaskIndex` knows the prompt of every task of every installed suite in every prompt variant that
takes no parameters, and recognises a conversation by them:

1. **Named**: the ``x-mcp-resili-task`` header (``SUITE/TASK`` or ``TASK``), or the ``task`` of the
   ``x-mcp-resili-episode`` header's JSON form, names it outright.
2. **Whole prompt**: a known prompt found whole in the system text or a user message (whitespace runs
   count as one space, so a harness may re-wrap it; text around it, such as a preamble or Reflexion's
   memory, is allowed). The longest such prompt wins.
3. **First line**: a known prompt's first line found as a line of those texts, when only one task has
   it (a variant with parameters, e.g. ``flawed:missing_step``, keeps the task's first line).

Two tasks with the same prompt and the same ground truth are interchangeable; with different ground
truths the request is refused as ambiguous (name the task with the header). The index is built in two
stages: every suite's default tasks in every variant at first use (under a second), then every task
of every suite in its baseline variant only when a prompt is not found among them (about two seconds
for ResiliBench's 5,040, once per process).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mcp_resili.registry.suites import Suite, SuiteLoadError, UnknownTaskError
from mcp_resili.tasks.model import Task

logger = logging.getLogger(__name__)

#: Header naming the task of a request outright: ``SUITE/TASK`` or a task id.
TASK_HEADER = "x-mcp-resili-task"
#: Shortest line taken as a prompt's first line (a shorter one is too common to tell tasks apart).
MIN_FIRST_LINE = 12
_SPACES = re.compile(r"\s+")


class TaskNotRecognisedError(ValueError):
    """No known task prompt is in the conversation, or more than one task matches it."""


def normalise(text: str) -> str:
    """``text`` with every whitespace run as one space, trimmed."""
    return _SPACES.sub(" ", text).strip()


@dataclass(frozen=True)
class KnownTask:
    """A task of an installed suite."""

    suite: str
    task: Task


@dataclass(frozen=True)
class _Prompt:
    suite: str
    task_id: str
    text: str  # normalised


@dataclass
class TaskIndex:
    """Every installed suite's task prompts, by first line (see the module docstring)."""

    suites: dict[str, Suite] = field(default_factory=dict)
    _by_first_line: dict[str, list[_Prompt]] = field(default_factory=dict)
    _indexed: set[tuple[str, str]] = field(default_factory=set)
    _stage: int = 0
    _recognised: dict[tuple[str, ...], KnownTask] = field(default_factory=dict)

    def prepare(self) -> None:
        """Index the default tasks now (the first stage), rather than at the first request."""
        if self._stage == 0:
            self._grow()

    def named(self, name: str) -> KnownTask:
        """The task ``SUITE/TASK`` (or a task id found in exactly one suite)."""
        suite_name, _, task_id = name.rpartition("/")
        if suite_name:
            if suite_name not in self.suites:
                known = ", ".join(sorted(self.suites)) or "none"
                raise TaskNotRecognisedError(
                    f"unknown suite {suite_name!r} in {TASK_HEADER}; installed: {known}"
                )
            return KnownTask(suite_name, self._task(self.suites[suite_name], task_id))
        found: list[KnownTask] = []
        for suite in self.suites.values():
            try:
                found.append(KnownTask(suite.name, suite.task(task_id)))
            except (UnknownTaskError, SuiteLoadError):
                continue
        if len(found) != 1:
            what = "no installed suite has" if not found else "more than one suite has"
            raise TaskNotRecognisedError(f"{what} task {task_id!r}; name it as SUITE/TASK")
        return found[0]

    @staticmethod
    def _task(suite: Suite, task_id: str) -> Task:
        try:
            return suite.task(task_id)
        except (UnknownTaskError, SuiteLoadError) as exc:
            raise TaskNotRecognisedError(str(exc)) from None

    def recognise(self, texts: Sequence[str]) -> KnownTask:
        """The task whose prompt is in ``texts`` (system text and user messages)."""
        key = tuple(texts)
        hit = self._recognised.get(key)
        if hit is not None:
            return hit
        joined = normalise("\n".join(texts))
        lines = {normalise(line) for text in texts for line in text.splitlines()}
        lines.discard("")
        while True:
            found = self._match(joined, lines)
            if found is not None:
                break
            if not self._grow():
                # Last resort: a harness that re-wrapped the prompt's lines.
                found = self._match(joined, {k for k in self._by_first_line if k in joined})
                break
        if found is None:
            raise TaskNotRecognisedError(
                "no task of an installed suite has a prompt in this conversation; send the task's prompt "
                f"(as `mcp-resili tasks list` shows it) or name the task in the {TASK_HEADER} header"
            )
        if len(self._recognised) >= 4096:
            self._recognised.clear()
        self._recognised[key] = found
        return found

    def _match(self, joined: str, lines: set[str]) -> KnownTask | None:
        candidates = [p for line in lines for p in self._by_first_line.get(line, ())]
        if not candidates:
            return None
        whole = [p for p in candidates if p.text in joined]
        if whole:
            longest = max(len(p.text) for p in whole)
            return self._one([p for p in whole if len(p.text) == longest])
        if len({(p.suite, p.task_id) for p in candidates}) == 1:
            return self._one(candidates)
        return None

    def _one(self, prompts: Iterable[_Prompt]) -> KnownTask:
        """The task of ``prompts``; refused when they are tasks with different ground truths."""
        tasks = {(p.suite, p.task_id) for p in prompts}
        chosen = [KnownTask(suite, self.suites[suite].task(task_id)) for suite, task_id in sorted(tasks)]
        truths = {c.task.workflow.model_dump_json() for c in chosen}
        if len(truths) > 1:
            names = ", ".join(f"{c.suite}/{c.task.id}" for c in chosen[:5])
            raise TaskNotRecognisedError(
                f"the prompt fits more than one task ({names}); name one in the {TASK_HEADER} header"
            )
        return chosen[0]

    def _grow(self) -> bool:
        """Index the next stage (default tasks, then all tasks); False when all are in."""
        if self._stage >= 2:
            return False
        self._stage += 1
        for suite in self.suites.values():
            try:
                tasks = suite.default_tasks if self._stage == 1 else suite.tasks
                for task in tasks:
                    self._add(suite, task)
            except SuiteLoadError as exc:
                logger.warning("suite %s left out of the task index: %s", suite.name, exc)
        return True

    def _add(self, suite: Suite, task: Task) -> None:
        if (suite.name, task.id) in self._indexed:
            return
        self._indexed.add((suite.name, task.id))
        prompts: dict[str, str] = {}
        # Stage 2 indexes the baseline only: other variants keep a task's first line (its key).
        for variant in suite.variants if self._stage == 1 else suite.variants[:1]:
            try:
                raw = suite.prompt(task, variant)
            except Exception:  # a variant that needs parameters, or a suite's bug: that prompt is left out
                continue
            prompts[normalise(raw)] = key_line(raw)
        for text, first in prompts.items():
            if first:
                self._by_first_line.setdefault(first, []).append(_Prompt(suite.name, task.id, text))


def key_line(prompt: str) -> str:
    """The line a prompt is looked up by: its first line long enough to tell tasks apart."""
    lines = [normalise(line) for line in prompt.splitlines()]
    return next((line for line in lines if len(line) >= MIN_FIRST_LINE), "")
