"""mcp-resili: chaos engineering and robustness benchmarking for tool-using LLM agents over MCP."""

__version__ = "0.1.0"

#: Key of the request ``_meta`` entry our runner sends with every ``tools/call``: the episode id, or an
#: object ``{"id", "task", "fault_key", "seed"}``.
META_EPISODE = "mcp-resili/episode"
#: Key of the ``_meta`` entry our server attaches to every tool result: the recorded trace event.
META_EVENT = "mcp-resili/event"
#: Discovery tools (``search_tools``, ``tool_info``): never faulted, never scored, not counted by the
#: termination rules.
DISCOVERY_TOOLS = ("search_tools", "tool_info")
