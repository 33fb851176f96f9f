"""The episode environment of task files: real MCP servers behind one pipeline, fresh state per episode.

Episodes run in *slots*: a workspace directory (the only one the servers are pointed at), a private
state directory beside it, a loopback fixture site, and the server processes bound to them. When an
episode opens, it takes a free slot (one whose servers it can reuse, if any), the slot's directories
are emptied and its task's fixture copied in, and servers it lacks are started. A server whose state
lives in the workspace serves episode after episode; one whose state lives in its process
(``reuse = false``, or an episode that called one of its ``stateful_tools``) is retired after the
episode and started afresh when next needed. Servers talk through the proxy's upstream machinery
(`mcp_resili.proxy.upstream`), with an environment of their own: no variable of ours reaches them.

The agent sees one MCP endpoint: every tool namespaced by its server (``fs.read_text_file``), the
episode's servers only, each result as its server wrote it while no fault touched it.
"""

from __future__ import annotations

import logging
import os
import shlex
import tempfile
import weakref
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup, TaskStatus

from mcp_resili.constants import FINISH_TOOL
from mcp_resili.faults import ToolOutcome
from mcp_resili.proxy.upstream import (
    UPSTREAM_ERROR,
    Upstream,
    UpstreamBackend,
    UpstreamError,
    connect_upstream,
    list_all_tools,
    result_text,
    spec_of,
)
from mcp_resili.registry.environment import Episode
from mcp_resili.server.pipeline import result_text as pipeline_text
from mcp_resili.taskfiles.fixtures import GIT_ENV, FixtureError, Templates, site_pages
from mcp_resili.taskfiles.install import Locks, server_argv
from mcp_resili.taskfiles.model import NAMESPACE_SEPARATOR, FileTask, Fixture, ServerDef
from mcp_resili.taskfiles.site import FixtureSite
from mcp_resili.taskfiles.verify import observe
from mcp_resili.tasks.model import Task
from mcp_resili.tools import ToolSpec, ToolState
from mcp_resili.trace import ToolCallEvent
from mcp_resili.trace.codes import TOOL_CRASHED

logger = logging.getLogger(__name__)

#: Where an opened episode keeps its binding in its tool state.
BINDING_KEY = "mcp-resili/taskfiles"
#: Variables a server gets from ours (nothing else: no key or token of ours reaches a server).
_PASSED = ("PATH", "LANG", "LC_ALL", "SYSTEMROOT", "NODE_EXTRA_CA_CERTS")


class EnvironmentError_(RuntimeError):
    """An episode that could not be set up (a server that would not start, a fixture that fails)."""


@dataclass
class ServerProcess:
    """One running server bound to a slot."""

    name: str
    upstream: Upstream
    backend: UpstreamBackend
    #: Its tools by their own (un-namespaced) names.
    tools: dict[str, ToolSpec]
    stop: anyio.Event = field(default_factory=anyio.Event)
    #: It keeps state an episode put in its process: retire it once that episode ends.
    dirty: bool = False

    @property
    def alive(self) -> bool:
        """Whether its connection is still open."""
        return not self.upstream.closed.is_set() and not self.stop.is_set()


@dataclass
class Slot:
    """Directories, a fixture site and the servers bound to them; one episode at a time."""

    index: int
    root: Path
    site: FixtureSite
    processes: dict[str, ServerProcess] = field(default_factory=dict)
    busy: bool = False

    @property
    def workspace(self) -> Path:
        """The directory the servers see."""
        return self.root / "ws"

    @property
    def state(self) -> Path:
        """Private state beside it (a memory file...)."""
        return self.root / "state"


@dataclass
class Binding:
    """An opened episode: its task and slot."""

    task: FileTask
    slot: Slot
    released: bool = False


def namespaced(server: str, tool: str) -> str:
    """``server.tool``: the name an agent sees."""
    return f"{server}{NAMESPACE_SEPARATOR}{tool}"


class TaskEnvironment:
    """The `mcp_resili.registry.environment.EpisodeEnvironment` of a task-file suite."""

    def __init__(
        self,
        tasks: Sequence[FileTask],
        servers: Mapping[str, ServerDef],
        *,
        locks: Locks | None = None,
        site_only: bool = False,
    ) -> None:
        self.tasks = {t.id: t for t in tasks}
        self.servers = dict(servers)
        self.locks = locks or Locks()
        self._stack = AsyncExitStack()
        self._group: TaskGroup | None = None
        self._root: Path | None = None
        self._templates: Templates | None = None
        self._slots: list[Slot] = []
        self._specs: dict[str, ToolSpec] = {}
        self._by_server: dict[str, list[ToolSpec]] = {}
        self._argv: dict[str, list[str]] = {}
        self._opening: dict[str, anyio.Lock] = {}
        #: Slots freed when an episode was dropped without being ended (an idle external agent).
        self._orphaned: list[Slot] = []
        #: Catalog only for these servers (a `tasks check` of one task need not start every server).
        self._site_only = site_only
        #: Seconds each phase took, summed (the benchmark reads them): lay, start, observe, release.
        self.timings: dict[str, float] = {"lay": 0.0, "start": 0.0, "observe": 0.0, "release": 0.0}
        self.starts = 0

    # --- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self._stack.__aenter__()
        try:
            scratch = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-resili-tasks-"))
            self._root = Path(scratch)
            self._templates = Templates(self._root / "templates")
            self._group = await self._stack.enter_async_context(anyio.create_task_group())
            self._stack.push_async_callback(self._shutdown)
            used = sorted({name for task in self.tasks.values() for name in task.servers})
            for name in used:  # installs happen here, once, before any server starts
                server = self.servers[name]
                if server.url is None:
                    self._argv[name] = await anyio.to_thread.run_sync(server_argv, name, server, self.locks)
            await self._catalog(used)
        except BaseException:
            await self._stack.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.__aexit__(None, None, None)

    async def _shutdown(self) -> None:
        for slot in self._slots:
            for process in slot.processes.values():
                process.stop.set()
        assert self._group is not None
        # The task group waits for every server to close its connection (and its process to end).
        for slot in self._slots:
            slot.site.close()

    async def _catalog(self, names: Sequence[str]) -> None:
        """Start every server once (in slot 0, where they stay for reuse) and learn its tools."""
        slot = self._new_slot()
        slot.busy = True
        # Some servers want their state to exist when they start (a git server confined to a repo):
        # slot 0 starts from the first fixture of every kind the tasks have.
        assert self._templates is not None
        await anyio.to_thread.run_sync(
            self._templates.lay,
            "\x00catalog",
            merged_fixture(self.tasks.values()),
            slot.workspace,
            slot.state,
        )
        try:
            async with anyio.create_task_group() as starting:
                for name in names:
                    starting.start_soon(self._ensure, slot, name)
        finally:
            slot.busy = False
        for name in names:
            process = slot.processes[name]
            specs = [_renamed(spec, namespaced(name, spec.name)) for spec in process.tools.values()]
            self._by_server[name] = specs
            self._specs.update({spec.name: spec for spec in specs})
            if not self.servers[name].reuse:
                await self._retire(slot, name)

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """Every namespaced tool of every server the tasks use."""
        return list(self._specs.values())

    def episode_tools(self, task: Task | None) -> Sequence[ToolSpec]:
        """The tools of the task's servers, server by server as the task lists them."""
        if not isinstance(task, FileTask):
            return self.specs
        return [spec for name in task.servers for spec in self._by_server.get(name, ())]

    # --- slots and servers ----------------------------------------------------------------------

    def _new_slot(self) -> Slot:
        assert self._root is not None
        slot = Slot(len(self._slots), self._root / f"slot{len(self._slots)}", FixtureSite())
        slot.workspace.mkdir(parents=True)
        slot.state.mkdir(parents=True)
        self._slots.append(slot)
        return slot

    def _take_slot(self, task: FileTask) -> Slot:
        """A free slot, preferring one whose live servers the task can reuse."""
        free = [s for s in self._slots if not s.busy]
        if not free:
            return self._new_slot()
        return max(free, key=lambda s: (sum(1 for n in task.servers if _usable(s, n)), -s.index))

    def _environment(self, server: ServerDef, slot: Slot) -> dict[str, str]:
        env = {key: os.environ[key] for key in _PASSED if key in os.environ}
        env.update(GIT_ENV)
        env.update(
            {
                "HOME": str(slot.state),
                "TZ": "UTC",
                "HTTP_PROXY": slot.site.proxy_url,
                "HTTPS_PROXY": slot.site.proxy_url,
                "http_proxy": slot.site.proxy_url,
                "https_proxy": slot.site.proxy_url,
                "NO_PROXY": "",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        env.update({key: _fill(value, slot) for key, value in server.env.items()})
        return env

    async def _ensure(self, slot: Slot, name: str) -> None:
        """A live server ``name`` in ``slot`` (started when missing, dead or retired)."""
        if _usable(slot, name):
            return
        old = slot.processes.pop(name, None)
        if old is not None:
            old.stop.set()
        server = self.servers[name]
        assert self._group is not None
        started = anyio.current_time()
        process = await self._group.start(self._serve, slot, name, server)
        self.timings["start"] += anyio.current_time() - started
        self.starts += 1
        slot.processes[name] = process

    async def _serve(
        self, slot: Slot, name: str, server: ServerDef, *, task_status: TaskStatus[ServerProcess]
    ) -> None:
        """Run one server until it is stopped; reports it started once its tools are listed."""
        if server.url is not None:
            target = server.url
            env, cwd = None, None
        else:
            target = shlex.join([_fill(arg, slot) for arg in self._argv[name]])
            env, cwd = self._environment(server, slot), slot.workspace
        async with AsyncExitStack() as stack:
            try:
                # No timer around entering: the connection's own scopes outlive this block. Its read
                # timeout bounds ``initialize``; the listing gets a timer of its own.
                upstream = await stack.enter_async_context(
                    connect_upstream(
                        target,
                        read_timeout_seconds=server.start_timeout,
                        capture_stderr=True,
                        env=env,
                        cwd=cwd,
                    )
                )
                with anyio.fail_after(server.start_timeout):
                    tools = await list_all_tools(upstream.client)
            except (UpstreamError, TimeoutError) as exc:
                reason = str(exc) or "it did not start and list its tools in time"
                raise EnvironmentError_(f"server {name!r} could not start: {reason}") from None
            raw = [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in tools]
            specs = {spec.name: spec for spec in map(spec_of, raw)}
            backend = UpstreamBackend(upstream.client, list(specs.values()), target=f"server {name!r}")
            process = ServerProcess(name, upstream, backend, specs)
            task_status.started(process)
            try:
                await _first(process.stop, upstream.closed)
                await stack.aclose()
            except Exception as exc:  # a server that fails while closing: noted, the run goes on
                logger.info("server %r closed with an error: %r", name, exc)

    async def _retire(self, slot: Slot, name: str) -> None:
        process = slot.processes.pop(name, None)
        if process is not None:
            process.stop.set()

    # --- episodes -------------------------------------------------------------------------------

    async def open_episode(self, episode: Episode) -> None:
        """Take a slot, lay the fixture and start what the task's servers lack (once per episode)."""
        if BINDING_KEY in episode.tool_state or not isinstance(episode.task, FileTask):
            return
        lock = self._opening.setdefault(episode.id, anyio.Lock())
        async with lock:
            if BINDING_KEY in episode.tool_state:
                return
            task = episode.task
            self._reclaim()
            slot = self._take_slot(task)
            slot.busy = True
            try:
                started = anyio.current_time()
                assert self._templates is not None
                await anyio.to_thread.run_sync(
                    self._templates.lay, task.id, task.fixture, slot.workspace, slot.state
                )
                slot.site.serve(site_pages(task.fixture))
                self.timings["lay"] += anyio.current_time() - started
                async with anyio.create_task_group() as starting:
                    for name in task.servers:
                        starting.start_soon(self._ensure, slot, name)
            except BaseException:
                slot.busy = False
                raise
            binding = Binding(task, slot)
            episode.tool_state[BINDING_KEY] = binding
            weakref.finalize(episode, _orphan, self._orphaned, binding)
        self._opening.pop(episode.id, None)

    def run_inline(
        self, spec: ToolSpec, arguments: dict[str, Any], state: ToolState, json_bytes: int | None = None
    ) -> ToolOutcome | None:
        """None: every call to a real server awaits its answer."""
        return None

    async def run(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        state: ToolState,
        meta: Mapping[str, Any] | None = None,
    ) -> ToolOutcome:
        """Forward the call to the episode's own server; its text is kept for the agent."""
        binding = state.get(BINDING_KEY)
        server, _, tool = spec.name.partition(NAMESPACE_SEPARATOR)
        if not isinstance(binding, Binding) or server not in binding.task.servers:
            return ToolOutcome(
                structured=None,
                error_code=TOOL_CRASHED,
                message=f"{spec.name} is not a tool of this episode's servers (the episode was not opened)",
            )
        process = binding.slot.processes.get(server)
        if process is None:
            return ToolOutcome(
                structured=None, error_code=TOOL_CRASHED, message=f"server {server!r} is not running"
            )
        own = process.tools.get(tool) or _renamed(spec, tool)
        if tool in self.servers[server].stateful_tools:
            process.dirty = True
        outcome = await process.backend.run(own, arguments, state)
        if outcome.upstream is not None and not outcome.is_error:
            text = result_text(outcome.upstream)
            structured = outcome.structured
            return ToolOutcome(structured=structured, upstream=outcome.upstream, text=text)
        if outcome.error_code == UPSTREAM_ERROR:
            message = _relative_to_slot(outcome.message, binding.slot)
            return ToolOutcome(
                structured=None, error_code=UPSTREAM_ERROR, message=message, upstream=outcome.upstream
            )
        return outcome

    async def end_episode(self, episode: Episode) -> dict[str, Any] | None:
        """Observe the end state the task's verifiers judge, then free the slot."""
        binding = episode.tool_state.get(BINDING_KEY)
        if not isinstance(binding, Binding) or binding.released:
            return None
        started = anyio.current_time()
        try:
            observed = await anyio.to_thread.run_sync(
                observe, binding.task, binding.slot.workspace, binding.slot.state
            )
        finally:
            self.timings["observe"] += anyio.current_time() - started
            released = anyio.current_time()
            await self._release(binding)
            self.timings["release"] += anyio.current_time() - released
        return observed

    async def _release(self, binding: Binding) -> None:
        binding.released = True
        slot = binding.slot
        for name in list(binding.task.servers):
            process = slot.processes.get(name)
            if process is not None and (process.dirty or not self.servers[name].reuse or not process.alive):
                await self._retire(slot, name)
        slot.busy = False

    def _reclaim(self) -> None:
        """Free the slots of episodes dropped without being ended; their in-process state goes too."""
        while self._orphaned:
            slot = self._orphaned.pop()
            for name in list(slot.processes):
                process = slot.processes[name]
                if process.dirty or not self.servers[name].reuse:
                    slot.processes.pop(name).stop.set()
            slot.busy = False

    def result_text(self, event: ToolCallEvent, outcome: ToolOutcome | None) -> str:
        """The server's own text while no fault replaced it; a text-only result as that text."""
        if outcome is not None and outcome.text is not None and not event.is_error:
            return outcome.text
        result = event.result
        if not event.is_error and isinstance(result, dict) and list(result) == ["text"]:
            return str(result["text"])
        return pipeline_text(event)


def merged_fixture(tasks: Iterable[FileTask]) -> Fixture:
    """The first file, database, repository, memory graph and page of each path among ``tasks``."""
    files: dict[str, Any] = {}
    dbs: dict[str, Any] = {}
    repos: dict[str, Any] = {}
    memory = None
    site: dict[str, Any] = {}
    for task in tasks:
        fixture = task.fixture
        for item in fixture.files:
            files.setdefault(item.path, item)
        for db in fixture.sqlite:
            dbs.setdefault(db.path, db)
        for repo in fixture.git:
            repos.setdefault(repo.path, repo)
        memory = memory or fixture.memory
        for url, page in fixture.site.items():
            site.setdefault(url, page)
    taken = set(dbs) | set(repos)
    kept = tuple(
        f for path, f in files.items() if not any(path == t or path.startswith(f"{t}/") for t in taken)
    )
    return Fixture(
        files=kept, sqlite=tuple(dbs.values()), git=tuple(repos.values()), memory=memory, site=site
    )


def _orphan(orphans: list[Slot], binding: Binding) -> None:
    if not binding.released:
        binding.released = True
        orphans.append(binding.slot)


def _usable(slot: Slot, name: str) -> bool:
    process = slot.processes.get(name)
    return process is not None and process.alive and not process.dirty


def _renamed(spec: ToolSpec, name: str) -> ToolSpec:
    return spec.model_copy(update={"name": name})


def _fill(text: str, slot: Slot) -> str:
    """Fill the placeholders of a server's argument or variable for ``slot``."""
    return (
        text.replace("{workspace}", str(slot.workspace))
        .replace("{state}", str(slot.state))
        .replace("{site_proxy}", slot.site.proxy_url)
    )


async def _first(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as group:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            group.cancel_scope.cancel()

        for event in events:
            group.start_soon(wait, event)


def _relative_to_slot(message: str, slot: Slot) -> str:
    """A server's error as the agent's own relative paths name it, whichever slot the episode ran in.

    Servers echo the absolute path they resolved (``ENOENT: ... open '/tmp/.../slot7/ws/a.csv'``); the
    slot and its temporary root differ from run to run, so the same call would store different rows.
    """
    for directory, shown in ((slot.workspace, "."), (slot.state, "state")):
        for root in dict.fromkeys((str(directory.resolve()), str(directory))):  # as resolved, or not
            message = message.replace(f"{root}{os.sep}", "" if shown == "." else f"{shown}/")
            message = message.replace(root, shown)
    return message


__all__ = ["BINDING_KEY", "FINISH_TOOL", "EnvironmentError_", "FixtureError", "TaskEnvironment", "namespaced"]
