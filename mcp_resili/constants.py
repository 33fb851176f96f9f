"""Names on the wire and in traces that every layer shares (the package's floor 0)."""

#: The package version (the public face exports it as ``mcp_resili.__version__``).
VERSION = "0.1.0"
#: The suite used when none is named.
DEFAULT_SUITE = "resilibench"

#: Key of the request ``_meta`` entry naming the episode a ``tools/call`` belongs to: the episode id, or
#: an object ``{"id", "task", "trial", "seed"}`` (our runner also sends ``fault_key``).
META_EPISODE = "mcp-resili/episode"
#: HTTP header carrying the same as `META_EPISODE`, for clients that can set headers but not ``_meta``.
EPISODE_HEADER = "x-mcp-resili-episode"
#: The tool a stateless client (2026-07-28, no session) calls to begin an episode: it returns a handle.
START_TOOL = "start_episode"
#: The tool argument a stateless client passes that handle in, on every call (`mcp_resili.server.handles`).
HANDLE_ARGUMENT = "episode_handle"
#: Key of the ``_meta`` entry with the recorded trace event: attached to tool results only by a server
#: started with ``--expose-faults`` (it reveals the fault decision, so it is off by default).
META_EVENT = "mcp-resili/event"
#: Runner-only JSON-RPC method: closes an episode and returns its recorded events. Any later call to the
#: episode is refused, so a model-facing harness cannot peek at fault decisions and carry on.
TRACE_METHOD = "mcp-resili/episode_trace"
#: Environment variable an HTTP server reads its bearer token from (instead of ``--auth-token``).
AUTH_TOKEN_ENV = "MCP_RESILI_AUTH_TOKEN"
#: Discovery tools (``search_tools``, ``tool_info``): never faulted, never scored, not counted by the
#: termination rules.
DISCOVERY_TOOLS = ("search_tools", "tool_info")
#: The tool an agent calls to end its episode (completed or aborted): never faulted, recorded as a
#: `FinishEvent` when accepted.
FINISH_TOOL = "finish"
#: Phrases that count as an explicit completion signal in an agent's text (case-insensitive).
COMPLETION_PHRASES = (
    "task_completed",
    "task completed",
    "task is complete",
    "finished executing",
    "all steps completed",
    "workflow complete",
    "done with the task",
    "successfully completed the task",
    "task has been completed",
)

#: The report's optional grouping keys beyond (model, architecture, faults, variant). ``task_type`` and
#: ``complexity`` come from the task (via ``task_info``); ``flaw`` and ``severity`` from a
#: ``flawed:TYPE[:SEVERITY]`` variant ("none" for other variants; the severity defaults to severe, as in
#: the prompts).
BREAKDOWN_KEYS = ("task_type", "complexity", "flaw", "severity")
