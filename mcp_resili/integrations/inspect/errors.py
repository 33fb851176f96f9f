"""Bad input to our inspect tasks and models: one line on inspect's command line, no traceback."""

from __future__ import annotations

from inspect_ai._util.error import PrerequisiteError


class ArgumentError(PrerequisiteError, ValueError):
    """A bad ``-T`` task argument or ``mcp_resili/NAME`` model: inspect's CLI prints the message alone.

    inspect prints a `PrerequisiteError` without a traceback and exits 1; it is a `ValueError` too.
    """

    def __init__(self, message: str) -> None:
        PrerequisiteError.__init__(self, message)
        ValueError.__init__(self, message)
