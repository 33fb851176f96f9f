"""``model-server`` (scripted agents behind the model APIs) and ``llm-proxy`` (faults at the model API)."""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
from pathlib import Path

import anyio

from mcp_resili.cli.common import Commands, add_seed, announce
from mcp_resili.cli.serve import _non_negative, _port_number
from mcp_resili.constants import AUTH_TOKEN_ENV


def _add_bind(parser: argparse.ArgumentParser, port: int, token_help: str) -> None:
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind; anything but loopback needs --auth-token or --insecure",
    )
    parser.add_argument(
        "--port", type=_port_number, default=port, help=f"port (default {port}; 0 picks a free one)"
    )
    parser.add_argument("--auth-token", help=f"{token_help} (default: ${AUTH_TOKEN_ENV}); 16+ characters")
    parser.add_argument(
        "--insecure", action="store_true", help="serve a non-loopback --host without a token (warns)"
    )


def register(commands: Commands) -> None:
    """Add ``model-server`` and ``llm-proxy``."""
    server = commands.add_parser(
        "model-server",
        help="serve the scripted agents behind the OpenAI and Anthropic model APIs",
        description="POST /v1/chat/completions and /v1/messages (streaming or not, with tools); the "
        "request's model names the agent (scripted:oracle, ...); the task is recognised from the prompt "
        "(docs/llm.md).",
    )
    _add_bind(server, 8770, "API key every request must send (Authorization: Bearer or x-api-key)")
    server.set_defaults(handler=model_server_command)

    proxy = commands.add_parser(
        "llm-proxy",
        help="put model-API faults in front of any OpenAI- or Anthropic-compatible endpoint",
        description="Forwards every request to --upstream (the caller's key untouched), injecting the faults "
        "of --faults into model calls; each decision goes to --trace-dir/EPISODE.model_api.jsonl. Name the "
        "episode with the x-mcp-resili-episode header (docs/llm.md).",
    )
    proxy.add_argument(
        "--upstream", required=True, help="base URL of the model API (https://api.openai.com/v1, ...)"
    )
    proxy.add_argument(
        "--faults",
        default="none",
        help="none | llm:light | llm:medium | llm:heavy | PATH.toml|.json of rules",
    )
    add_seed(proxy, what="faults")
    proxy.add_argument("--trace-dir", type=Path, help="write each episode's decisions here (JSONL)")
    proxy.add_argument(
        "--time-scale", type=_non_negative, default=1.0, help="multiply injected delays; 0 = none"
    )
    proxy.add_argument(
        "--upstream-timeout",
        type=float,
        default=600.0,
        help="seconds an upstream answer may take (default 600)",
    )
    proxy.add_argument(
        "--no-probe", action="store_true", help="skip the startup check of the upstream (GET /v1/models)"
    )
    proxy.add_argument(
        "--probe-key-env",
        metavar="VAR",
        help="environment variable whose key the startup check sends (default: by the upstream's host)",
    )
    _add_bind(proxy, 8771, "token every request must send in the x-mcp-resili-token header")
    proxy.set_defaults(handler=llm_proxy_command)


def _socket(args: argparse.Namespace) -> tuple[socket.socket, str | None]:
    from mcp_resili.modelapi.hosting import open_socket
    from mcp_resili.server.transports import HttpAccess

    access = HttpAccess.from_options(args.auth_token, args.insecure, (), os.environ)
    return open_socket(args.host, args.port, access), access.auth_token


def model_server_command(args: argparse.Namespace) -> int:
    """Serve the scripted agents until interrupted."""
    from mcp_resili.modelapi.hosting import serve_app
    from mcp_resili.modelserver import ModelServer
    from mcp_resili.registry.loader import load_all_suites

    sock, token = _socket(args)
    server = ModelServer(load_all_suites(), token=token)
    server.prepare()  # the suites and their default prompts, before the first request waits on them

    def started(url: str) -> None:
        print(
            f"serving the scripted model API at {url} (OpenAI SDKs: base_url {url}/v1; Anthropic: {url})",
            file=sys.stderr,
            flush=True,
        )

    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(lambda: serve_app(server.app, sock, on_started=started, handle_signals=True))
    return 0


def llm_proxy_command(args: argparse.Namespace) -> int:
    """Serve the fault gateway until interrupted."""
    from mcp_resili.errors import UserError
    from mcp_resili.faults.model_api import parse_model_fault_spec
    from mcp_resili.modelapi import GatewaySettings, ModelGateway
    from mcp_resili.modelapi.hosting import loop_options
    from mcp_resili.modelapi.probe import check_upstream_url, probe_upstream

    if args.upstream_timeout <= 0:
        raise UserError(f"--upstream-timeout must be positive, got {args.upstream_timeout}")
    plan = parse_model_fault_spec(args.faults)
    check_upstream_url(args.upstream)
    sock, token = _socket(args)
    if not args.no_probe:
        anyio.run(probe_upstream, args.upstream, dict(os.environ), args.probe_key_env)
    settings = GatewaySettings(
        upstream=args.upstream,
        plan=plan,
        seed=args.seed,
        trace_dir=args.trace_dir,
        time_scale=args.time_scale,
        token=token,
        upstream_timeout=args.upstream_timeout,
    )
    gateway = ModelGateway(settings)
    started = announce(f"model-API faults ({plan.name}) in front of {args.upstream}, serving")
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(lambda: gateway.serve(sock, on_started=started), backend_options=loop_options())
    return 0
