"""Error codes the server itself records, read by judges and runners without importing the server.

They are part of the trace's vocabulary (a `ToolCallEvent`'s ``error_code``), never injected faults.
"""

#: Error codes the pipeline itself produces (never injected faults). Every tool declares the ones that
#: can reach it (`ResiliServer` lists them in the tool's ``_meta["mcp-resili/errors"]``).
UNKNOWN_TOOL = "UNKNOWN_TOOL"
#: The arguments break the input schema, or hold a number no tool can work with (`numbers.MAX_NUMBER`).
INVALID_INPUT = "INVALID_INPUT"
DEPENDENCY_NOT_MET = "DEPENDENCY_NOT_MET"
#: The tool did not finish within the server's per-call time limit.
TOOL_TIMEOUT = "TOOL_TIMEOUT"
#: Recorded (never sent: nobody is left to read it) for a call whose client went away while it ran.
CALL_CANCELLED = "CALL_CANCELLED"
CANCELLED_MESSAGE = "the client cancelled the call (or went away) before the tool finished"
#: A response-side fault reshaped a result (schema drift, stale data...) so that it no longer satisfies
#: the tool's declared output schema. An MCP client must reject such structured content, so the agent
#: reads the reshaped payload as the text of this error instead (see `CallPipeline._conform`).
RESPONSE_SCHEMA_MISMATCH = "RESPONSE_SCHEMA_MISMATCH"
#: The proxy's upstream closed the connection (exited, crashed): no tool answered. A runner takes it
#: for what it is, an infrastructure error, not the agent's.
UPSTREAM_CLOSED = "UPSTREAM_CLOSED"
#: The tool (or the suite's setup of an episode) raised something it does not declare: a bug there,
#: never the agent's doing. The trace records it like any call, so scoring can tell it apart, and a
#: runner counts it as an infrastructure error.
TOOL_CRASHED = "TOOL_CRASHED"
#: A call refused because its arguments would take the episode past its memory budget (the trace and
#: tool state one episode may gather: `serve --max-episode-memory`). The agent's doing: it sent too much.
EPISODE_MEMORY_LIMIT = "EPISODE_MEMORY_LIMIT"
#: A call refused because the server's live episodes hold its whole memory budget and none could be
#: evicted (`serve --max-server-memory`). Not the agent's doing: a runner counts an infrastructure error.
SERVER_MEMORY_LIMIT = "SERVER_MEMORY_LIMIT"
#: A call refused because its episode already had `MAX_WAITING_CALLS` calls waiting for the one
#: running (calls of one episode run one at a time). The agent's doing: it sent too many at once.
EPISODE_BUSY = "EPISODE_BUSY"
#: A result larger than the server's limit for one result (`serve --max-result-memory`): the tool ran
#: (its effects happened), its result is not sent. The agent's doing: it asked for too much at once.
RESULT_TOO_LARGE = "RESULT_TOO_LARGE"
