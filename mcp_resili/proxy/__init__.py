"""Bring your own MCP server: put the fault pipeline between any agent and any upstream server."""

from mcp_resili.proxy.relay import ClientRelay
from mcp_resili.proxy.run import run_proxy
from mcp_resili.proxy.server import ProxyServer, render
from mcp_resili.proxy.upstream import (
    Upstream,
    UpstreamBackend,
    UpstreamError,
    connect_upstream,
    connection_failure,
    list_all_tools,
)

__all__ = [
    "ClientRelay",
    "ProxyServer",
    "Upstream",
    "UpstreamBackend",
    "UpstreamError",
    "connect_upstream",
    "connection_failure",
    "list_all_tools",
    "render",
    "run_proxy",
]
