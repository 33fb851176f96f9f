"""The loopback fixture site: an HTTP proxy on 127.0.0.1 that serves an episode's pages and nothing else.

Servers that fetch (``mcp-server-fetch --proxy-url {site_proxy}``) send every request through it, so a
task names its pages by a stable URL (``http://docs.example.test/q3.html``) whatever port the proxy
got, and nothing reaches the network: any other URL is a 404, a tunnel (HTTPS) is refused.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Handler(BaseHTTPRequestHandler):
    server: _SiteServer

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_CONNECT(self) -> None:
        self._plain(403, "the fixture site serves plain http:// pages only")

    def do_POST(self) -> None:
        self._plain(405, "the fixture site serves GET only")

    def _answer(self, *, send_body: bool) -> None:
        url = (
            self.path
            if self.path.startswith("http://")
            else f"http://{self.headers.get('Host', '')}{self.path}"
        )
        page = self.server.pages.get(url)
        if page is None:
            self._plain(404, f"no page {url} on the fixture site", send_body=send_body)
            return
        status, content_type, body = page
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _plain(self, status: int, text: str, *, send_body: bool = True) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: requests are no part of any report."""


class _SiteServer(ThreadingHTTPServer):
    daemon_threads = True
    pages: Mapping[str, tuple[int, str, bytes]]


class FixtureSite:
    """One proxy per episode slot, serving that slot's current pages (`serve`)."""

    def __init__(self) -> None:
        self._server = _SiteServer(("127.0.0.1", 0), _Handler)
        self._server.pages = {}
        self._thread = threading.Thread(target=self._server.serve_forever, name="fixture-site", daemon=True)
        self._thread.start()

    @property
    def proxy_url(self) -> str:
        """``http://127.0.0.1:PORT``: what a fetching server takes as its proxy."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def serve(self, pages: Mapping[str, tuple[int, str, bytes]]) -> None:
        """Serve ``pages`` (URL → status, type, body) from now on."""
        self._server.pages = dict(pages)

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
