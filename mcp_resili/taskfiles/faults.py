"""ToolMaze-style deterministic faults at a task's chosen workflow steps: ``steps:P1`` … ``steps:P4``.

A task file names the steps where faults strike (``[faults] steps``, default every step). Each step is
a slot; its tools are the step's own and its alternatives' (possibly on another server). The first of
them the agent calls becomes the slot's victim and the slot is disarmed for the others. P1 (explicit,
transient) fails the victim's first call with an error, P2 (explicit, permanent) every call of it; P3
and P4 run the call and corrupt its result, once or always (`CorruptResult`). NP never fires. No
randomness: the same task and mode give the same faults for every model, seed and trial.

An implicit corruption is shaped from the real server's own result: every number in its JSON values
and in its text is shifted the same way, so the result keeps its keys, its text its layout, and it is
consistent with itself, but it is wrong.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any, Literal

from mcp_resili.faults.base import (
    BaseFault,
    BasePlan,
    CallContext,
    FaultDecision,
    FaultSpecError,
    ToolOutcome,
)
from mcp_resili.faults.error import ErrorFault
from mcp_resili.taskfiles.model import FileTask

Mode = Literal["NP", "P1", "P2", "P3", "P4"]
MODES: tuple[Mode, ...] = ("NP", "P1", "P2", "P3", "P4")
_TRANSIENT = frozenset({"P1", "P3"})
_EXPLICIT = frozenset({"P1", "P2"})
#: (code, message) of the explicit modes; one is picked per task and step by a hash (no draw).
_TRANSIENT_ERRORS = (
    ("SERVICE_UNAVAILABLE", "Service Temporarily Unavailable"),
    ("GATEWAY_TIMEOUT", "Gateway Timeout"),
    ("TOO_MANY_REQUESTS", "Too Many Requests"),
    ("RESOURCE_LOCKED", "Resource Temporarily Locked"),
)
_PERMANENT_ERRORS = (
    ("TOOL_REMOVED", "Tool Permanently Removed"),
    ("ACCESS_FORBIDDEN", "Access Forbidden"),
    ("NOT_IMPLEMENTED", "Not Implemented"),
    ("QUOTA_EXHAUSTED", "Account Quota Exhausted"),
)
STATE_KEY = "steps/victims"
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")


def _pick(options: tuple[tuple[str, str], ...], *parts: str) -> tuple[str, str]:
    digest = hashlib.sha256("/".join(parts).encode()).digest()
    return options[digest[0] % len(options)]


def shift_number(token: str) -> str:
    """A number shifted: an integer by one (keeping its width), a decimal by a tenth of it."""
    if "." in token:
        value = float(token)
        decimals = len(token.split(".")[1])
        return f"{value + max(abs(value) * 0.1, 10**-decimals):.{decimals}f}"
    shifted = str(int(token) + 1)
    digits = token.lstrip("-")
    return ("-" if token.startswith("-") and shifted.startswith("-") else "") + shifted.lstrip("-").zfill(
        len(digits)
    )


def corrupt_text(text: str) -> str:
    """Every number of ``text`` shifted; a text without numbers loses its last line (or word)."""
    if _NUMBER.search(text):
        return _NUMBER.sub(lambda m: shift_number(m.group(0)), text)
    lines = text.rstrip("\n").split("\n")
    if len(lines) > 1:
        return "\n".join(lines[:-1])
    words = text.split(" ")
    return " ".join(words[:-1]) if len(words) > 1 else ""


def corrupt_value(value: Any) -> Any:
    """A JSON value with every number (and every number inside a string) shifted; keys unchanged."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value + max(abs(value) * 0.1, 0.1), 6)
    if isinstance(value, str):
        return _NUMBER.sub(lambda m: shift_number(m.group(0)), value) if _NUMBER.search(value) else value
    if isinstance(value, list):
        return [corrupt_value(v) for v in value]
    if isinstance(value, dict):
        return {k: corrupt_value(v) for k, v in value.items()}
    return value


class CorruptResult(BaseFault):
    """The call ran; its result comes back shaped as the server's own, every figure in it wrong."""

    type: Literal["corrupt_result"] = "corrupt_result"
    side: Literal["response"] = "response"
    explicit: bool = False

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """The outcome with its structured content and its text corrupted alike; errors pass through."""
        if outcome is None or outcome.is_error or outcome.structured is None:
            if outcome is None:
                raise ValueError("corrupt_result is response-side: it needs the tool's outcome")
            return outcome
        structured = outcome.structured
        if list(structured) == ["text"] and isinstance(structured["text"], str):
            plain = corrupt_text(structured["text"])
            return ToolOutcome(structured={"text": plain}, text=plain)
        corrupted = corrupt_value(structured)
        if corrupted == structured:  # nothing numeric: the text-only rule on its string fields
            corrupted = {k: corrupt_text(v) if isinstance(v, str) else v for k, v in structured.items()}
        text: str | None = outcome.text
        if text is not None:
            text = (
                corrupt_text(text) if _NUMBER.search(text) else _replace_strings(text, structured, corrupted)
            )
        return ToolOutcome(structured=corrupted, text=text)


def _replace_strings(text: str, before: dict[str, Any], after: dict[str, Any]) -> str:
    for key, old in before.items():
        new = after.get(key)
        if isinstance(old, str) and isinstance(new, str) and old != new and old in text:
            text = text.replace(old, new, 1)
    return text


class StepFaultPlan(BasePlan):
    """ToolMaze's perturbation modes at a task file's chosen steps (see the module docstring)."""

    kind: Literal["steps"] = "steps"
    mode: Mode

    def decide(self, call: CallContext, rng: random.Random) -> FaultDecision:
        """Arm a slot on its first call, then perturb its victim once (transient) or always."""

        def quiet(reason: str) -> FaultDecision:
            return FaultDecision(plan=self.kind, ordinal=call.ordinal, reason=reason)

        task = call.task
        if self.mode == "NP":
            return quiet("no perturbation (NP)")
        if not isinstance(task, FileTask):
            return quiet("no task-file task bound to this episode")
        tool = call.tool.name
        slot = next((s for s in task.fault_steps if tool in task.tools_of_step(s)), None)
        if slot is None:
            return quiet(f"{tool} does no step where faults strike")
        victims: dict[str, str] = call.state.setdefault(STATE_KEY, {})
        victim = victims.get(slot)
        if victim is None:
            victims[slot] = tool
            reason = f"step {slot}: {tool} is the first tool called, it becomes the victim"
        elif victim != tool:
            return quiet(f"step {slot} is disarmed (victim is {victim})")
        elif self.mode in _TRANSIENT:
            return quiet(f"step {slot}: transient fault on {tool} already spent")
        else:
            reason = f"step {slot}: permanent fault on victim {tool}"
        return FaultDecision(
            plan=self.kind, ordinal=call.ordinal, reason=reason, fault=self._fault(task, slot)
        )

    def _fault(self, task: FileTask, slot: str) -> BaseFault:
        if self.mode in _EXPLICIT:
            options = _TRANSIENT_ERRORS if self.mode == "P1" else _PERMANENT_ERRORS
            code, message = _pick(options, task.id, slot, self.mode)
            return ErrorFault(code=code, message=message, transient=self.mode == "P1")
        return CorruptResult(transient=self.mode == "P3")


def parse_steps_spec(spec: str, args: str) -> BasePlan:
    """``steps:NP`` … ``steps:P4``."""
    mode = args.strip().upper()
    if mode not in MODES:
        raise FaultSpecError(f"fault spec {spec!r}: give a mode, one of {', '.join(MODES)} (e.g. steps:P2)")
    return StepFaultPlan(mode=mode)
