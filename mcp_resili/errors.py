"""User errors: the base of every error that means "this input cannot work" (as opposed to a bug).

Also plain words for pydantic validation errors, so no message shows pydantic's internals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class UserError(ValueError):
    """Bad input from a user: the CLI prints the message and exits 2; nothing stored is lost."""


def error_path(loc: tuple[int | str, ...]) -> str:
    """``rules[0].fault.code``: keys joined with dots, list positions in brackets."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


def shown_value(value: object) -> str:
    """A value as a user typed it, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def plain_validation_error(exc: ValidationError, limit: int = 3) -> str:
    """A pydantic error in plain words: ``where: what was expected (got ...)``.

    Pydantic's internals (error types, input dumps, documentation links) are left out; at most
    ``limit`` problems are named.
    """
    problems = []
    for error in exc.errors():
        text = error["msg"].replace("Input should be", "expected")
        if error["type"] not in ("missing", "extra_forbidden"):
            text += f" (got {shown_value(error['input'])})"
        problems.append(f"{error_path(tuple(error['loc'])) or 'top level'}: {text}")
    more = f"; and {len(problems) - limit} more" if len(problems) > limit else ""
    return "; ".join(problems[:limit]) + more
