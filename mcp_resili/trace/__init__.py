"""Episode traces: a header plus typed events, stored as JSONL."""

from mcp_resili.trace.model import (
    TRACE_FORMAT_VERSION,
    EpisodeEndEvent,
    FinishEvent,
    ModelTurnEvent,
    ProtocolEvent,
    ReflectionEvent,
    ToolCallEvent,
    Trace,
    TraceError,
    TraceEvent,
    TraceHeader,
    dump_event,
    event_from_dict,
    event_from_meta,
    event_to_dict,
    event_to_meta,
)

__all__ = [
    "TRACE_FORMAT_VERSION",
    "EpisodeEndEvent",
    "FinishEvent",
    "ModelTurnEvent",
    "ProtocolEvent",
    "ReflectionEvent",
    "ToolCallEvent",
    "Trace",
    "TraceError",
    "TraceEvent",
    "TraceHeader",
    "dump_event",
    "event_from_dict",
    "event_from_meta",
    "event_to_dict",
    "event_to_meta",
]
