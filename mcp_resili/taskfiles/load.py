"""Reading task files: a suite directory (``suite.toml`` plus one ``*.toml`` per task) or one task file.

Every problem is one line naming the file and the place (`TaskFileError` carries them all), so a user
fixes a directory in one pass. Nothing here starts a server: `mcp_resili.taskfiles.check` does that.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

from jsonschema import Draft202012Validator
from pydantic import TypeAdapter, ValidationError

from mcp_resili.constants import FINISH_TOOL
from mcp_resili.errors import UserError
from mcp_resili.taskfiles.model import (
    NAMESPACE_SEPARATOR,
    FileTask,
    GoldStep,
    ServerDef,
    SuiteFile,
    TaskFile,
    level_complexity,
    suite_file_schema,
    task_file_schema,
)
from mcp_resili.tasks.model import (
    Binding,
    ConstantBinding,
    StepBinding,
    TaskConstraints,
    Workflow,
    WorkflowStep,
)

SUITE_FILE = "suite.toml"
_BINDING: TypeAdapter[Binding] = TypeAdapter(Binding)


class TaskFileError(UserError):
    """Task files with problems: one line per problem (``FILE: WHERE: WHAT``)."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class TaskDirectory:
    """A loaded suite directory (or single task file): its settings and its tasks, in file order."""

    root: Path
    settings: SuiteFile
    tasks: tuple[FileTask, ...]
    #: Every server definition the tasks use, by name (the suite's and the tasks' own).
    servers: dict[str, ServerDef] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The suite's name: ``suite.toml``'s, else the directory's absolute path."""
        return self.settings.name or str(self.root)


@cache
def _validator(kind: str) -> Draft202012Validator:
    schema = task_file_schema() if kind == "task" else suite_file_schema()
    return Draft202012Validator(schema)


def _schema_problems(origin: str, raw: Any, kind: str) -> list[str]:
    problems = []
    for error in sorted(_validator(kind).iter_errors(raw), key=lambda e: list(map(str, e.absolute_path))):
        where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
        problems.append(f"{origin}: {where}: {message}")
    return problems


def _pydantic_problems(origin: str, exc: ValidationError) -> list[str]:
    problems = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{origin}: {where}: {message}")
    return problems


def _read_toml(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), None
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{path}: cannot read: {exc}"
    except tomllib.TOMLDecodeError as exc:
        return None, f"{path}: not valid TOML: {exc}"


def load_directory(path: Path | str) -> TaskDirectory:
    """Load a suite directory or a single task file; `TaskFileError` lists every problem found."""
    root = Path(path).expanduser().resolve()
    if not root.exists():
        raise TaskFileError([f"{root}: no such directory or file"])
    problems: list[str] = []
    settings = SuiteFile()
    if root.is_dir():
        suite_path = root / SUITE_FILE
        task_paths = sorted(p for p in root.glob("*.toml") if p.name != SUITE_FILE)
        if suite_path.is_file():
            settings = _load_settings(suite_path, problems)
        if not task_paths:
            problems.append(f"{root}: no task files (*.toml besides {SUITE_FILE})")
    else:
        task_paths = [root]
        if (root.parent / SUITE_FILE).is_file():
            settings = _load_settings(root.parent / SUITE_FILE, problems)
    suite_root = root if root.is_dir() else root.parent
    tasks: list[FileTask] = []
    servers: dict[str, ServerDef] = {}
    seen: dict[str, Path] = {}
    for task_path in task_paths:
        task = _load_task(task_path, settings, problems)
        if task is None:
            continue
        if task.id in seen:
            problems.append(f"{task_path}: id: task id {task.id!r} is also the id of {seen[task.id]}")
            continue
        seen[task.id] = task_path
        for name, server in task.servers.items():
            if servers.get(name, server) != server:
                problems.append(
                    f"{task_path}: servers.{name}: differs from another task's server {name!r}; "
                    "give it another name"
                )
            servers[name] = server
        tasks.append(task)
    for lock in [settings.npm_lock, *settings.pip_locks.values()]:
        if lock is not None and not (suite_root / lock).exists():
            problems.append(f"{suite_root / SUITE_FILE}: lock file {lock!r} does not exist")
    if problems:
        raise TaskFileError(problems)
    return TaskDirectory(
        root=suite_root if root.is_dir() else root, settings=settings, tasks=tuple(tasks), servers=servers
    )


def _load_settings(path: Path, problems: list[str]) -> SuiteFile:
    raw, problem = _read_toml(path)
    if problem is not None:
        problems.append(problem)
        return SuiteFile()
    found = _schema_problems(str(path), raw, "suite")
    if found:
        problems.extend(found)
        return SuiteFile()
    try:
        return SuiteFile.model_validate(raw)
    except ValidationError as exc:
        problems.extend(_pydantic_problems(str(path), exc))
        return SuiteFile()


def _load_task(path: Path, settings: SuiteFile, problems: list[str]) -> FileTask | None:
    raw, problem = _read_toml(path)
    if problem is not None:
        problems.append(problem)
        return None
    origin = str(path)
    found = _schema_problems(origin, raw, "task")
    if found:
        problems.extend(found)
        return None
    try:
        spec = TaskFile.model_validate(raw)
    except ValidationError as exc:
        problems.extend(_pydantic_problems(origin, exc))
        return None
    before = len(problems)
    task = _build_task(spec, path, settings, problems)
    return task if len(problems) == before else None


def _build_task(spec: TaskFile, path: Path, settings: SuiteFile, problems: list[str]) -> FileTask | None:
    origin = str(path)

    def problem(where: str, what: str) -> None:
        problems.append(f"{origin}: {where}: {what}")

    servers: dict[str, ServerDef] = {}
    for name in spec.uses:
        server = spec.servers.get(name) or settings.servers.get(name)
        if server is None:
            known = sorted({*settings.servers, *spec.servers}) or ["none"]
            problem(
                "uses",
                f"server {name!r} is defined neither here nor in {SUITE_FILE} (defined: {', '.join(known)})",
            )
            continue
        servers[name] = server
    _check_fixture_paths(spec, problem)
    steps, edges, alternatives = _workflow(spec, servers, problem)
    step_ids = {s.id for s in steps}
    for where, names in (
        ("gold.reads", spec.gold.reads if spec.gold else ()),
        ("faults.steps", spec.faults.steps or ()),
    ):
        for name in names:
            if name not in step_ids:
                problem(where, f"no ground-truth step {name!r}")
    for index, verifier in enumerate(spec.verify):
        tool = getattr(verifier, "tool", None)
        for glob in (tool, getattr(verifier, "before", None)):
            if glob is not None and NAMESPACE_SEPARATOR not in glob and glob != FINISH_TOOL:
                problem(
                    f"verify.{index}",
                    f"tool {glob!r} is not namespaced (write SERVER.TOOL, e.g. fs.write_file)",
                )
        for key in ("matches",):
            pattern = getattr(verifier, key, None)
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    problem(f"verify.{index}.{key}", f"not a regular expression: {exc}")
    if problems and problems[-1].startswith(origin):
        return None
    verifiers = tuple(_with_default_db(v, spec) for v in spec.verify)
    tools = list(dict.fromkeys(s.tool for s in steps))
    fault_steps = spec.faults.steps
    if fault_steps is None:
        fault_steps = tuple(s.id for s in steps if s.tool != FINISH_TOOL)
    task_id = spec.id or path.stem
    description = spec.description or spec.prompt.strip().splitlines()[0][:200]
    try:
        return FileTask(
            id=task_id,
            suite="taskfiles",
            task_type=spec.task_type if spec.task_type != "task" else spec.level,
            complexity=spec.complexity or level_complexity(spec.level),  # type: ignore[arg-type]
            description=description,
            required_tools=tuple(tools),
            workflow=Workflow(steps=tuple(steps), edges=tuple(edges)),
            constraints=TaskConstraints(timeout=spec.budget.timeout, max_turns=spec.budget.max_turns),
            metadata={"level": spec.level, "tags": list(spec.tags), "servers": list(spec.uses)},
            servers=servers,
            prompt=spec.prompt,
            fixture=spec.fixture,
            verifiers=verifiers,
            alternatives=alternatives,
            reads=spec.gold.reads if spec.gold else (),
            fault_steps=fault_steps,
            source=origin,
        )
    except (ValidationError, ValueError) as exc:
        if isinstance(exc, ValidationError):
            problems.extend(_pydantic_problems(origin, exc))
        else:
            problem("gold", str(exc))
        return None


def _with_default_db(verifier: Any, spec: TaskFile) -> Any:
    """A sql verifier naming no database reads the task's only fixture database, if it has one."""
    if getattr(verifier, "kind", None) != "sql" or "db" in verifier.model_fields_set:
        return verifier
    if len(spec.fixture.sqlite) == 1:
        return verifier.model_copy(update={"db": spec.fixture.sqlite[0].path})
    return verifier


def _check_fixture_paths(spec: TaskFile, problem: Any) -> None:
    fixture = spec.fixture
    paths = [("fixture.files", f.path) for f in fixture.files]
    paths += [("fixture.sqlite", s.path) for s in fixture.sqlite]
    paths += [("fixture.git", g.path) for g in fixture.git]
    if fixture.memory is not None:
        paths.append(("fixture.memory", fixture.memory.path))
    for index, verifier in enumerate(spec.verify):
        for key in ("path", "db", "repo"):
            value = getattr(verifier, key, None)
            if isinstance(value, str):
                paths.append((f"verify.{index}.{key}", value))
    for where, raw in paths:
        reason = unsafe_path(raw)
        if reason is not None:
            problem(where, f"{raw!r}: {reason}")


def unsafe_path(raw: str) -> str | None:
    """Why a fixture or verifier path could reach outside the episode's directories, or None."""
    text = raw.removeprefix("{state}/")
    pure = PurePosixPath(text)
    if not text or pure.is_absolute() or "\\" in text:
        return "give a path relative to the workspace (or under {state}/)"
    if ".." in pure.parts or "{" in text:
        return "a path may not leave the workspace ('..') or use placeholders other than a leading {state}/"
    return None


def _workflow(
    spec: TaskFile, servers: Mapping[str, ServerDef], problem: Any
) -> tuple[list[WorkflowStep], list[tuple[str, str]], dict[str, tuple[Any, ...]]]:
    if spec.gold is None:
        return [], [], {}
    steps: list[WorkflowStep] = []
    edges: list[tuple[str, str]] = []
    alternatives: dict[str, tuple[Any, ...]] = {}
    ids = [s.id for s in spec.gold.steps]
    if len(set(ids)) != len(ids):
        problem("gold.steps", f"step ids must be unique, got {ids}")
        return [], [], {}
    chain = all(s.after is None for s in spec.gold.steps)
    for position, gold in enumerate(spec.gold.steps):
        where = f"gold.steps.{position}"
        for tool in (gold.tool, *(a.tool for a in gold.alternatives)):
            _check_tool(tool, servers, where, problem)
        arguments = _bindings(gold, where, ids[:position], problem)
        after = ids[position - 1 : position] if chain else list(gold.after or ())
        for earlier in after:
            if earlier not in ids[:position]:
                problem(f"{where}.after", f"{earlier!r} is not an earlier step")
        needed = {b.step for b in arguments.values() if isinstance(b, StepBinding)}
        edges.extend((earlier, gold.id) for earlier in dict.fromkeys([*after, *sorted(needed - set(after))]))
        steps.append(WorkflowStep(id=gold.id, tool=gold.tool, arguments=arguments))
        if gold.alternatives:
            alternatives[gold.id] = gold.alternatives
    order = list(dict.fromkeys(s.tool for s in steps))
    for a, b in edges:
        tool_a = next(s.tool for s in steps if s.id == a)
        tool_b = next(s.tool for s in steps if s.id == b)
        if order.index(tool_a) >= order.index(tool_b) and tool_a != tool_b:
            problem(
                "gold.steps",
                f"{tool_b} is called before {tool_a} and again after it: "
                "give each tool one place in the order (split the step or drop the repeat)",
            )
            break
        if tool_a == tool_b:
            problem("gold.steps", f"steps {a!r} and {b!r} call {tool_a} one after the other: merge them")
            break
    return steps, edges, alternatives


def _check_tool(tool: str, servers: Mapping[str, ServerDef], where: str, problem: Any) -> None:
    if tool == FINISH_TOOL:
        return
    server, sep, name = tool.partition(NAMESPACE_SEPARATOR)
    if not sep or not name:
        problem(where, f"tool {tool!r} is not namespaced (write SERVER{NAMESPACE_SEPARATOR}TOOL)")
    elif server not in servers:
        problem(where, f"tool {tool!r} names server {server!r}, which the task does not use")


def _bindings(gold: GoldStep, where: str, earlier: list[str], problem: Any) -> dict[str, Binding]:
    """A step's arguments as bindings: a table with a ``source`` key is one, anything else a constant."""
    bound: dict[str, Binding] = {}
    for name, value in gold.arguments.items():
        if isinstance(value, dict) and "source" in value:
            try:
                binding = _BINDING.validate_python(value)
            except ValidationError as exc:
                problem(f"{where}.arguments.{name}", f"not a binding: {exc.errors()[0]['msg']}")
                continue
            if isinstance(binding, StepBinding) and binding.step not in earlier:
                problem(
                    f"{where}.arguments.{name}", f"binds step {binding.step!r}, which is not an earlier step"
                )
                continue
            bound[name] = binding
        else:
            bound[name] = ConstantBinding(value=value)
    return bound
