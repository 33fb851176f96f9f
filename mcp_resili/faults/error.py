"""The explicit error fault: the agent reads an error (``isError: true``)."""

from __future__ import annotations

import random
from typing import Any, ClassVar, Literal

from pydantic import Field

from mcp_resili.faults.base import BaseFault, CallContext, ToolOutcome


def describe_error(call: CallContext, code: str) -> str:
    """The tool's declared description of ``code``, or a readable form of the code."""
    for error in call.tool.errors:
        if error.code == code:
            return error.description
    return code.replace("_", " ").lower()


class ErrorFault(BaseFault):
    """The call fails with error ``code``. On the response side the write has already happened."""

    uses_rng: ClassVar[bool] = False  # the error is the error: nothing to draw
    type: Literal["error"] = "error"
    code: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    message: str = ""
    explicit: Literal[True] = True
    #: Extra fields shown with the error (e.g. ``{"retry_after": 2}`` or an HTTP-like ``status``).
    details: dict[str, Any] = Field(default_factory=dict)

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """Replace whatever happened with the error."""
        return ToolOutcome(
            structured=None,
            error_code=self.code,
            message=self.message or describe_error(call, self.code),
            details=dict(self.details),
        )
