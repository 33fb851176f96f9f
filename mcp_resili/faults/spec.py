"""Fault SPEC strings and fault files.

A SPEC is ``NAME``, ``NAME:ARGS`` or ``NAME=ARGS`` for a registered name, or the path of a TOML/JSON
fault file holding one plan. ``protocol:LEVEL[+SPEC]`` is a protocol-fault profile (``light``,
``medium``, ``heavy``), over the plan of another SPEC when one follows the ``+``.
The generic names (`GENERIC_SPECS`: ``none``, ``lambda``, ``protocol``) work everywhere; the names
beyond them come with the `FaultSpecScope` the caller hands down (a suite's own, such as
``resilibench`` or ``toolmaze:P1``; for the proxy, every installed suite's). A plan that needs one
suite's tasks (`BasePlan.requires_suite`) is refused, before anything runs, outside that suite.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_resili.faults.base import BasePlan, FaultSpecError, parse_plan
from mcp_resili.faults.chaos import lambda_profile
from mcp_resili.faults.protocol import PROFILES, protocol_profile
from mcp_resili.faults.rules import NoFaults

#: Turns (whole spec, text after the name's ':' or '=') into a plan, or raises `FaultSpecError`.
FaultSpecParser = Callable[[str, str], BasePlan]


@dataclass(frozen=True)
class FaultSpecScope:
    """Where a SPEC is parsed: the SPEC names beyond the generic ones, and the suite plans must fit.

    A suite hands down its own (`Suite.spec_scope`); a server without tasks (the proxy) has
    ``suite=None``, so a plan that needs a suite's tasks is refused. The top may add ``elsewhere``:
    the other installed suites' names, asked only for a name the scope does not know (so a suite can
    be run under another's failure model, e.g. ``resilibench``, and a plan bound to another suite's
    tasks is refused naming that suite).
    """

    #: The suite the plan will serve; None for a server without tasks.
    suite: str | None = None
    #: SPEC name -> parser, beside `GENERIC_SPECS`.
    parsers: Mapping[str, FaultSpecParser] = field(default_factory=dict)
    #: Other suites' SPEC names -> parser, found lazily by the top that built the scope.
    elsewhere: Callable[[], Mapping[str, FaultSpecParser]] | None = None

    def parser(self, name: str) -> FaultSpecParser | None:
        """The parser of SPEC name ``name``: generic, the scope's own, else another suite's."""
        found = GENERIC_SPECS.get(name) or self.parsers.get(name)
        if found is None and self.elsewhere is not None:
            found = self.elsewhere().get(name)
        return found

    def with_elsewhere(self, elsewhere: Callable[[], Mapping[str, FaultSpecParser]]) -> FaultSpecScope:
        """The same scope, with other suites' names to fall back on."""
        return FaultSpecScope(self.suite, self.parsers, elsewhere)


#: The generic SPEC names only, for no suite.
GENERIC_SCOPE = FaultSpecScope()


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


def _protocol(spec: str, args: str, scope: FaultSpecScope = GENERIC_SCOPE) -> BasePlan:
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
        base = parse_fault_spec(rest, scope)
    return protocol_profile(level, base)


#: SPEC names every suite (and the proxy) accepts.
GENERIC_SPECS: dict[str, FaultSpecParser] = {"none": _none, "lambda": _lambda, "protocol": _protocol}


def spec_names(scope: FaultSpecScope = GENERIC_SCOPE) -> list[str]:
    """The SPEC names to suggest in ``scope``: the generic ones and the scope's own."""
    return sorted({*GENERIC_SPECS, *scope.parsers})


def check_plan_fits(plan: BasePlan, scope: FaultSpecScope, spec: str) -> None:
    """Refuse a plan that needs another suite's tasks (it would inject nothing and mislabel results)."""
    needed = plan.requires_suite
    if needed is not None and scope.suite != needed:
        where = (
            f"suite {scope.suite!r}" if scope.suite is not None else "a server without tasks (e.g. the proxy)"
        )
        raise FaultSpecError(
            f"fault spec {spec!r} works only with suite {needed!r} (its faults live in that suite's "
            f"task data); it cannot apply to {where}"
        )


def parse_fault_spec(spec: str, scope: FaultSpecScope = GENERIC_SCOPE) -> BasePlan:
    """Turn a SPEC into a validated fault plan that fits ``scope``, or raise `FaultSpecError`."""
    match = re.match(r"^([A-Za-z][\w-]*)(?:[:=](.*))?$", spec)
    name, args = (match.group(1), match.group(2) or "") if match else ("", "")
    if name == "protocol":  # its base plan (after '+') is parsed in the same scope
        plan = _protocol(spec, args, scope)
        check_plan_fits(plan, scope, spec)
        return plan
    parser = scope.parser(name) if match else None
    if parser is not None:
        plan = parser(spec, args)
    else:
        path = Path(spec)
        if not path.is_file() and (path.suffix.lower() in (".toml", ".json") or "/" in spec):
            what = "is a directory" if path.is_dir() else "does not exist"
            raise FaultSpecError(f"fault file {spec} {what}")
        if not path.is_file():
            names = ", ".join(spec_names(scope))
            raise FaultSpecError(
                f"unknown fault spec {spec!r}: use one of {names} (e.g. lambda=0.2), "
                "or the path of a .toml/.json fault file"
            )
        plan = load_fault_file(path)
    check_plan_fits(plan, scope, spec)
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
