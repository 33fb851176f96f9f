"""The task file format as data: servers, fixtures, ground truth and end-state verifiers (docs/tasks.md).

A suite directory holds ``suite.toml`` (its name, description, default faults and the ``[servers]`` its
tasks share) and one ``*.toml`` file per task. Everything is validated twice: against the published
JSON Schema (`task_file_schema`, one line per problem) and by these pydantic models (what a schema
cannot say: step ids a binding names, a server a task uses but nobody defines).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mcp_resili.tasks.model import Task, Workflow, WorkflowStep

#: A server name: it prefixes its tools (``fs.read_text_file``), so no dot and nothing a tool name forbids.
SERVER_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"
#: The separator between a server's name and its tool's name in the tools an agent sees.
NAMESPACE_SEPARATOR = "."
#: ``@scope/name@1.2.3`` or ``name@1.2.3``: an exact version (a range would not be reproducible).
NPM_PINNED = r"^(@[a-z0-9][\w.-]*/)?[a-z0-9][\w.-]*@\d+\.\d+\.\d+([-+][\w.-]+)?$"
#: ``name==1.2.3`` (extras allowed): an exact version.
PYPI_PINNED = r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.!+_-]+$"
#: Levels of depth and width (ToolMaze's C1–C4): a chain of 1–2 steps, a longer chain, a DAG with
#: parallel branches, several servers with parallel branches.
LEVELS = ("C1", "C2", "C3", "C4")
_LEVEL_COMPLEXITY = {"C1": "easy", "C2": "medium", "C3": "hard", "C4": "hard"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerDef(_Strict):
    """How to start one MCP server: an npm or PyPI package pinned to a version, a command, or a URL.

    ``args``, ``env`` and ``cwd`` may use ``{workspace}`` (the episode's directory, the only one the
    server should see), ``{state}`` (a private directory beside it, e.g. a memory file) and
    ``{site_proxy}`` (the loopback fixture site as an HTTP proxy: the only network there is).
    """

    npm: str | None = Field(None, pattern=NPM_PINNED)
    pypi: str | None = Field(None, pattern=PYPI_PINNED)
    #: A PyPI server's environment: ``own`` (a virtual environment built on first use, with
    #: ``requirements`` pinned beside it) or ``shared`` (ours: the package must be installed here).
    venv: Literal["own", "shared"] = "own"
    requirements: tuple[Annotated[str, Field(pattern=PYPI_PINNED)], ...] = ()
    #: The executable: an npm package's bin, a PyPI package's console script, or any command.
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = Field(None, pattern=r"^https?://")
    #: Whether one process may serve episode after episode (its state lives in the workspace, which is
    #: rebuilt for each): false starts a fresh process per episode.
    reuse: bool = True
    #: Tools that keep state inside the process: an episode calling one retires the process after it.
    stateful_tools: tuple[str, ...] = ()
    #: Seconds the server may take to start and list its tools.
    start_timeout: float = Field(60.0, gt=0)
    #: A command run once before the server first starts in a process (after it is installed), its
    #: output kept off the MCP stream: for a package that sets itself up on first use (``{python}`` is
    #: the server's Python).
    prepare: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _one_source(self) -> ServerDef:
        given = [k for k in ("npm", "pypi", "url") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"a server is one of npm, pypi, command or url, not {' and '.join(given)}")
        if self.url is None and self.command is None:
            raise ValueError("a server needs a command (the executable to start) or a url")
        if self.url is not None and (self.command or self.args):
            raise ValueError("a url server takes no command or args")
        if self.requirements and self.pypi is None:
            raise ValueError("requirements go with a pypi server")
        if self.prepare and self.url is not None:
            raise ValueError("a url server is not started here: it takes no prepare command")
        return self

    @property
    def kind(self) -> str:
        """``npm``, ``pypi``, ``url`` or ``command``."""
        for kind in ("npm", "pypi", "url"):
            if getattr(self, kind) is not None:
                return kind
        return "command"


class FileFixture(_Strict):
    """A text file of the workspace."""

    path: str
    content: str


class SqliteFixture(_Strict):
    """A SQLite database built from SQL (run with ``executescript``)."""

    path: str = "data.db"
    sql: str


class GitCommit(_Strict):
    """One commit of a fixture repository: files written (and removed), then committed."""

    message: str
    files: dict[str, str] = Field(default_factory=dict)
    remove: tuple[str, ...] = ()
    #: Commit on this branch (created from the current HEAD when new); default the current branch.
    branch: str | None = None


class GitFixture(_Strict):
    """A git repository built by a script: commits in order, then git commands (argument lists)."""

    path: str = "repo"
    default_branch: str = "main"
    commits: tuple[GitCommit, ...] = ()
    #: Further ``git`` invocations (e.g. ``["checkout", "main"]``), run in order, never through a shell.
    script: tuple[tuple[str, ...], ...] = ()
    #: Files left in the working tree, uncommitted.
    uncommitted: dict[str, str] = Field(default_factory=dict)


class MemoryEntity(_Strict):
    """An entity of a knowledge-graph (server-memory) file."""

    name: str
    type: str
    observations: tuple[str, ...] = ()


class MemoryRelation(_Strict):
    """A relation of a knowledge-graph file."""

    source: str = Field(alias="from")
    target: str = Field(alias="to")
    type: str

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class MemoryFixture(_Strict):
    """A memory-graph file (the JSON lines server-memory reads and writes)."""

    path: str = "{state}/memory.jsonl"
    entities: tuple[MemoryEntity, ...] = ()
    relations: tuple[MemoryRelation, ...] = ()


class SitePage(_Strict):
    """One page of the loopback fixture site."""

    body: str
    type: str = "text/html; charset=utf-8"
    status: int = Field(200, ge=100, le=599)


class Fixture(_Strict):
    """The state an episode starts from, built afresh for every episode."""

    files: tuple[FileFixture, ...] = ()
    sqlite: tuple[SqliteFixture, ...] = ()
    git: tuple[GitFixture, ...] = ()
    memory: MemoryFixture | None = None
    #: Pages of the loopback site by URL (``http://HOST/PATH``); anything else is a 404.
    site: dict[str, SitePage] = Field(default_factory=dict)

    @field_validator("site")
    @classmethod
    def _http_urls(cls, site: dict[str, SitePage]) -> dict[str, SitePage]:
        for url in site:
            if not re.match(r"^http://[A-Za-z0-9.-]+(:\d+)?/", url):
                raise ValueError(f"site page {url!r}: give a full http:// URL with a path")
        return site


class GoldCall(_Strict):
    """An alternative call for a step."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class GoldStep(_Strict):
    """One step of the ground truth: a namespaced tool and its argument bindings."""

    id: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    #: Steps this one comes after (default: the previous step, when no step names any).
    after: tuple[str, ...] | None = None
    #: Other calls that do the same step (ToolMaze-style alternative paths, possibly on another server).
    alternatives: tuple[GoldCall, ...] = ()


class GroundTruth(_Strict):
    """The reference workflow; its steps' arguments are bindings (see `binding_of`)."""

    steps: tuple[GoldStep, ...]
    #: Steps whose inputs the task requires reading: an agent that skips them and writes the expected
    #: output blind must fail a verifier (``tasks check`` plays such an agent).
    reads: tuple[str, ...] = ()


class _Verifier(_Strict):
    #: The component name in the score (default: ``KIND:WHAT``).
    name: str | None = None


class FileVerifier(_Verifier):
    """A file of the workspace at the end: its content, or its absence."""

    kind: Literal["file"]
    path: str
    equals: str | None = None
    contains: tuple[str, ...] = ()
    not_contains: tuple[str, ...] = ()
    matches: str | None = None
    #: The file parses as JSON equal to this value.
    json_equals: Any = None
    absent: bool = False
    #: The file still holds exactly its fixture content (a destructive-action trap).
    unchanged: bool = False


class SqlVerifier(_Verifier):
    """A query's rows on a database of the workspace at the end."""

    kind: Literal["sql"]
    db: str = "data.db"
    query: str
    rows: tuple[tuple[Any, ...], ...]
    unordered: bool = False


class GitVerifier(_Verifier):
    """A repository at the end: every assertion given must hold."""

    kind: Literal["git"]
    repo: str = "repo"
    ref: str = "HEAD"
    branch_exists: str | None = None
    current_branch: str | None = None
    log_contains: str | None = None
    commit_count: int | None = Field(None, ge=0)
    #: A file at ``ref``: its content must contain ``file_contains`` / equal ``file_equals``.
    file: str | None = None
    file_contains: str | None = None
    file_equals: str | None = None
    clean: bool | None = None
    #: Exactly these files differ between ``base`` and ``ref``.
    changed_files: tuple[str, ...] | None = None
    base: str | None = None

    @model_validator(mode="after")
    def _asserts_something(self) -> GitVerifier:
        checks = ("branch_exists", "current_branch", "log_contains", "commit_count", "file", "clean")
        if all(getattr(self, k) is None for k in checks) and self.changed_files is None:
            raise ValueError("a git verifier needs at least one assertion")
        if (self.file_contains is not None or self.file_equals is not None) and self.file is None:
            raise ValueError("file_contains/file_equals go with file")
        if self.changed_files is not None and self.base is None:
            raise ValueError("changed_files goes with base (the ref to compare against)")
        return self


class GraphVerifier(_Verifier):
    """A memory-graph file at the end."""

    kind: Literal["graph"]
    path: str = "{state}/memory.jsonl"
    entity: str | None = None
    entity_type: str | None = None
    observation_contains: str | None = None
    #: ``[from, type, to]``.
    relation: tuple[str, str, str] | None = None
    absent_entity: str | None = None
    entity_count: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _asserts_something(self) -> GraphVerifier:
        if all(getattr(self, k) is None for k in ("entity", "relation", "absent_entity", "entity_count")):
            raise ValueError("a graph verifier needs entity, relation, absent_entity or entity_count")
        if (self.entity_type or self.observation_contains) and self.entity is None:
            raise ValueError("entity_type/observation_contains go with entity")
        return self


class AnswerVerifier(_Verifier):
    """The agent's final answer (its ``finish`` summary, else its last words)."""

    kind: Literal["answer"]
    contains: tuple[str, ...] = ()
    matches: str | None = None
    not_contains: tuple[str, ...] = ()
    case_sensitive: bool = False


class CallsVerifier(_Verifier):
    """What the agent called: never, at most or at least N times, before another call."""

    kind: Literal["calls"]
    #: A glob over namespaced tool names (``fs.write_file``, ``db.*``).
    tool: str
    #: Argument values the call must have; a string is a regular expression (searched).
    args: dict[str, Any] = Field(default_factory=dict)
    never: bool = False
    at_most: int | None = Field(None, ge=0)
    at_least: int | None = Field(None, ge=1)
    #: Count only calls that succeeded (default: every attempt counts, except for ``at_least``).
    successful_only: bool | None = None
    #: With ``at_least``: the first such call comes before the first call of this glob.
    before: str | None = None

    @model_validator(mode="after")
    def _one_rule(self) -> CallsVerifier:
        rules = [self.never, self.at_most is not None, self.at_least is not None]
        if sum(rules) != 1:
            raise ValueError("a calls verifier takes exactly one of never, at_most, at_least")
        if self.before is not None and self.at_least is None:
            raise ValueError("before goes with at_least")
        return self


Verifier = Annotated[
    FileVerifier | SqlVerifier | GitVerifier | GraphVerifier | AnswerVerifier | CallsVerifier,
    Field(discriminator="kind"),
]
#: Verifiers judged on the end state, which the environment observes when the episode ends.
STATE_KINDS = frozenset({"file", "sql", "git", "graph"})


class Budget(_Strict):
    """The episode's limits."""

    max_turns: int = Field(default=20, ge=1, le=500)
    timeout: float = Field(default=300, gt=0)


class TaskFaults(_Strict):
    """Where ``steps:P1``–``P4`` strike: these ground-truth steps (default: every step but finish)."""

    steps: tuple[str, ...] | None = None


class TaskFile(_Strict):
    """One task file."""

    id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:-]+$")
    description: str | None = None
    prompt: str = Field(min_length=1)
    #: Server names defined by the suite (``suite.toml``) or here, under ``[servers]``.
    uses: tuple[str, ...] = Field(min_length=1)
    servers: dict[str, ServerDef] = Field(default_factory=dict)
    level: Literal["C1", "C2", "C3", "C4"] = "C1"
    complexity: Literal["easy", "medium", "hard"] | None = None
    task_type: str = "task"
    tags: tuple[str, ...] = ()
    budget: Budget = Field(default_factory=lambda: Budget())
    fixture: Fixture = Field(default_factory=lambda: Fixture())
    gold: GroundTruth | None = None
    verify: tuple[Verifier, ...] = Field(min_length=1)
    faults: TaskFaults = Field(default_factory=lambda: TaskFaults())

    @field_validator("servers")
    @classmethod
    def _server_names(cls, servers: dict[str, ServerDef]) -> dict[str, ServerDef]:
        for name in servers:
            if not re.match(SERVER_NAME, name):
                raise ValueError(f"server name {name!r} must match {SERVER_NAME}")
        return servers


class SuiteFile(_Strict):
    """``suite.toml``: what every task of the directory shares."""

    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = "Tasks on real MCP servers, from task files."
    default_faults: str = "none"
    servers: dict[str, ServerDef] = Field(default_factory=dict)
    #: Where the suite's npm servers come from: a directory (relative to the suite) holding the
    #: ``package.json`` and ``package-lock.json`` that pin them and everything they depend on.
    npm_lock: str | None = None
    #: Per PyPI server with its own environment: a requirements file pinning all of it.
    pip_locks: dict[str, str] = Field(default_factory=dict)

    @field_validator("servers")
    @classmethod
    def _server_names(cls, servers: dict[str, ServerDef]) -> dict[str, ServerDef]:
        return TaskFile._server_names(servers)


class FileTask(Task):
    """A task read from a task file: the generic `Task` plus what its episodes need."""

    servers: dict[str, ServerDef]
    prompt: str
    fixture: Fixture
    verifiers: tuple[Verifier, ...]
    #: Alternative calls per step id (ToolMaze-style alternative paths).
    alternatives: dict[str, tuple[GoldCall, ...]] = Field(default_factory=dict)
    reads: tuple[str, ...] = ()
    #: Step ids where ``steps:P1``–``P4`` strike.
    fault_steps: tuple[str, ...] = ()
    #: Where the task came from (its file), for messages.
    source: str = ""

    def golden_workflows(self) -> tuple[Workflow, ...]:
        """The reference workflow without ``finish``, then one per alternative call of a step."""
        reference = _without_finish(self.workflow)
        found = [reference]
        for step_id, calls in self.alternatives.items():
            for call in calls:
                steps = tuple(
                    WorkflowStep(id=s.id, tool=call.tool, arguments=s.arguments) if s.id == step_id else s
                    for s in reference.steps
                )
                found.append(Workflow(steps=steps, edges=reference.edges))
        return tuple(found)

    def tools_of_step(self, step_id: str) -> tuple[str, ...]:
        """The tools that can do step ``step_id``: its own and its alternatives'."""
        own = self.workflow.step(step_id).tool
        return (own, *(c.tool for c in self.alternatives.get(step_id, ())))


def _without_finish(workflow: Workflow) -> Workflow:
    from mcp_resili.constants import FINISH_TOOL

    kept = tuple(s for s in workflow.steps if s.tool != FINISH_TOOL)
    ids = {s.id for s in kept}
    return Workflow(steps=kept, edges=tuple((a, b) for a, b in workflow.edges if a in ids and b in ids))


def level_complexity(level: str) -> str:
    """The generic complexity of a level."""
    return _LEVEL_COMPLEXITY[level]


def task_file_schema() -> dict[str, Any]:
    """The JSON Schema of a task file (published as ``docs/task-file.schema.json``)."""
    schema = TaskFile.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mcp-resili task file"
    return schema


def suite_file_schema() -> dict[str, Any]:
    """The JSON Schema of ``suite.toml``."""
    schema = SuiteFile.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mcp-resili suite file"
    return schema
