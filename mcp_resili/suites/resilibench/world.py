"""The world an episode's tools act on, and the checks every tool makes against it.

A ResiliBench task defines a small world: the files of its workspace (its input file, plus what its
directory holds), the URL its data lives at, the webhook endpoint, service, queue and recipient it
names, and the values it fixes (every argument its ground truth binds to a task input or a
constant). The suite seeds each episode's tool state with that world (`initial_state`), and every
simulator first checks its arguments against it (`check_call`): a mismatch is one of the tool's
declared errors with a message that names the problem, never an exception and never a silent
success. The checks, per tool, are listed in ``docs/resilibench.md``.

Without a task (a client exploring ``serve`` without naming one) there is no world: only the checks
that need none apply (paths outside the workspace, a declared format that contradicts the content,
an empty payload), and the simulators answer any other path or URL with generated data.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from mcp_resili.fastjson import PLAIN_JSON_ONLY
from mcp_resili.suites.resilibench.simulators import SIMULATORS
from mcp_resili.tasks.model import ConstantBinding, InputBinding, Task, Workflow
from mcp_resili.tools.library import Simulator, ToolFailure, ToolState

#: The tool-state key holding the episode's `World`.
WORLD_KEY = "world"
#: Tools whose ``data`` is text whose ``format`` they interpret (the others treat it as a payload).
TEXT_FORMAT_TOOLS = frozenset(
    {"data_processing_parser", "file_operations_converter", "file_operations_writer"}
)
#: The format a text payload without a ``format`` field is read as (the simulators' default).
DEFAULT_TEXT_FORMAT = "csv"


@dataclass(frozen=True)
class World:
    """What exists in one task's world, and the argument values the task fixes."""

    files: frozenset[str] = frozenset()
    directories: frozenset[str] = frozenset()
    data_urls: frozenset[str] = frozenset()
    endpoints: frozenset[str] = frozenset()
    services: frozenset[str] = frozenset()
    queues: frozenset[str] = frozenset()
    recipients: frozenset[str] = frozenset()
    #: Tool → the argument values each of its workflow steps fixes (one mapping per step).
    fixed: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, workflow: Workflow, inputs: Mapping[str, Any]) -> World:
        """The world of a task with this ground truth and these inputs."""
        fixed: dict[str, list[dict[str, Any]]] = {}
        for step in workflow.steps:
            values: dict[str, Any] = {}
            for name, binding in step.arguments.items():
                if isinstance(binding, InputBinding):
                    values[name] = inputs[binding.key]
                elif isinstance(binding, ConstantBinding):
                    values[name] = binding.value
            fixed.setdefault(step.tool, []).append(values)
        source = _text(inputs.get("source"))
        directories = {d for d in (_text(inputs.get("directory")),) if d}
        if source:
            directories.add(posixpath.dirname(source))
        files = {source} if source else set()
        for directory in directories:
            files.update(list_directory(directory))  # what the scanner lists can be read
        return cls(
            files=frozenset(files),
            directories=frozenset(d for d in directories if d),
            data_urls=_present(inputs.get("url")),
            endpoints=_present(inputs.get("endpoint")),
            services=_present(inputs.get("service")),
            queues=_present(inputs.get("queue")),
            recipients=_present(inputs.get("recipient")),
            fixed={tool: tuple(steps) for tool, steps in fixed.items()},
        )


def list_directory(directory: str) -> list[str]:
    """The files the scanner lists in ``directory`` (they exist in the world: a listed file can be read)."""
    listing = SIMULATORS["file_operations_scanner"]({"source": directory}, {})
    return [str(f) for f in listing["data"]["files"]]


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _present(value: object) -> frozenset[str]:
    return frozenset({value}) if isinstance(value, str) and value else frozenset()


def _show(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def same_json(a: object, b: object) -> bool:
    """JSON equality: 2 equals 2.0, but a boolean is never a number (unlike Python's ``==``)."""
    # Every call's data is compared with the task's, and almost always it is equal: then equal by
    # ``==`` and written alike, which says that no boolean stands for a number (its text differs)
    # without walking the values in Python. A ``null`` is left to the walk: NaN is written so too,
    # and ``==`` takes one NaN object for equal to itself inside a list. So is whatever orjson would
    # not write as plain JSON (`PLAIN_JSON_ONLY`, integers beyond 64 bits, keys that are no
    # strings). A string (most arguments) is settled at once, by the walk's own first rule.
    if type(a) is str:
        return type(b) is str and a == b
    if a == b:
        try:
            text = orjson.dumps(a, option=PLAIN_JSON_ONLY)
            if text.find(b"null") < 0 and text == orjson.dumps(b, option=PLAIN_JSON_ONLY):
                return True
        except TypeError:  # orjson's JSONEncodeError
            pass
    return _same_json_walk(a, b)


def _same_json_walk(a: object, b: object) -> bool:
    # Exact JSON types first; anything else, subclasses included, by the general rule below.
    if type(a) is str:
        return type(b) is str and a == b
    if type(a) is dict and type(b) is dict:
        return a.keys() == b.keys() and all(_same_json_walk(value, b[key]) for key, value in a.items())
    if type(a) is list and type(b) is list:
        return len(a) == len(b) and all(map(_same_json_walk, a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json_walk(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json_walk(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def content_format(content: str) -> str | None:
    """The format text content is written in (xml, json or csv), or None when it is none of them."""
    text = content.lstrip()
    if text.startswith("<"):
        return "xml"
    if text.startswith(("[", "{")):
        try:
            json.loads(text)
        except (ValueError, RecursionError):  # nesting too deep to decode is not usable JSON either
            return None
        return "json"
    first = text.split("\n", 1)[0]
    return "csv" if "," in first else None


# --- the checks -----------------------------------------------------------------------------------


def _outside_workspace(name: str, path: str) -> None:
    """Absolute paths and ``..`` leave the task's workspace: PERMISSION_DENIED, in any world."""
    if path.startswith(("/", "~", "\\")) or ".." in path.replace("\\", "/").split("/"):
        raise ToolFailure("PERMISSION_DENIED", f"{name} {path!r} is outside the task's workspace")


def _listing(names: Iterable[str]) -> str:
    ordered = sorted(names)
    return ", ".join(ordered) if ordered else "nothing"


def _check_world(tool: str, args: Mapping[str, Any], state: ToolState, world: World) -> None:
    """Existence checks: the file, directory, URL, endpoint, service, queue or recipient must be there."""
    source, destination = str(args.get("source", "")), str(args.get("destination", ""))
    if tool == "file_operations_reader":
        written = state.get("files", {})
        if source not in world.files and source not in written:
            known = _listing(world.files | set(written))
            raise ToolFailure(
                "FILE_NOT_FOUND", f"no file {source!r} in this task's workspace (files: {known})"
            )
    elif tool == "file_operations_scanner":
        if source.rstrip("/") not in world.directories:
            known = _listing(world.directories)
            raise ToolFailure(
                "FILE_NOT_FOUND", f"no directory {source!r} in this task's workspace (directories: {known})"
            )
    elif tool == "network_fetcher" and source.startswith(("http://", "https://")):
        if source not in world.data_urls:
            known = _listing(world.data_urls)
            raise ToolFailure(
                "NETWORK_ERROR", f"404 Not Found: no data at {source!r} (this task's data: {known})"
            )
    elif tool == "network_monitor":
        if source not in world.data_urls | world.endpoints:
            known = _listing(world.data_urls | world.endpoints)
            raise ToolFailure("NETWORK_ERROR", f"unknown host {source!r} (this task's hosts: {known})")
    elif tool in ("network_poster", "network_router"):
        if not destination.startswith(("http://", "https://")):
            raise ToolFailure("INVALID_INPUT", f"destination must be an http(s) URL, got {destination!r}")
        if destination not in world.endpoints:
            known = _listing(world.endpoints)
            raise ToolFailure(
                "NETWORK_ERROR", f"no endpoint accepts data at {destination!r} (this task's: {known})"
            )
    elif tool in ("integration_authenticator", "integration_connector"):
        if source not in world.services:
            known = _listing(world.services)
            raise ToolFailure("INVALID_INPUT", f"unknown service {source!r} (this task's service: {known})")
    elif tool == "integration_queue" and destination not in world.queues:
        raise ToolFailure(
            "INVALID_INPUT", f"no queue named {destination!r} (this task's: {_listing(world.queues)})"
        )
    elif tool == "utility_notifier" and destination not in world.recipients:
        raise ToolFailure(
            "INVALID_INPUT", f"unknown recipient {destination!r} (this task's: {_listing(world.recipients)})"
        )


def _check_fixed(tool: str, args: Mapping[str, Any], world: World) -> None:
    """Every value the task fixes for this tool must be passed, and be exactly that value."""
    alternatives = world.fixed.get(tool, ())
    if not alternatives or any(
        all(name in args and same_json(args[name], value) for name, value in fixed.items())
        for fixed in alternatives
    ):
        return
    fixed = alternatives[0]
    for name, value in fixed.items():
        if name not in args:
            raise ToolFailure("INVALID_INPUT", f"{name} is missing: this task sets it to {_show(value)}")
        if not same_json(args[name], value):
            raise ToolFailure(
                "INVALID_INPUT", f"{name} must be {_show(value)} for this task, got {_show(args[name])}"
            )


def _check_content(tool: str, args: Mapping[str, Any]) -> None:
    """Checks that need no world: an empty payload, and a declared format that contradicts the content."""
    if "data" not in args:
        return
    data = args["data"]
    if isinstance(data, Mapping) and not data:
        raise ToolFailure("INVALID_INPUT", "data is empty: pass the `data` object an earlier step returned")
    if tool in TEXT_FORMAT_TOOLS and isinstance(data, Mapping) and isinstance(data.get("content"), str):
        declared = data.get("format", DEFAULT_TEXT_FORMAT)
        actual = content_format(data["content"])
        if actual is not None and declared != actual:
            said = (
                f"data.format says {declared!r}"
                if "format" in data
                else f"data has no format ({declared!r} assumed)"
            )
            raise ToolFailure("INVALID_INPUT", f"{said} but the content is {actual}")


def check_call(tool: str, args: Mapping[str, Any], state: ToolState) -> None:
    """Raise the tool's declared `ToolFailure` when ``args`` do not fit the episode's world."""
    for name in ("source", "destination"):
        if name in args and tool.startswith("file_operations"):
            _outside_workspace(name, str(args[name]))
    world = state.get(WORLD_KEY)
    if isinstance(world, World):
        _check_world(tool, args, state, world)
        _check_fixed(tool, args, world)
    _check_content(tool, args)


def checked(tool: str, simulator: Simulator) -> Simulator:
    """``simulator`` behind `check_call`: it runs only on arguments that fit the world."""

    def run(arguments: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
        check_call(tool, arguments, state)
        return simulator(arguments, state)

    run.__name__ = f"checked_{tool}"
    return run


def initial_state(task: Task | None) -> dict[str, Any]:
    """The tool state an episode of ``task`` starts from: its world (nothing without a task)."""
    return {} if task is None else {WORLD_KEY: World.of(task.workflow, task.inputs)}
