"""``serve`` (a suite's tools over MCP, with faults) and ``proxy`` (the fault pipeline before any server)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from mcp_resili.cli.common import Commands, add_seed, announce, sigterm_stops_like_ctrl_c
from mcp_resili.constants import AUTH_TOKEN_ENV, DEFAULT_SUITE
from mcp_resili.errors import UserError
from mcp_resili.registry.entries import suite_names

if TYPE_CHECKING:
    from mcp_resili.server.transports import HttpAccess

#: Mirrors `mcp_resili.server.app.DEFAULT_CALL_TIME_LIMIT` (not imported: ``--help`` stays fast).
DEFAULT_CALL_TIME_LIMIT = 10.0
#: Mirror `mcp_resili.server.budget`'s defaults, in MiB (`tests/test_memory_budget.py` checks they agree).
DEFAULT_EPISODE_MIB = 32
DEFAULT_SERVER_MIB = 256
DEFAULT_RESULT_MIB = 4


def _port_number(text: str) -> int:
    """A TCP port (0 picks a free one)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, got {port}")
    return port


def _non_negative(text: str) -> float:
    """A number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _add_network(parser: argparse.ArgumentParser, port: int) -> None:
    parser.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (default; for clients that start the server) or http (Streamable HTTP at /mcp)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind with --transport http; anything but loopback needs --auth-token or --insecure",
    )
    parser.add_argument(
        "--port", type=_port_number, default=port, help=f"port for --transport http (default {port})"
    )
    parser.add_argument(
        "--auth-token",
        action="append",
        help=f"bearer token every HTTP request must send (default: ${AUTH_TOKEN_ENV}); 16+ characters; "
        "repeatable: each token is a principal of its own, and episodes and handles are bound to it",
    )
    parser.add_argument(
        "--insecure", action="store_true", help="serve a non-loopback --host without a token (warns)"
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help="also accept this Host header (DNS-rebinding protection); repeatable",
    )
    parser.add_argument("--trace-dir", type=Path, help="write one JSONL trace per episode here")


def _add_budget(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-turns",
        type=int,
        help="call budget written into every trace header, which the scorer and the bounds then use "
        "(e.g. the ResiliBench paper's 10); default: each task's own",
    )


def _mebibytes(text: str) -> int:
    """A positive number of MiB, as bytes."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of MiB: {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of MiB, got {text}")
    return max(1, int(value * 1024 * 1024))


def _add_memory(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-episode-memory",
        type=_mebibytes,
        default=DEFAULT_EPISODE_MIB * 1024 * 1024,
        metavar="MIB",
        help="MiB one episode may gather (its trace and tool state); a call that would pass it is "
        f"answered EPISODE_MEMORY_LIMIT (default {DEFAULT_EPISODE_MIB})",
    )
    parser.add_argument(
        "--max-server-memory",
        type=_mebibytes,
        default=DEFAULT_SERVER_MIB * 1024 * 1024,
        metavar="MIB",
        help="MiB all live episodes may hold in memory; past it finished and idle episodes are evicted, "
        f"else the call is answered SERVER_MEMORY_LIMIT (default {DEFAULT_SERVER_MIB})",
    )
    parser.add_argument(
        "--max-result-memory",
        type=_mebibytes,
        default=DEFAULT_RESULT_MIB * 1024 * 1024,
        metavar="MIB",
        help="MiB of one call's result; a larger one is answered RESULT_TOO_LARGE "
        f"(default {DEFAULT_RESULT_MIB})",
    )


def _http_access(args: argparse.Namespace) -> HttpAccess:
    """The HTTP lock from the command line, refused now (exit 2) if the bind would be left open."""
    from mcp_resili.server.transports import HttpAccess, check_exposure

    access = HttpAccess.from_options(args.auth_token, args.insecure, args.allowed_host, os.environ)
    if args.transport == "http":
        check_exposure(args.host, access)
    return access


def _add_episode_options(serve: argparse.ArgumentParser) -> None:
    """``serve``'s options about episodes: time scale, pinned episode and trial, seeds, exposure."""
    serve.add_argument(
        "--time-scale", type=_non_negative, default=1.0, help="multiply injected delays; 0 = none"
    )
    serve.add_argument(
        "--episode",
        help="id of the one episode of a single agent (its trace is --trace-dir/ID.jsonl): the stdio "
        "connection's, and over HTTP every request's that names none (no handles, no sessions); "
        "default: stdio a random id, HTTP one episode per session or start_episode handle",
    )
    serve.add_argument(
        "--trial",
        type=int,
        help="trial every episode plays unless it names its own (fault key TASK/TRIAL, as in `run`); "
        "default: the k-th episode of a task on this server plays trial k",
    )
    serve.add_argument(
        "--forbid-client-seeds",
        action="store_true",
        help="refuse episodes that choose their own seed or fault key (the server's --seed and "
        "TASK/TRIAL keys decide every draw): for a server shared by agents that must not pick their draws",
    )
    serve.add_argument(
        "--expose-faults",
        action="store_true",
        help="attach each call's recorded event (fault decision included) to its result's _meta: "
        "for debugging only, a model that reads it learns which calls were faulted",
    )
    serve.add_argument(
        "--call-time-limit",
        type=float,
        default=DEFAULT_CALL_TIME_LIMIT,
        help="seconds a tool call may run before it is answered TOOL_TIMEOUT "
        f"(default {DEFAULT_CALL_TIME_LIMIT:g})",
    )


#: Mirror `mcp_resili.proxy.run`'s defaults (not imported: ``--help`` stays fast).
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_PROXY_CALL_TIMEOUT = 120.0
DEFAULT_UPSTREAM_SESSIONS = 32


def _add_upstream_options(proxy: argparse.ArgumentParser) -> None:
    """``proxy``'s options about its upstream: timeouts and sessions."""
    proxy.add_argument(
        "--connect-timeout",
        type=_non_negative,
        default=DEFAULT_CONNECT_TIMEOUT,
        help=f"seconds the upstream may take to answer each step of its start: the era probe, the handshake, "
        f"the tool listing (default {DEFAULT_CONNECT_TIMEOUT:g}; a first `npx -y` download may need more)",
    )
    proxy.add_argument(
        "--call-timeout",
        type=_non_negative,
        default=DEFAULT_PROXY_CALL_TIMEOUT,
        help="seconds a forwarded request may wait for the upstream, then a tool call is an "
        f"UPSTREAM_TIMEOUT error result (default {DEFAULT_PROXY_CALL_TIMEOUT:g}; 0: as long as the client)",
    )
    proxy.add_argument(
        "--shared-upstream",
        action="store_true",
        help="one upstream connection for every client (default: one upstream session per client, "
        "with that client's capabilities and protocol era)",
    )
    proxy.add_argument(
        "--max-upstream-sessions",
        type=int,
        default=DEFAULT_UPSTREAM_SESSIONS,
        help=f"upstream sessions open at once, one per client (default {DEFAULT_UPSTREAM_SESSIONS}); "
        "past it the least recently used is closed",
    )


def register(commands: Commands) -> None:
    """Add ``serve`` and ``proxy``."""
    serve = commands.add_parser("serve", help="serve a suite's tools over MCP, with faults injected")
    serve.add_argument("--suite", default=DEFAULT_SUITE, help=f"one of: {', '.join(suite_names())}")
    serve.add_argument("--task", help="task bound to episodes that do not name one (e.g. a person's session)")
    serve.add_argument(
        "--faults",
        help="none | lambda=0.0|0.1|0.2|0.3 | a suite's own (resilibench[:key=value,...], "
        "toolmaze:NP|P1..P4) | PATH.toml|.json (default: the suite's)",
    )
    add_seed(serve, what="faults")
    _add_budget(serve)
    _add_network(serve, 8765)
    _add_episode_options(serve)
    _add_memory(serve)
    serve.set_defaults(handler=serve_command)

    proxy = commands.add_parser("proxy", help="put the fault pipeline in front of any MCP server")
    proxy.add_argument("--upstream", required=True, help="'CMD ARGS' (stdio) or http(s)://HOST:PORT/mcp")
    proxy.add_argument(
        "--faults", default="none", help="none | lambda=... | resilibench[:...] | PATH.toml|.json"
    )
    proxy.add_argument(
        "--expose-faults",
        action="store_true",
        help="add the proxy's trace event (with its fault decision) to each result's _meta "
        "(default: results keep the upstream's _meta untouched)",
    )
    add_seed(proxy, what="faults")
    proxy.add_argument(
        "--time-scale", type=_non_negative, default=1.0, help="multiply injected delays; 0 = none"
    )
    _add_network(proxy, 8766)
    _add_upstream_options(proxy)
    proxy.set_defaults(handler=proxy_command)


def _settle_for_a_long_life() -> None:
    """Interpreter settings of a server that runs for days beside many clients."""
    # Large calls are checked in worker threads; while one runs, the event loop waits for the GIL at
    # most this long (default 5 ms) each time it wakes, which every other client's call pays.
    sys.setswitchinterval(0.001)
    # What exists now (modules, the suite, its tasks) lives as long as the server: out of the cyclic
    # collector's full passes, which otherwise walk it all while every client waits.
    gc.freeze()


def _check_serve_numbers(args: argparse.Namespace) -> None:
    """One line (`UserError`) for a trial, turn budget or call time limit out of range."""
    if args.trial is not None and args.trial < 0:
        raise UserError(f"--trial must be >= 0, got {args.trial}")
    if args.max_turns is not None and args.max_turns < 1:
        raise UserError(f"--max-turns must be at least 1, got {args.max_turns}")
    if args.call_time_limit <= 0:
        raise UserError(f"--call-time-limit must be positive, got {args.call_time_limit}")


def serve_command(args: argparse.Namespace) -> int:
    """Serve a suite until interrupted."""
    from mcp_resili.faults import parse_fault_spec
    from mcp_resili.faults.rules import check_rule_tools
    from mcp_resili.registry.loader import get_suite, spec_scope
    from mcp_resili.server.app import ResiliServer
    from mcp_resili.server.budget import MemoryBudget
    from mcp_resili.server.transports import serve_http, serve_stdio

    _check_serve_numbers(args)
    access = _http_access(args)
    suite = get_suite(args.suite)
    # Loaded now: a suite whose tasks do not load is one line (exit 2), not a failing prompts/list.
    _ = suite.tasks
    plan = parse_fault_spec(args.faults or suite.default_faults, spec_scope(suite))
    tools = (t.name for t in suite.library.specs)
    check_rule_tools(plan, tools, args.faults or suite.default_faults, f"suite {suite.name!r}")
    server = ResiliServer(
        suite,
        plan,
        seed=args.seed,
        task=args.task,
        trace_dir=args.trace_dir,
        time_scale=args.time_scale,
        episode=args.episode,
        trial=args.trial,
        expose_faults=args.expose_faults,
        call_time_limit=args.call_time_limit,
        max_turns=args.max_turns,
        warn_default_trial=args.trial is None,
        hand_over_events=False,  # each episode's events go to its trace file as they happen
        memory=MemoryBudget(
            episode_bytes=args.max_episode_memory,
            server_bytes=args.max_server_memory,
            result_bytes=args.max_result_memory,
        ),
        client_seeds=not args.forbid_client_seeds,
    )
    if plan.requires_suite is not None and args.task is None:
        # Its faults live in the task's data: episodes that name no task see none.
        print(
            f"mcp-resili: note: {args.faults} faults fire only in episodes bound to a task "
            "(--task ID, a prompt from the prompts list, or the runner's _meta)",
            file=sys.stderr,
        )
    started = announce("serving MCP")
    _settle_for_a_long_life()
    try:
        with sigterm_stops_like_ctrl_c():
            if args.transport == "stdio":
                anyio.run(serve_stdio, server)
            else:
                anyio.run(lambda: serve_http(server, args.host, args.port, on_started=started, access=access))
    except KeyboardInterrupt:
        pass
    finally:
        server.recorder.close()
    return 0


def proxy_command(args: argparse.Namespace) -> int:
    """Proxy an upstream server until its client leaves or the upstream goes away."""
    from mcp_resili.faults import parse_fault_spec
    from mcp_resili.proxy import ProxyServer, run_proxy
    from mcp_resili.registry.loader import spec_scope
    from mcp_resili.server.transports import serve_http, serve_stdio

    access = _http_access(args)
    plan = parse_fault_spec(args.faults, spec_scope(None))
    # Bound before the upstream starts: a busy port is one line, and no upstream is left running.
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET  # as `serve_http` binds
    sock = socket.create_server((args.host, args.port), family=family) if args.transport == "http" else None

    async def serve(proxy: ProxyServer) -> None:
        if sock is None:
            await serve_stdio(proxy)
        else:
            on_started = announce(f"proxying {args.upstream}")
            await serve_http(proxy, args.host, args.port, sock=sock, on_started=on_started, access=access)

    if args.connect_timeout <= 0:
        raise UserError(f"--connect-timeout must be positive, got {args.connect_timeout:g}")
    if args.max_upstream_sessions < 1:
        raise UserError(f"--max-upstream-sessions must be at least 1, got {args.max_upstream_sessions}")
    options = {
        "seed": args.seed,
        "trace_dir": args.trace_dir,
        "expose_faults": args.expose_faults,
        "time_scale": args.time_scale,
        "shared_upstream": args.shared_upstream,
        "connect_timeout": args.connect_timeout,
        "call_timeout": args.call_timeout or None,
        "max_sessions": args.max_upstream_sessions,
    }
    with contextlib.suppress(KeyboardInterrupt), sigterm_stops_like_ctrl_c():
        anyio.run(lambda: run_proxy(args.upstream, plan, serve, **options))
    return 0
