"""The ``mcp-resili`` command line: one module per group of commands, each owning its arguments.

Every module has ``register(commands)``, which adds its subcommands with ``handler=FUNCTION`` (a
function of the parsed arguments returning the exit status). Handlers import what they need when they
run, so ``mcp-resili --help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from mcp_resili.cli import check, config, export, modelapi, plan, report, run, serve, tasks, workflow
from mcp_resili.cli.common import one_line, user_error_in
from mcp_resili.constants import VERSION

Handler = Callable[[argparse.Namespace], int]


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (with where to find the usage), exit 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` on stderr and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (subcommands inherit one-line usage errors)."""
    parser = OneLineParser(
        prog="mcp-resili",
        description="Chaos engineering and robustness benchmarking for tool-using LLM agents over MCP.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (serve, run, tasks, report, plan, export, workflow, check, config, modelapi):
        module.register(commands)
    return parser


class OneLineFormatter(logging.Formatter):
    """Log records on one line each: an exception is named with its message, never as a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        """The record's line, with ``(ExceptionType: first line of its message)`` appended."""
        line = super().format(logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None}))
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            line += f" ({type(exc).__name__}{': ' + first if first else ''})"
        return line


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status.

    A user's mistake (`UserError`, or an `OSError` such as a busy port or an unreadable file), also
    when it surfaces inside an exception group, is one line on stderr and exit status 2; nothing
    already stored is lost. Log records are one line each (no tracebacks).
    """
    args = build_parser().parse_args(argv)
    handler_out = logging.StreamHandler(sys.stderr)
    handler_out.setFormatter(OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler_out])
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("mcp-resili: interrupted", file=sys.stderr)  # `run` says more itself (cli/run.py)
        return 130
    except Exception as exc:
        mistake = user_error_in(exc)
        if mistake is None:
            raise
        print(f"mcp-resili: error: {one_line(mistake)}", file=sys.stderr)
        return 2
