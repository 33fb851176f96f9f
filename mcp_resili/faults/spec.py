"""Parse a fault SPEC: ``none``, ``resilibench[:key=value,...]``, or a path to a TOML/JSON file."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from mcp_resili.faults.model import FaultPlan, NoFaults, ResiliBenchFaults

_PLAN_ADAPTER: TypeAdapter[FaultPlan] = TypeAdapter(FaultPlan)

#: Short names for the ResiliBench parameters, usable as ``resilibench:base=0.7``.
_ALIASES = {
    "base": "base_success",
    "unmet": "unmet_dependency_factor",
    "failed": "failed_dependency_factor",
    "history": "history_factor",
    "window": "history_window",
    "min": "min_success",
    "max": "max_success",
}


class FaultSpecError(ValueError):
    """A fault SPEC or fault file that cannot be used; the message says what and where."""


def _overrides(spec: str, text: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, raw = item.partition("=")
        if not sep:
            raise FaultSpecError(f"fault spec {spec!r}: expected key=value, got {item!r}")
        key = _ALIASES.get(key.strip(), key.strip())
        raw = raw.strip()
        values[key] = (
            None if raw.lower() in ("none", "all") else json.loads(raw) if raw[:1].isdigit() else raw
        )
    return values


def parse_fault_spec(spec: str) -> FaultPlan:
    """Turn a SPEC string into a validated fault plan, or raise `FaultSpecError` saying why."""
    name, _, rest = spec.partition(":")
    try:
        if name == "none" and not rest:
            return NoFaults()
        if name == "resilibench":
            return ResiliBenchFaults.model_validate(_overrides(spec, rest))
    except (ValidationError, json.JSONDecodeError) as exc:
        raise FaultSpecError(f"fault spec {spec!r}: {exc}") from None
    path = Path(spec)
    if not path.is_file():
        raise FaultSpecError(
            f"unknown fault spec {spec!r}: use 'none', 'resilibench[:key=value,...]' "
            f"(keys: {', '.join(sorted(_ALIASES))}), or the path of a .toml/.json fault file"
        )
    return load_fault_file(path)


def load_fault_file(path: Path) -> FaultPlan:
    """Load a fault plan from a TOML or JSON file."""
    try:
        text = path.read_text(encoding="utf-8")
        raw = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise FaultSpecError(f"cannot read fault file {path}: {exc}") from None
    try:
        return _PLAN_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise FaultSpecError(f"invalid fault file {path}:\n{exc}") from None


def plan_to_dict(plan: FaultPlan) -> dict[str, Any]:
    """JSON-ready form of a plan, as recorded in trace headers."""
    data: dict[str, Any] = _PLAN_ADAPTER.dump_python(plan, mode="json")
    return data
