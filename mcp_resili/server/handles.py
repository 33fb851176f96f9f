"""Handle mode: episodes for stateless clients, the way the 2026-07-28 revision of MCP prescribes.

A stateless HTTP request carries no session, so state that spans calls travels in a handle the server
mints and the client passes back as an ordinary tool argument. A client that names no episode (no
``_meta``, no header, no handshake session, no ``serve --episode`` pin) sees every tool with one more
required argument, `HANDLE_ARGUMENT`, and one more tool, `START_TOOL`, whose description tells a model
what to do: call it once, read the task, pass the handle on every call.

The handle plumbing is no part of the agent's work: ``start_episode`` is never recorded as a call, the
handle argument is removed before the call pipeline sees the arguments, and every other part of a tool's
schema is exactly the one the runner's agents see (`plain_schema` undoes `with_handle`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import mcp_types as types

from mcp_resili.constants import HANDLE_ARGUMENT, START_TOOL

__all__ = [
    "HANDLE_ARGUMENT",
    "NO_EPISODE",
    "START_TOOL",
    "handle_tools",
    "plain_schema",
    "split_handle",
    "start_tool",
    "with_handle",
]

#: Error code of a call in handle mode that passes no handle.
NO_EPISODE = "NO_EPISODE"

_HANDLE_PROPERTY = {
    "type": "string",
    "description": (
        f"Your episode handle: the value {START_TOOL} returned. Pass the same handle on every call "
        "of the episode."
    ),
}


def with_handle(tool: types.Tool) -> types.Tool:
    """``tool`` as a handle-mode client sees it: `HANDLE_ARGUMENT` added as a required string.

    Everything else (name, description, the other properties, output schema, annotations, ``_meta``)
    is the tool's own, so the schema stays comparable with what the runner's agents see.
    """
    schema = copy.deepcopy(dict(tool.input_schema))
    properties = dict(schema.get("properties") or {})
    properties[HANDLE_ARGUMENT] = dict(_HANDLE_PROPERTY)
    schema["properties"] = properties
    required = [name for name in schema.get("required") or [] if name != HANDLE_ARGUMENT]
    schema["required"] = [*required, HANDLE_ARGUMENT]
    schema.setdefault("type", "object")
    return tool.model_copy(update={"input_schema": schema})


def plain_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The input schema a handle-mode schema was made from (`with_handle` undone)."""
    plain = copy.deepcopy(dict(schema))
    properties = {k: v for k, v in (plain.get("properties") or {}).items() if k != HANDLE_ARGUMENT}
    plain["properties"] = properties
    required = [name for name in plain.get("required") or [] if name != HANDLE_ARGUMENT]
    if required:
        plain["required"] = required
    else:
        plain.pop("required", None)
    return plain


def split_handle(arguments: Mapping[str, Any] | None) -> tuple[object, dict[str, Any]]:
    """(the handle argument or None, the other arguments) of a handle-mode call."""
    rest = dict(arguments or {})
    return rest.pop(HANDLE_ARGUMENT, None), rest


def start_tool(
    *, suite: str, fixed_task: str | None, variants: Sequence[str], client_seeds: bool
) -> types.Tool:
    """The ``start_episode`` tool: what a model reads to begin (its description is the instruction)."""
    properties: dict[str, Any] = {}
    if fixed_task is None:
        properties["task"] = {
            "type": "string",
            "description": (
                f"Id of the {suite} task to play (the server's prompts list names every task); leave it "
                "out to be given one."
            ),
        }
    else:
        properties["task"] = {
            "type": "string",
            "enum": [fixed_task],
            "description": f"This server plays task {fixed_task} only (the default).",
        }
    properties["trial"] = {
        "type": "integer",
        "minimum": 0,
        "description": "Which trial of the task to play (trial k meets the same faults every time); "
        "default: the next one.",
    }
    if len(variants) > 1:
        properties["variant"] = {
            "type": "string",
            "description": f"Prompt variant, one of: {', '.join(variants)} (default baseline).",
        }
    if client_seeds:
        properties["seed"] = {
            "type": "integer",
            "description": "Seed of the fault draws (default: the server's).",
        }
    task_phrase = f"task {fixed_task}" if fixed_task is not None else "a task"
    return types.Tool(
        name=START_TOOL,
        description=(
            f"Start a new episode of {task_phrase} and read what to do. Call this once, before any "
            f"other tool. It returns an episode handle and the task. Pass the handle as the "
            f"'{HANDLE_ARGUMENT}' argument of every other tool call of this episode, finish included. "
            "Each call starts another, separate episode."
        ),
        input_schema={"type": "object", "properties": properties, "additionalProperties": False},
        annotations=types.ToolAnnotations(read_only_hint=True),
    )


def handle_tools(tools: Sequence[types.Tool], start: types.Tool) -> list[types.Tool]:
    """The listing a handle-mode client gets: ``start_episode`` first, then every tool with a handle."""
    return [start, *(with_handle(tool) for tool in tools)]


def started_text(handle: str, task_id: str | None, trial: int, prompt: str | None) -> str:
    """What ``start_episode`` answers: the handle, how to use it, and the task."""
    lines = [
        "Episode started.",
        f"{HANDLE_ARGUMENT}: {handle}",
        f"Pass this handle as the '{HANDLE_ARGUMENT}' argument of every other tool call of this episode, "
        "finish included.",
    ]
    if task_id is not None:
        lines += ["", f"Your task ({task_id}, trial {trial}):", prompt or ""]
    else:
        lines += ["", "This episode has no task: use the tools as you see fit, then call finish."]
    return "\n".join(lines)


def no_handle_text(tool: str) -> str:
    """The error text for a handle-mode call without a handle."""
    return (
        f"Error {NO_EPISODE}: the call to {tool} names no episode. Call {START_TOOL} first, then pass the "
        f"handle it returns as the '{HANDLE_ARGUMENT}' argument of every call."
    )
