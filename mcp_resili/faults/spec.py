"""Fault SPEC strings and fault files.

A SPEC is ``NAME``, ``NAME:ARGS`` or ``NAME=ARGS`` for a registered name, or the path of a TOML/JSON
fault file holding one plan. ``protocol:LEVEL[+SPEC]`` is a protocol-fault profile (``light``,
``medium``, ``heavy``), over the plan of another SPEC when one follows the ``+``.
The generic names (`GENERIC_SPECS`: ``none``, ``lambda``) work for every
suite; a suite adds its own through `Suite.fault_specs` (``resilibench``, ``toolmaze:P1``...). A plan
that needs one suite's tasks (`BasePlan.requires_suite`) is refused, before anything runs, for any
other suite.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_resili.faults.base import BasePlan, FaultSpecError, parse_plan
from mcp_resili.faults.chaos import lambda_profile
from mcp_resili.faults.protocol import PROFILES, protocol_profile
from mcp_resili.faults.rules import NoFaults

if TYPE_CHECKING:
    from mcp_resili.registry.suites import Suite

#: Turns (whole spec, text after the name's ':' or '=') into a plan, or raises `FaultSpecError`.
FaultSpecParser = Callable[[str, str], BasePlan]


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


def _none(spec: str, args: str) -> BasePlan:
    if args:
        raise FaultSpecError(f"fault spec {spec!r}: 'none' takes no arguments")
    return NoFaults()


def _lambda(spec: str, args: str) -> BasePlan:
    try:
        return lambda_profile(args)
    except ValueError as exc:
        raise FaultSpecError(f"fault spec {spec!r}: {exc}") from None


def _protocol(spec: str, args: str, suite: Suite | None = None) -> BasePlan:
    level, plus, rest = args.partition("+")
    if level not in PROFILES:
        raise FaultSpecError(
            f"fault spec {spec!r}: protocol takes a profile, one of {', '.join(PROFILES)} "
            "(e.g. protocol:medium, or protocol:light+resilibench over a suite's own faults)"
        )
    base = None
    if plus:
        if not rest or rest.startswith("protocol"):
            raise FaultSpecError(f"fault spec {spec!r}: after '+' give another SPEC (e.g. resilibench)")
        base = parse_fault_spec(rest, suite)
    return protocol_profile(level, base)


#: SPEC names every suite (and the proxy) accepts.
GENERIC_SPECS: dict[str, FaultSpecParser] = {"none": _none, "lambda": _lambda, "protocol": _protocol}


def _installed_specs() -> dict[str, tuple[str, FaultSpecParser]]:
    """Every installed suite's SPEC names → (suite, parser); broken suites are skipped."""
    from mcp_resili.registry.suites import load_all_suites

    found: dict[str, tuple[str, FaultSpecParser]] = {}
    for suite in load_all_suites().values():
        for name, parser in suite.fault_specs.items():
            found.setdefault(name, (suite.name, parser))
    return found


def spec_names(suite: Suite | None) -> list[str]:
    """The SPEC names to suggest for ``suite``: the generic ones and the suite's own.

    Outside any suite (e.g. the proxy) every installed suite's names are suggested.
    """
    own = suite.fault_specs if suite is not None else _installed_specs()
    return sorted({*GENERIC_SPECS, *own})


def check_plan_fits(plan: BasePlan, suite: Suite | None, spec: str) -> None:
    """Refuse a plan that needs another suite's tasks (it would inject nothing and mislabel results)."""
    needed = plan.requires_suite
    if needed is not None and (suite is None or suite.name != needed):
        where = f"suite {suite.name!r}" if suite is not None else "a server without tasks (e.g. the proxy)"
        raise FaultSpecError(
            f"fault spec {spec!r} works only with suite {needed!r} (its faults live in that suite's "
            f"task data); it cannot apply to {where}"
        )


def parse_fault_spec(spec: str, suite: Suite | None = None) -> BasePlan:
    """Turn a SPEC into a validated fault plan that fits ``suite``, or raise `FaultSpecError`."""
    match = re.match(r"^([A-Za-z][\w-]*)(?:[:=](.*))?$", spec)
    name, args = (match.group(1), match.group(2) or "") if match else ("", "")
    if name == "protocol":  # its base plan (after '+') is parsed for the same suite
        plan = _protocol(spec, args, suite)
        check_plan_fits(plan, suite, spec)
        return plan
    parser: FaultSpecParser | None = GENERIC_SPECS.get(name)
    if parser is None and suite is not None:
        parser = suite.fault_specs.get(name)
    if parser is None and match:
        parser = _installed_specs().get(name, ("", None))[1]
    if parser is not None:
        plan = parser(spec, args)
    else:
        path = Path(spec)
        if not path.is_file() and (path.suffix.lower() in (".toml", ".json") or "/" in spec):
            what = "is a directory" if path.is_dir() else "does not exist"
            raise FaultSpecError(f"fault file {spec} {what}")
        if not path.is_file():
            names = ", ".join(spec_names(suite))
            raise FaultSpecError(
                f"unknown fault spec {spec!r}: use one of {names} (e.g. lambda=0.2), "
                "or the path of a .toml/.json fault file"
            )
        plan = load_fault_file(path)
    check_plan_fits(plan, suite, spec)
    return plan


def load_fault_file(path: Path) -> BasePlan:
    """Load a fault plan from a TOML or JSON file."""
    try:
        text = path.read_text(encoding="utf-8")
        raw = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise FaultSpecError(f"cannot read fault file {path}: {exc}") from None
    try:
        return parse_plan(raw)
    except FaultSpecError as exc:
        raise FaultSpecError(f"invalid fault file {path}: {exc}") from None
