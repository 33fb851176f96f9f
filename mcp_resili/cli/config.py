"""``config``: MCP client configuration for `serve` and `proxy` (Claude Desktop, Claude Code, VS Code...)."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mcp_resili.cli.common import Commands
from mcp_resili.errors import UserError

#: Each client's top-level key for servers and its usual config file.
CLIENTS: dict[str, str] = {
    "claude-desktop": "mcpServers",
    "claude-code": "mcpServers",
    "cursor": "mcpServers",
    "vscode": "servers",
}


class ClientConfigError(UserError):
    """A client config file that cannot be read or merged."""


def default_path(client: str) -> Path:
    """Where ``client`` reads its MCP configuration (project-level for the IDE clients)."""
    if client == "claude-desktop":
        if sys.platform == "darwin":
            return Path.home() / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
        if sys.platform == "win32":
            return Path(os.environ.get("APPDATA", Path.home())) / "Claude" / "claude_desktop_config.json"
        config_home = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config"))
        return config_home / "Claude" / "claude_desktop_config.json"
    return {
        "claude-code": Path(".mcp.json"),
        "vscode": Path(".vscode/mcp.json"),
        "cursor": Path(".cursor/mcp.json"),
    }[client]


def default_trace_dir() -> Path:
    """Where a configured server writes its traces unless told otherwise: a per-user state directory.

    A client starts the server with no working directory of its own choosing, so the path is absolute
    and the same each time: ``mcp-resili score`` finds an episode there afterwards.
    """
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "mcp-resili" / "traces"
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "mcp-resili" / "traces"
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "mcp-resili" / "traces"


def server_entry(
    *, upstream: str | None = None, faults: str | None = None, trace_dir: Path | None = None
) -> dict[str, Any]:
    """The stdio launch entry for `serve` (or `proxy --upstream` when given), with absolute paths."""
    executable = shutil.which("mcp-resili")
    command, prefix = (executable, []) if executable else (sys.executable, ["-m", "mcp_resili"])
    args = [*prefix, "proxy", "--upstream", upstream] if upstream else [*prefix, "serve"]
    if faults:
        args += ["--faults", faults]
    if trace_dir is not None:
        args += ["--trace-dir", str(trace_dir.resolve())]
    return {"command": command, "args": args}


#: How each client writes a reference to an environment variable inside its config file.
ENV_REFERENCE = {"claude-code": "${%s}", "cursor": "${env:%s}", "vscode": "${env:%s}"}


def http_entry(client: str, url: str, bearer_env: str | None = None) -> dict[str, Any]:
    """An entry for a server already listening (``serve --transport http``).

    A bearer token, when the server needs one, is read by the client from ``bearer_env``: the token
    itself is never written into the file.
    """
    if client == "claude-desktop":
        raise ClientConfigError(
            "Claude Desktop's config file launches local servers over stdio only; drop --url (or add "
            "the URL in Claude Desktop as a custom connector)"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ClientConfigError(
            f"--url must be an http(s) URL such as http://127.0.0.1:8765/mcp, got {url!r}"
        )
    entry: dict[str, Any] = {"url": url}
    if bearer_env is not None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", bearer_env):
            raise ClientConfigError(f"--bearer-env must be an environment variable name, got {bearer_env!r}")
        entry["headers"] = {"Authorization": f"Bearer {ENV_REFERENCE[client] % bearer_env}"}
    return entry


def render_config(client: str, name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """The config snippet ``client`` expects (a stdio launch entry, or an HTTP ``url`` entry)."""
    if client not in CLIENTS:
        raise ClientConfigError(f"unknown client {client!r}; choose from {', '.join(sorted(CLIENTS))}")
    if not name.strip() or not name.isprintable():
        raise ClientConfigError(f"--name must be a printable, non-empty server name, got {name!r}")
    kind = "http" if "url" in entry else "stdio"
    body = {"type": kind, **entry} if client in ("vscode", "claude-code") else dict(entry)
    return {CLIENTS[client]: {name: body}}


def _load_json_object(path: Path) -> dict[str, Any]:
    """A client config file's JSON object; refused in one line rather than altered by a rewrite.

    Refused: what a rewrite would lose or change (a key given twice, a number JSON cannot hold such as
    ``1e400``, ``NaN``).
    """

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                raise ValueError(f"key {key!r} appears twice")
            seen[key] = value
        return seen

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"the number {text} does not fit a float")
        return value

    def constant(name: str) -> float:
        raise ValueError(f"{name} is not JSON")

    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text or "{}", object_pairs_hook=pairs, parse_float=finite, parse_constant=constant)
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not JSON, or not kept by a rewrite
        raise ClientConfigError(f"{path} is not readable JSON ({exc}); fix or move it first") from None
    if not isinstance(data, dict):
        raise ClientConfigError(f"{path} does not hold a JSON object")
    return data


def write_config(
    client: str, name: str, entry: dict[str, Any], path: Path | None = None, *, replace: bool = False
) -> Path:
    """Merge the server into the client's config file, keeping everything else; returns the path.

    The file is rewritten atomically in place (through a symlink, its target), keeping its mode; a
    read-only file, or a different server already under ``name`` (unless ``replace``), is refused.
    """
    path = path or default_path(client)
    try:
        target = path.resolve(strict=False) if path.is_symlink() else path
    except (RuntimeError, OSError) as exc:  # a symlink loop: Python 3.11 raises RuntimeError
        raise ClientConfigError(f"{path}: cannot follow the symlink ({exc})") from None
    existing = _load_json_object(target) if target.exists() else {}
    # The mode, not os.access: root may write anything, but a file marked read-only is meant to stay.
    if target.exists() and (not os.access(target, os.W_OK) or not target.stat().st_mode & stat.S_IWUSR):
        raise ClientConfigError(f"{path} is read-only; make it writable first")
    key = CLIENTS[client]
    servers = existing.setdefault(key, {})
    if not isinstance(servers, dict):
        raise ClientConfigError(f"{path}: {key!r} is not an object")
    body = render_config(client, name, entry)[key][name]
    if name in servers and servers[name] != body and not replace:
        raise ClientConfigError(
            f"{path} already has a different server {name!r}; pass --replace to overwrite it, or --name"
        )
    servers[name] = body
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o600
    # A fresh, unpredictable temporary name (never a file or link someone put there), then one rename.
    handle, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(json.dumps(existing, indent=2, ensure_ascii=False) + "\n")
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)  # atomic: a crash never leaves a half-written config
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


def register(commands: Commands) -> None:
    """Add ``config``."""
    config = commands.add_parser(
        "config", help="print (or write) an MCP client configuration for serve or proxy"
    )
    config.add_argument("client", choices=sorted(CLIENTS))
    config.add_argument("--name", default="mcp-resili", help="the server's name in the client")
    config.add_argument("--upstream", help="configure `proxy --upstream UPSTREAM` instead of `serve`")
    config.add_argument("--faults", help="fault SPEC for the server")
    config.add_argument(
        "--trace-dir",
        type=Path,
        help=f"where the server writes one trace per episode (default: {default_trace_dir()})",
    )
    config.add_argument(
        "--url", help="configure a running HTTP server (serve --transport http) at this URL instead"
    )
    config.add_argument(
        "--bearer-env",
        metavar="VAR",
        help="with --url: send 'Authorization: Bearer $VAR' (the client reads VAR; the token is not written)",
    )
    config.add_argument("--write", action="store_true", help="merge it into the client's config file")
    config.add_argument("--path", type=Path, help="config file to write (default: the client's usual one)")
    config.add_argument(
        "--replace", action="store_true", help="with --write: overwrite a different server of the same --name"
    )
    config.set_defaults(handler=config_command)


def config_command(args: argparse.Namespace) -> int:
    """Print the client configuration, or merge it into the client's file."""
    if args.url is not None:
        if args.upstream or args.faults or args.trace_dir:
            raise ClientConfigError("--url points at a running server: its own options set faults and traces")
        entry = http_entry(args.client, args.url, args.bearer_env)
    elif args.bearer_env is not None:
        raise ClientConfigError("--bearer-env needs --url")
    else:
        if args.faults is not None:
            _check_faults(args.faults, proxied=args.upstream is not None)
        trace_dir = (args.trace_dir or default_trace_dir()).resolve()
        entry = server_entry(upstream=args.upstream, faults=args.faults, trace_dir=trace_dir)
    if not args.write:
        if args.path is not None or args.replace:
            raise ClientConfigError(
                "--path and --replace need --write (without it the config is only printed)"
            )
        print(json.dumps(render_config(args.client, args.name, entry), indent=2))
    else:
        path = write_config(args.client, args.name, entry, args.path, replace=args.replace)
        print(f"wrote server {args.name!r} into {path}", file=sys.stderr)
    if args.url is None:  # on stderr: stdout is the config itself, which may go into a file
        where = shlex.quote(entry["args"][entry["args"].index("--trace-dir") + 1])
        print(
            f"traces go to {where}; score an episode with: mcp-resili score {where}/EPISODE.jsonl",
            file=sys.stderr,
        )
    return 0


def _check_faults(spec: str, *, proxied: bool) -> None:
    """Refuse now a fault SPEC the configured server would refuse at every start (exit 2)."""
    from mcp_resili.constants import DEFAULT_SUITE
    from mcp_resili.faults import parse_fault_spec
    from mcp_resili.registry.loader import get_suite, spec_scope

    parse_fault_spec(spec, spec_scope(None if proxied else get_suite(DEFAULT_SUITE)))
