"""Bring your own MCP server: put the fault pipeline between any agent and any upstream server."""

from mcp_resili.proxy.server import ProxyServer, render
from mcp_resili.proxy.upstream import UpstreamBackend, UpstreamError, connect_upstream, list_all_tools

__all__ = ["ProxyServer", "UpstreamBackend", "UpstreamError", "connect_upstream", "list_all_tools", "render"]
