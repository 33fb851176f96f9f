"""The tiny suite's own scripted agent, run as ``scripted:tiny-twice``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mcp_resili import (
    ModelRequest,
    ModelResponse,
    ToolCall,
    call_results,
    finish_response,
    require_task,
    resolve_arguments,
)


@dataclass(frozen=True)
class TwiceAgent:
    """Calls every workflow step twice, in order, on the inputs alone (results it needs are taken
    from the step's first answer); then finishes. Its writes are repeated, so it never scores full
    on a task that writes."""

    answers_at_once: ClassVar[bool] = True
    name: str = "scripted:tiny-twice"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The next call of the doubled plan, or finish."""
        task = require_task(request, self.name)
        pairs = call_results(request)
        steps = [step for step in task.workflow.steps for _ in range(2)]
        if len(pairs) >= len(steps):
            return finish_response(len(pairs) + 1, "completed", "ran every step twice")
        outputs = {
            step.id: result.structured
            for step, (_, result) in zip(steps[::2], pairs[::2], strict=False)
            if not result.is_error
        }
        step = steps[len(pairs)]
        try:
            arguments = resolve_arguments(step, task.inputs, outputs)
        except (KeyError, TypeError):
            arguments = {}  # an upstream answer it needs failed: the server refuses the call
        call = ToolCall(id=f"call_{len(pairs) + 1}_{step.id}", name=step.tool, arguments=arguments)
        return ModelResponse(tool_calls=(call,), stop_reason="tool_use")
