"""A stdio MCP server that relays to one Streamable HTTP URL: ``python -m mcp_resili.harness.bridge URL``.

`MCP_RESILI_MCP_COMMAND` (docs/harnesses.md) runs this with the episode's URL, so an agent program that
starts its MCP servers over stdio plays the same episode, on the same server, as one that connects to
the URL. Each line of standard input (one JSON-RPC message) is POSTed as it comes, concurrently; every
message of the answer (a JSON body or a server-sent event stream) goes to standard output as one line.
The session id and the negotiated protocol version travel as the Streamable HTTP client would send
them; after ``notifications/initialized`` a GET stream relays what the server sends outside a request.
A request the HTTP side cannot answer gets a JSON-RPC error naming why, never silence. At the end of
input the session is deleted.

Standard library only (it starts in a few tens of milliseconds, beside an agent program).
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
from typing import Any, BinaryIO
from urllib.parse import urlsplit

#: The protocol version a 2026-era request carries in its ``_meta``.
VERSION_META = "io.modelcontextprotocol/protocolVersion"
#: JSON-RPC error code of a request the HTTP side failed (the SDKs' "connection closed" range).
HTTP_FAILED = -32000
#: Seconds the bridge waits, after its input ended, for answers still on their way.
DRAIN_SECONDS = 30.0


class Bridge:
    """Relays between one stdio client and one Streamable HTTP endpoint."""

    def __init__(self, url: str, output: BinaryIO) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the bridge relays to an http:// URL, got {url!r}")
        self._host = parts.hostname
        self._port = parts.port or 80
        self._path = parts.path or "/"
        self._output = output
        self._lock = threading.Lock()
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._listening = False
        self._threads: list[threading.Thread] = []

    def _connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self._host, self._port)

    def _headers(self, version: str | None) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
        if version:
            headers["mcp-protocol-version"] = version
        return headers

    def write(self, message: Any) -> None:
        """One message to the client, as one line."""
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            self._output.write(line)
            self._output.flush()

    def _fail(self, request_id: Any, why: str) -> None:
        if request_id is not None:
            self.write({"jsonrpc": "2.0", "id": request_id, "error": {"code": HTTP_FAILED, "message": why}})

    def handle_line(self, line: bytes) -> None:
        """Relay one line of the client's (in a thread of its own, so calls run concurrently)."""
        try:
            message = json.loads(line)
        except ValueError as exc:
            self.write(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": f"parse error: {exc}"}}
            )
            return
        thread = threading.Thread(target=self._post, args=(message, line), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _version_of(self, message: Any) -> str | None:
        if not isinstance(message, dict) or message.get("method") == "initialize":
            return None
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        stamped = meta.get(VERSION_META) if isinstance(meta, dict) else None
        return stamped if isinstance(stamped, str) else self.protocol_version

    def _post(self, message: Any, line: bytes) -> None:
        request_id = message.get("id") if isinstance(message, dict) and "method" in message else None
        connection = self._connection()
        try:
            connection.request(
                "POST", self._path, body=line, headers=self._headers(self._version_of(message))
            )
            response = connection.getresponse()
            self.session_id = response.getheader("mcp-session-id") or self.session_id
            if response.status == 202:
                response.read()
            elif "text/event-stream" in (response.getheader("content-type") or ""):
                self._relay_events(response)
            else:
                self._relay_body(response, request_id)
        except (OSError, http.client.HTTPException) as exc:
            self._fail(request_id, f"the MCP server could not be reached: {type(exc).__name__}: {exc}")
        finally:
            connection.close()
        if isinstance(message, dict) and message.get("method") == "notifications/initialized":
            self._listen()

    def _relay_body(self, response: http.client.HTTPResponse, request_id: Any) -> None:
        body = response.read()
        try:
            answer = json.loads(body) if body else None
        except ValueError:
            answer = None
        messages = answer if isinstance(answer, list) else [answer]
        relayed = [m for m in messages if isinstance(m, dict) and m.get("jsonrpc") == "2.0"]
        for relayed_message in relayed:
            self._note(relayed_message)
            self.write(relayed_message)
        if not relayed:
            text = body.decode("utf-8", errors="replace").strip()[:300]
            self._fail(request_id, f"HTTP {response.status} from the MCP server: {text}")

    def _relay_events(self, response: http.client.HTTPResponse) -> None:
        data: list[str] = []
        while True:
            raw = response.readline()
            if not raw:
                break
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if text.startswith("data:"):
                data.append(text[5:].removeprefix(" "))
            elif not text and data:
                self._relay_data("\n".join(data))
                data = []
        if data:
            self._relay_data("\n".join(data))

    def _relay_data(self, data: str) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            return  # a priming or keep-alive event carries no message
        self._note(message)
        self.write(message)

    def _note(self, message: Any) -> None:
        """Remember the negotiated protocol version from an ``initialize`` answer."""
        result = message.get("result") if isinstance(message, dict) else None
        if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
            self.protocol_version = result["protocolVersion"]

    def _listen(self) -> None:
        """Relay what the server sends outside any request (a GET stream), once a session exists."""
        if self._listening or not self.session_id:
            return
        self._listening = True

        def listen() -> None:
            connection = self._connection()
            try:
                headers = self._headers(self.protocol_version)
                headers["accept"] = "text/event-stream"
                connection.request("GET", self._path, headers=headers)
                response = connection.getresponse()
                if response.status == 200:
                    self._relay_events(response)
            except (OSError, http.client.HTTPException):
                pass  # the stream is optional: requests still get their answers
            finally:
                connection.close()

        threading.Thread(target=listen, daemon=True).start()

    def close(self) -> None:
        """Wait for answers on their way (bounded), then end the session."""
        for thread in self._threads:
            thread.join(DRAIN_SECONDS)
        if self.session_id:
            connection = self._connection()
            try:
                connection.request("DELETE", self._path, headers=self._headers(self.protocol_version))
                connection.getresponse().read()
            except (OSError, http.client.HTTPException):
                pass
            finally:
                connection.close()


def main(argv: list[str] | None = None) -> int:
    """Relay standard input and output to the URL given as the one argument."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m mcp_resili.harness.bridge URL", file=sys.stderr)
        return 2
    try:
        bridge = Bridge(args[0], sys.stdout.buffer)
    except ValueError as exc:
        print(f"mcp-resili bridge: {exc}", file=sys.stderr)
        return 2
    for line in sys.stdin.buffer:
        if line.strip():
            bridge.handle_line(line)
    bridge.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
