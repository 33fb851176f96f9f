"""inspect_ai integration (the ``[inspect]`` extra): our suites as inspect tasks, our agents as models.

``inspect eval mcp_resili/toolmaze --model mcp_resili/oracle`` runs ToolMaze's tasks as samples; each
sample's agent works through its own ``mcp-resili serve`` process (our MCP server and its fault
pipeline, reached through inspect's own MCP support), and the suite's own scorer judges the trace the
server recorded. See ``docs/inspect.md``.

inspect_ai loads `mcp_resili.integrations.inspect.registry` (the ``mcp_resili`` entry point of group
``inspect_ai``) on every run, for every user: this package's ``__init__`` imports nothing, and the
registry module imports mcp_resili's own modules only when a task, scorer or model is built.
"""
