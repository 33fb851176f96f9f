"""Whether a fault plan makes calls wait in real time: injected delays, or answers held back.

A held answer waits until the client gives up. A run says so before it starts (``--time-scale 0``
makes such waits instant), since a run of a few episodes can otherwise take minutes with no word why.

Read from a plan's JSON form (what `BasePlan.model_dump` gives and a run stores), so a composite plan,
a fault file's rules and a resumed run's frozen plans are all read the same way.
"""

from __future__ import annotations

from typing import Any

from mcp_resili.faults.chaos import FAULT_TYPES
from mcp_resili.faults.protocol import ResponseDropped, StreamStalled

__all__ = ["waits_in_real_time"]

#: Protocol faults whose answer is never sent: the server holds it until the client's call times out.
_HELD = frozenset(str(kind.model_fields["type"].default) for kind in (ResponseDropped, StreamStalled))


def _chaos_waits(data: dict[str, Any]) -> bool:
    """A λ profile that can draw a fault type that waits (a timeout, high latency)."""
    if not float(data.get("rate", 0) or 0) > 0:
        return False
    for name, weight in dict(data.get("weights") or {}).items():
        kind = FAULT_TYPES.get(name)
        field = None if kind is None else kind.model_fields.get("delay_seconds")
        if weight > 0 and field is not None and float(field.default or 0) > 0:
            return True
    return False


def waits_in_real_time(plan: Any) -> bool:
    """Whether the plan (its JSON form: dicts and lists) can inject a delay or hold an answer."""
    if isinstance(plan, list):
        return any(waits_in_real_time(item) for item in plan)
    if not isinstance(plan, dict):
        return False
    delay = plan.get("delay_seconds")
    if isinstance(delay, int | float) and delay > 0:
        return True
    if plan.get("type") in _HELD:
        return True
    if plan.get("kind") == "chaos" and _chaos_waits(plan):
        return True
    return any(waits_in_real_time(value) for value in plan.values())
