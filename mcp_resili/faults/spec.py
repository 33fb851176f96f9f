"""Fault SPEC strings and fault files.

A SPEC is ``NAME``, ``NAME:ARGS`` or ``NAME=ARGS`` for a registered name (`NAMED_SPECS`), or the
path of a TOML/JSON fault file holding one plan. Suites register their profiles by adding a parser.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from mcp_resili.errors import UserError
from mcp_resili.faults.chaos import lambda_profile
from mcp_resili.faults.plans import FaultPlan
from mcp_resili.faults.resilibench import ResiliBenchFaults
from mcp_resili.faults.rules import NoFaults
from mcp_resili.faults.toolmaze import MODES, ToolMazeFaults

_PLAN_ADAPTER: TypeAdapter[FaultPlan] = TypeAdapter(FaultPlan)


class FaultSpecError(UserError):
    """A fault SPEC or fault file that cannot be used; the message says what and where."""


def parse_overrides(spec: str, text: str, aliases: dict[str, str] | None = None) -> dict[str, Any]:
    """``key=value,key=value`` → dict; numbers become numbers, ``none``/``all`` become None."""
    values: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, raw = item.partition("=")
        if not sep:
            raise FaultSpecError(f"fault spec {spec!r}: expected key=value, got {item!r}")
        key = (aliases or {}).get(key.strip(), key.strip())
        raw = raw.strip()
        if raw.lower() in ("none", "all"):
            values[key] = None
        else:
            try:
                values[key] = json.loads(raw)
            except json.JSONDecodeError:
                values[key] = raw
    return values


def _none(spec: str, args: str) -> FaultPlan:
    if args:
        raise FaultSpecError(f"fault spec {spec!r}: 'none' takes no arguments")
    return NoFaults()


#: Short names for the ResiliBench parameters, usable as ``resilibench:base=0.7``.
RESILIBENCH_ALIASES = {
    "base": "base_success",
    "unmet": "unmet_dependency_factor",
    "failed": "failed_dependency_factor",
    "history": "history_factor",
    "window": "history_window",
    "min": "min_success",
    "max": "max_success",
}


def _resilibench(spec: str, args: str) -> FaultPlan:
    return ResiliBenchFaults.model_validate(parse_overrides(spec, args, RESILIBENCH_ALIASES))


def _lambda(spec: str, args: str) -> FaultPlan:
    try:
        return lambda_profile(args)
    except ValueError as exc:
        raise FaultSpecError(f"fault spec {spec!r}: {exc}") from None


def _toolmaze(spec: str, args: str) -> FaultPlan:
    mode = args.strip().upper()
    if mode not in MODES:
        raise FaultSpecError(f"fault spec {spec!r}: ToolMaze mode must be one of {', '.join(MODES)}")
    return ToolMazeFaults(mode=mode)


#: Registered SPEC names → parser of (whole spec, text after the name's ':' or '=').
NAMED_SPECS: dict[str, Callable[[str, str], FaultPlan]] = {
    "none": _none,
    "resilibench": _resilibench,
    "lambda": _lambda,
    "toolmaze": _toolmaze,
}


def parse_fault_spec(spec: str) -> FaultPlan:
    """Turn a SPEC string into a validated fault plan, or raise `FaultSpecError` saying why."""
    match = re.match(r"^([A-Za-z][\w-]*)(?:[:=](.*))?$", spec)
    if match and match.group(1) in NAMED_SPECS:
        try:
            return NAMED_SPECS[match.group(1)](spec, match.group(2) or "")
        except ValidationError as exc:
            raise FaultSpecError(f"fault spec {spec!r}: {exc}") from None
    path = Path(spec)
    if not path.is_file():
        raise FaultSpecError(
            f"unknown fault spec {spec!r}: use one of {', '.join(sorted(NAMED_SPECS))} "
            f"(e.g. toolmaze:P3, resilibench:base=0.7; keys {', '.join(sorted(RESILIBENCH_ALIASES))}), "
            "or the path of a .toml/.json fault file"
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


def load_plan_dict(raw: dict[str, Any]) -> FaultPlan:
    """A fault plan from its recorded JSON form (`plan_to_dict`), or `FaultSpecError`."""
    try:
        return _PLAN_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise FaultSpecError(f"invalid fault plan {raw!r}: {exc}") from None
