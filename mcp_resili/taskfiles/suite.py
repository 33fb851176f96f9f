"""A suite from task files: ``mcp-resili run --suite ./my_tasks/`` plays a directory like any suite."""

from __future__ import annotations

from pathlib import Path

from mcp_resili.registry.suites import Suite
from mcp_resili.taskfiles.environment import TaskEnvironment
from mcp_resili.taskfiles.faults import parse_steps_spec
from mcp_resili.taskfiles.install import Locks
from mcp_resili.taskfiles.load import TaskDirectory, load_directory
from mcp_resili.taskfiles.model import FileTask
from mcp_resili.taskfiles.verify import score
from mcp_resili.tasks.model import Task
from mcp_resili.tools.library import ToolLibrary


def render_prompt(task: Task, variant: str) -> str:
    """The task file's prompt, as written."""
    if not isinstance(task, FileTask):
        raise ValueError(f"task {task.id!r} is not a task-file task")
    return task.prompt.strip()


def locks_of(directory: TaskDirectory) -> Locks:
    """The lock files ``suite.toml`` names, as paths."""
    settings = directory.settings
    root = directory.root if directory.root.is_dir() else directory.root.parent
    return Locks(
        npm=root / settings.npm_lock if settings.npm_lock else None,
        pip={name: root / path for name, path in settings.pip_locks.items()},
    )


def suite_from_directory(directory: TaskDirectory, name: str | None = None) -> Suite:
    """The `Suite` of a loaded task directory; its environment starts the real servers when entered."""
    tasks = tuple(t.model_copy(update={"suite": name or directory.name}) for t in directory.tasks)
    locks = locks_of(directory)
    servers = directory.servers

    def environment() -> TaskEnvironment:
        return TaskEnvironment(tasks, servers, locks=locks)

    return Suite(
        name=name or directory.name,
        description=directory.settings.description,
        library=ToolLibrary(name="taskfiles", specs=(), simulators={}),
        load_tasks=lambda: tasks,
        render_prompt=render_prompt,
        score=score,
        default_faults=directory.settings.default_faults,
        fault_specs={"steps": parse_steps_spec},
        environment=environment,
    )


def suite_from_path(path: str) -> Suite:
    """The suite of the task directory (or task file) at ``path``, named by its absolute path.

    The registry resolves a ``--suite`` that is a path through this function (an entry point).
    """
    directory = load_directory(Path(path))
    return suite_from_directory(directory, name=str(Path(path).expanduser().resolve()))
