"""Every installed suite as an inspect task: ``inspect eval mcp_resili/SUITE`` (``mcp_resili/toolmaze``...).

A sample is one of the suite's tasks (its id, its prompt); an epoch is a trial (``--epochs 3`` is
``mcp-resili run --trials 3``). Task arguments (``-T NAME=VALUE``):

* ``faults``: the fault SPEC, as ``mcp-resili run --faults`` (default: the suite's). inspect splits a
  ``-T`` value at every comma, so the parts are joined back with commas;
* ``variant``: the prompt variant (default ``baseline``);
* ``all_tasks``: the suite's full task list rather than its default set;
* ``seed`` (fault draws), ``time_scale`` (injected delays; 0 = none), ``max_turns`` (the call budget;
  default: each task's own);
* ``trace_dir``: keep every episode's trace there (created if missing, refused when nothing can be
  written there; default: a temporary directory per sample; the score's metadata holds the trace
  either way). A path with commas is split like ``faults`` and joined back the same way;
* ``server``: by default the task's samples share one server this process starts (loopback HTTP, one
  episode per sample); the URL of a running ``mcp-resili serve --transport http`` shares that one
  instead (its own ``--suite`` and ``--faults`` apply; ``faults`` must not be given); ``process``
  starts a ``mcp-resili serve`` process per sample over stdio (the former way, seconds per sample).

Suites are found through their entry points without importing them, so loading this module (inspect
does so on every run) stays cheap; a suite is imported when its task is built.
"""

from __future__ import annotations

import importlib.metadata
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.solver import TaskState

from mcp_resili.integrations.inspect.episode import EPISODE_KEY, SampleEpisode
from mcp_resili.integrations.inspect.errors import ArgumentError
from mcp_resili.integrations.inspect.scorer import resili_metrics, resili_scorer
from mcp_resili.integrations.inspect.solver import resili_agent

#: `mcp_resili.registry.suites.ENTRY_POINT_GROUP`, read here without importing the registry.
SUITE_ENTRY_POINTS = "mcp_resili.suites"
#: The registered task of every installed suite, by suite name: ``SUITE_TASKS["toolmaze"](faults=...)``
#: builds the task ``inspect eval mcp_resili/toolmaze`` runs (for inspect's Python API).
SUITE_TASKS: dict[str, Callable[..., Task]] = {}


#: How long `-T server`'s address may take to accept a connection before the task is refused.
REACH_TIMEOUT_SECONDS = 10.0


def joined(value: str | list[Any] | None) -> str | None:
    """A ``-T`` value inspect split at its commas, joined back (``a:x=1,y=2`` arrives as two items)."""
    if isinstance(value, list):
        return ",".join(str(part) for part in value)
    return value


def _path(name: str, value: object) -> str | None:
    """A path ``-T`` value as inspect hands it over: a string, or a list it split at the commas.

    inspect reads a ``-T`` value as YAML and then splits a plain string at every comma, so
    ``trace_dir=/tmp/a,b`` arrives as ``["/tmp/a", "b"]``: the parts are joined back with commas,
    which restores the path exactly. A value YAML read as something else (``2024``, ``010``,
    ``true``, a date) is refused, since its text cannot be recovered (``010`` arrives as 8): quote
    such a path (``-T 'trace_dir="010"'``).
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(part, str) for part in value):
        return joined(value)
    raise ValueError(f"-T {name} must be a directory path, got {value!r} (quote it: -T '{name}=\"...\"')")


def _number(name: str, value: object, kind: type[int] | type[float], *, minimum: float | None = 0) -> Any:
    """``value`` as an int/float (>= ``minimum``): inspect's Python API passes strings unchanged."""
    number: int | float | None = None
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            number = kind(value)
        except ValueError:
            number = None
    if number is None or (minimum is not None and number < minimum):
        what = "an integer" if kind is int else "a number"
        bound = "" if minimum is None else f" >= {minimum:g}"
        raise ValueError(f"-T {name} must be {what}{bound}, got {value!r}")
    return number


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"-T {name} must be true or false, got {value!r}")


def suite_task(
    suite_name: str,
    **arguments: Any,
) -> Task:
    """The inspect task of suite ``suite_name``; every argument is checked here, before any server starts.

    ``arguments`` are the ``-T`` arguments (see the module). A bad one raises `ArgumentError`, one
    line naming it (a server that exits at start would only show inspect's "Connection closed").
    """
    try:
        return _suite_task(suite_name, **arguments)
    except ValueError as exc:  # `UserError`s included
        raise ArgumentError(f"mcp_resili/{suite_name}: {exc}") from None


def _suite_task(
    suite_name: str,
    *,
    faults: str | list[Any] | None = None,
    variant: str = "baseline",
    all_tasks: bool | str = False,
    seed: int | str = 0,
    time_scale: float | str = 1.0,
    max_turns: int | str | None = None,
    trace_dir: str | list[Any] | None = None,
    server: str | None = None,
) -> Task:
    from mcp_resili.faults import parse_fault_spec
    from mcp_resili.faults.rules import check_rule_tools
    from mcp_resili.registry.loader import get_suite, spec_scope

    suite = get_suite(suite_name)
    spec = joined(faults)
    per_sample_process = server == "process"
    if per_sample_process:
        server = None
    if server is not None:
        if not str(server).startswith(("http://", "https://")):
            raise ValueError(
                "-T server must be an http(s):// URL of `mcp-resili serve --transport http` (or "
                f"'process': a serve process per sample), got {server!r}"
            )
        if spec is not None:
            raise ValueError("-T faults does not apply with -T server: the shared server's own --faults do")
        _check_reachable(str(server))
    else:
        spec = spec or suite.default_faults
        plan = parse_fault_spec(spec, spec_scope(suite))
        check_rule_tools(plan, (t.name for t in suite.library.specs), spec, f"suite {suite.name!r}")
    tasks = suite.tasks if _flag("all_tasks", all_tasks) else suite.default_tasks
    samples = [
        Sample(
            id=t.id,
            input=suite.prompt(t, variant),
            metadata={"suite": suite.name, "task_type": t.task_type, "complexity": t.complexity},
        )
        for t in tasks
    ]
    trace_path = _path("trace_dir", trace_dir)
    if trace_path is not None:
        _check_writable(trace_path)
    fields = {
        "suite": suite.name,
        "seed": _number("seed", seed, int, minimum=None),
        "faults": spec,
        "variant": variant,
        "trace_dir": None if trace_path is None else str(Path(trace_path).resolve()),
        "server": server,
        "max_turns": None if max_turns is None else _number("max_turns", max_turns, int, minimum=1),
    }
    return Task(
        dataset=MemoryDataset(samples, name=suite.name),
        solver=resili_agent(fields, _number("time_scale", time_scale, float), per_sample_process),
        scorer=resili_scorer(),
        metrics=resili_metrics(suite.summarize is not None),
        cleanup=remove_temporary_trace,
        metadata={"suite": suite.name, "faults": spec, "variant": variant, "seed": fields["seed"]},
    )


async def remove_temporary_trace(state: TaskState) -> None:
    """Remove the sample's temporary trace directory once it is scored (the score keeps the trace)."""
    import shutil

    raw = state.store.get(EPISODE_KEY)
    if raw is None:
        return
    episode = SampleEpisode.from_store(raw)
    if episode.temporary:
        shutil.rmtree(episode.trace_dir, ignore_errors=True)


def _register(suite_name: str) -> None:
    """Register ``mcp_resili/SUITE``: a task factory whose parameters are the ``-T`` arguments."""

    def create(
        faults: str | list[Any] | None = None,
        variant: str = "baseline",
        all_tasks: bool = False,
        seed: int = 0,
        time_scale: float = 1.0,
        max_turns: int | None = None,
        trace_dir: str | list[Any] | None = None,
        server: str | None = None,
    ) -> Task:
        return suite_task(
            suite_name,
            faults=faults,
            variant=variant,
            all_tasks=all_tasks,
            seed=seed,
            time_scale=time_scale,
            max_turns=max_turns,
            trace_dir=trace_dir,
            server=server,
        )

    create.__name__ = create.__qualname__ = suite_name.replace("-", "_")
    create.__doc__ = f"The mcp-resili suite {suite_name!r} over MCP, with its fault pipeline and scorer."
    SUITE_TASKS[suite_name] = task(name=suite_name)(create)


def installed_suites() -> list[str]:
    """The names of every installed suite (read from entry points; nothing is imported)."""
    return sorted({point.name for point in importlib.metadata.entry_points(group=SUITE_ENTRY_POINTS)})


for _name in installed_suites():
    _register(_name)


def _check_writable(trace_dir: str) -> None:
    """Create ``-T trace_dir`` if need be, and refuse one no trace can be written to, in one line."""
    import tempfile

    try:
        Path(trace_dir).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=trace_dir, prefix=".mcp-resili-probe-"):
            pass
    except OSError as exc:
        raise ValueError(
            f"-T trace_dir: cannot write traces to {trace_dir!r} ({exc.strerror or exc})"
        ) from None


def _check_reachable(url: str) -> None:
    """Refuse a ``-T server`` nothing listens at, before inspect starts samples that would all fail."""
    parsed = urlsplit(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname or "", port), timeout=REACH_TIMEOUT_SECONDS).close()
    except OSError as exc:
        raise ValueError(
            f"-T server: nothing answers at {url} ({exc.strerror or exc}); "
            "start `mcp-resili serve --transport http` there first"
        ) from None
