"""``check``: contract tests for any MCP server's tools (for CI)."""

from __future__ import annotations

import argparse
import functools
import json
import sys

import anyio

from mcp_resili.cli.common import Commands


def register(commands: Commands) -> None:
    """Add ``check``."""
    check = commands.add_parser(
        "check",
        help="contract-test any MCP server's tools (for CI)",
        description="Exit status: 0 the contract holds, 1 contract violations (listed), "
        "2 the server could not be checked (not startable, unreachable, died, timed out; one line why).",
    )
    check.add_argument(
        "--server", help="'CMD ARGS' (stdio) or http(s)://HOST:PORT/mcp; default: our own server"
    )
    check.add_argument("--call", action="store_true", help="also call every tool with sample arguments")
    check.add_argument("--strict", action="store_true", help="fail on warnings too")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument("--verbose", action="store_true", help="also show notes (e.g. OpenAI strict mode)")
    check.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds the server may take to answer any one request (default 30)",
    )
    check.set_defaults(handler=check_command)


def check_command(args: argparse.Namespace) -> int:
    """Exit 0 when the contract holds, 1 on violations, 2 when the server could not be checked."""
    from mcp_resili.check import check_target
    from mcp_resili.errors import UserError

    if not args.timeout > 0:
        raise UserError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    target = args.server or f"{sys.executable} -m mcp_resili serve --faults none"
    check = functools.partial(check_target, target, call_tools=args.call, timeout=args.timeout)
    report = anyio.run(check)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.render(verbose=args.verbose))
    return 0 if report.ok(strict=args.strict) else 1
