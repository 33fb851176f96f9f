"""Plans that need no model: no faults at all, or explicit rules (tool glob, call numbers, probability)."""

from __future__ import annotations

import difflib
import fnmatch
import functools
import random
from collections.abc import Iterable, Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mcp_resili.faults.base import BasePlan, CallContext, Fault, FaultDecision, FaultSpecError


class NoFaults(BasePlan):
    """Never inject a fault."""

    kind: Literal["none"] = "none"
    uses_rng: ClassVar[bool] = False

    def decide(self, call: CallContext, rng: random.Random) -> FaultDecision:
        """Nothing fires."""
        return _nothing_fires(self.kind, call.ordinal)


@functools.lru_cache(maxsize=1024)
def _nothing_fires(plan: str, ordinal: int) -> FaultDecision:
    # The same immutable entry for every call with this ordinal: no model to build on every call.
    return FaultDecision(plan=plan, ordinal=ordinal)


class FaultRule(BaseModel):
    """Inject ``fault`` into calls of tools matching ``tool`` (a glob).

    ``calls`` lists the 1-based call numbers of that tool in the episode that are eligible (all calls
    when omitted); an eligible call fires with ``probability``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    tool: str = "*"
    calls: tuple[int, ...] | None = None
    probability: float = Field(1.0, ge=0, le=1)
    fault: Fault

    @model_validator(mode="after")
    def _positive_calls(self) -> FaultRule:
        if self.calls is not None and any(n < 1 for n in self.calls):
            raise ValueError(f"call numbers are 1-based, got {list(self.calls)}")
        return self


class RuleFaults(BasePlan):
    """An ordered list of rules; the first rule that fires decides the call's fault."""

    kind: Literal["rules"] = "rules"
    rules: tuple[FaultRule, ...]

    def decide(self, call: CallContext, rng: random.Random) -> FaultDecision:
        """The first matching rule whose roll comes in under its probability."""
        for index, rule in enumerate(self.rules):
            if not fnmatch.fnmatchcase(call.tool.name, rule.tool):
                continue
            if rule.calls is not None and call.ordinal + 1 not in rule.calls:
                continue
            roll = rng.random()
            if roll < rule.probability:
                return FaultDecision(
                    plan=self.kind, ordinal=call.ordinal, roll=roll, rule=index, fault=rule.fault
                )
        return FaultDecision(plan=self.kind, ordinal=call.ordinal)


#: Tools every server adds to a suite's own (a rule may target the ``finish`` tool too).
SERVER_TOOLS = ("finish",)


def closest_tools(pattern: str, tools: Iterable[str], count: int = 3) -> list[str]:
    """The tool names closest to a glob ``pattern`` (its wildcards left out), best first."""
    names = sorted(set(tools))
    bare = pattern.replace("*", "").replace("?", "").replace("[", "").replace("]", "")
    found = difflib.get_close_matches(bare, names, n=count, cutoff=0.4)
    if not found:  # a prefix or a fragment: names that contain the longest literal piece
        piece = max((p for p in pattern.replace("?", "*").split("*")), key=len, default="")
        found = [n for n in names if piece and piece[: max(3, len(piece) // 2)] in n][:count]
    return found


def check_rule_tools(plan: BasePlan, tools: Iterable[str], spec: str, where: str) -> None:
    """Refuse a rules plan with a tool pattern that matches none of ``tools`` (it would never fire).

    One line naming the spec, the rule, the pattern and the closest tool names. ``where`` says whose
    tools they are (``suite 'resilibench'``, ``the upstream server``). Other plans pass.
    """
    if not isinstance(plan, RuleFaults):
        return
    tools = list(tools)
    names = [*tools, *SERVER_TOOLS]
    for index, rule in enumerate(plan.rules, 1):
        if any(fnmatch.fnmatchcase(name, rule.tool) for name in names):
            continue
        close = closest_tools(rule.tool, tools)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise FaultSpecError(
            f"fault spec {spec}: rule {index}'s tool pattern {rule.tool!r} matches no tool of {where} "
            f"(it would inject nothing){hint}"
        )


class RuleHits(BaseModel):
    """What one rule is expected to do over a set of episodes (see `expected_hits`)."""

    model_config = ConfigDict(frozen=True)
    rule: int
    tool: str
    #: Calls the rule's pattern and call numbers select (before earlier rules fire).
    matched: int
    #: Calls it is expected to inject into (its probability, after earlier rules that fired first).
    expected: float


def expected_hits(plan: RuleFaults, episodes: Iterable[Sequence[str]]) -> list[RuleHits]:
    """Each rule's matched calls and expected injections over ``episodes`` (each its tools, in call order).

    Rules are tried in order and the first that fires decides, so a rule sees a call with the chance
    that no earlier matching rule fired. The call numbers are per tool within an episode, as in `decide`.
    """
    matched = [0] * len(plan.rules)
    expected = [0.0] * len(plan.rules)
    for calls in episodes:
        ordinals: dict[str, int] = {}
        for tool in calls:
            ordinal = ordinals.get(tool, 0) + 1
            ordinals[tool] = ordinal
            unfired = 1.0
            for index, rule in enumerate(plan.rules):
                if not fnmatch.fnmatchcase(tool, rule.tool):
                    continue
                if rule.calls is not None and ordinal not in rule.calls:
                    continue
                matched[index] += 1
                expected[index] += unfired * rule.probability
                unfired *= 1 - rule.probability
    return [
        RuleHits(rule=index + 1, tool=rule.tool, matched=matched[index], expected=expected[index])
        for index, rule in enumerate(plan.rules)
    ]
