"""The server's own record of an episode's calls, and how it replaces what the loop observed."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from mcp_resili.client.notices import ProtocolNotices
from mcp_resili.constants import (
    FINISH_TOOL,
    TRACE_METHOD,
)
from mcp_resili.server.app import EpisodeTraceResult
from mcp_resili.trace import (
    FinishEvent,
    ToolCallEvent,
    TraceEvent,
    event_from_dict,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordedEvents:
    """Where the loop reads the server's own record of its calls: never from anything the model sees.

    ``after_call(episode_id)``: the events recorded since the previous call (in process: the server
    object's recorder). ``at_end(episode_id)``: closes the episode on the server and returns all its
    recorded events (our server over stdio or HTTP, through `TRACE_METHOD`), or None when the server
    keeps no such record. Whatever neither provides is built from what came back (`_observed`).
    """

    after_call: Callable[[str], Sequence[TraceEvent]] | None = None
    at_end: Callable[[str], Awaitable[Sequence[TraceEvent] | None]] | None = None
    #: What the server sent besides answers (tool-list changes), when the client was built with it.
    notices: ProtocolNotices | None = None
    #: The fault plan our server's own trace header names, per episode id, filled by ``at_end``
    #: (`fetch_episode_trace`): over ``--server`` the runner knows no plan of its own.
    server_plans: dict[str, dict[str, Any]] = field(default_factory=dict)


async def fetch_episode_trace(
    client: Client, episode_id: str, server_plans: dict[str, dict[str, Any]] | None = None
) -> list[TraceEvent] | None:
    """Close ``episode_id`` on our server and return its recorded events; None from another server.

    The fault plan its header names goes into ``server_plans`` (keyed by the episode id).
    """
    request = types.Request[dict[str, Any], str](method=TRACE_METHOD, params={"episode": episode_id})
    try:
        result = await client.session.send_request(request, EpisodeTraceResult)
    except MCPError as exc:
        if exc.code != types.METHOD_NOT_FOUND:
            logger.warning("%s failed for episode %s: %s", TRACE_METHOD, episode_id, exc.error.message)
        return None
    except ValidationError as exc:
        logger.warning("%s returned an unreadable result for %s: %s", TRACE_METHOD, episode_id, exc)
        return None
    plan = (result.header or {}).get("fault_plan")
    if server_plans is not None and isinstance(plan, dict):
        server_plans[episode_id] = plan
    try:
        return [event_from_dict(e) for e in result.events]
    except ValidationError as exc:
        logger.warning("%s returned unreadable events for %s: %s", TRACE_METHOD, episode_id, exc)
        return None


def merge_recorded(events: list[TraceEvent], answered: Sequence[int], recorded: Sequence[TraceEvent]) -> None:
    """Put the server's recorded events in place of the observed ones at ``answered`` positions.

    The server records every call that reached its pipeline, in order; each recorded event replaces
    the next observed event of the same tool. A call the runner saw fail (a timeout, a dropped answer)
    may still have been recorded: records ahead of an answered call's own take the places of the
    calls that failed since the previous answer when their tools agree, the most such records first.
    Anything unmatched keeps its observed form, and so does a call that met a fault the server did not
    record (`_kept`).
    """
    queue = [e for e in recorded if isinstance(e, ToolCallEvent | FinishEvent)]
    done = set(answered)
    position, previous = 0, -1
    for index in answered:
        if _never_reached_the_recorder(events[index], queue[position:]):
            continue
        failed = [
            i for i in range(previous + 1, index) if i not in done and isinstance(events[i], ToolCallEvent)
        ]
        previous = index
        tool = _tool_of(events[index])
        # The most failed calls recorded first: a retry of a call that timed out is the same tool.
        for skip in range(len(failed), -1, -1):
            match = position + skip
            if match >= len(queue) or _tool_of(queue[match]) != tool:
                continue
            pairs = list(zip(failed[len(failed) - skip :], queue[position:match], strict=True))
            if any(_tool_of(record) != _tool_of(events[observed]) for observed, record in pairs):
                continue
            for observed, record in pairs:
                events[observed] = _kept(events[observed], record)
            events[index] = _kept(events[index], queue[match])
            position = match + 1
            break


def _never_reached_the_recorder(observed: TraceEvent, records: Sequence[TraceEvent]) -> bool:
    """A call stopped by a request-side fault that the recording server did not decide itself.

    Behind a fault-injecting proxy the upstream never sees such a call: no record of it is coming
    (our own server records it, with that same fault).
    """
    if not isinstance(observed, ToolCallEvent) or observed.fault is None or observed.fault.side != "request":
        return False
    own = next((r for r in records if _tool_of(r) == observed.tool), None)
    return not (isinstance(own, ToolCallEvent) and own.fault == observed.fault)


def _kept(observed: TraceEvent, record: TraceEvent) -> TraceEvent:
    """The server's record of a call, unless the call met a fault that server never saw.

    A fault-injecting proxy in between (``run --server "mcp-resili proxy --upstream ..."``) decides
    faults its upstream does not record; its decision comes back in the result's ``_meta``
    (``--expose-faults``) and is the one the agent met.
    """
    unseen = isinstance(record, ToolCallEvent) and record.fault is None
    if isinstance(observed, ToolCallEvent) and observed.fault is not None and unseen:
        return observed
    return record


def _tool_of(event: TraceEvent) -> str | None:
    if isinstance(event, FinishEvent):
        return FINISH_TOOL
    return event.tool if isinstance(event, ToolCallEvent) else None
