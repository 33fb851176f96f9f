"""Workflow plans as shown to the agent, and the seven flaw types that corrupt them (paper §3.3, App. C.3).

A `Plan` is what the optimal-workflow prompt renders: ordered steps, each a tool with the reason it
is there, the tools it requires, and where its arguments come from. `apply_flaw` returns a changed
copy; every method is written so the rendered plan always differs from the optimal one (the
reference code's parameter, logic and drift flaws changed only hidden metadata).

Methods per type (the first is the default; it is the one the paper's robustness runs used):

=======================  ======================  =========================================
type                     methods                 what changes
=======================  ======================  =========================================
sequence_disorder        dependency, swap        steps moved before their prerequisites / swapped
tool_misuse              similar, wrong_category tools replaced by a lexically similar tool / one
                                                 from another category
parameter_error          wrong, missing,         an argument gets a wrong value / is dropped /
                         wrong_type              gets a value of the wrong type
missing_step             critical, middle,       interior steps dropped (endpoints kept) /
                         validation              validators dropped
redundant_operations     duplicate, unnecessary  steps repeated / logger, cache, tracker added
logical_inconsistency    format, unrelated       a step reads the output of an incompatible step /
                                                 a tool of an absent category inserted

Inserted steps (``unnecessary``, ``unrelated``) read an earlier step's output, as a repeated step
(``duplicate``) does: a reader can follow every step of a flawed plan, so the flaw costs what it
is (a call that does nothing for the task), never a call no agent could make.
semantic_drift           drift, mismatch         tools replaced in a chain, each similar to the
                                                 previous replacement / by a moderately similar tool
=======================  ======================  =========================================

How many steps a severity touches follows the reference code (n = plan length): light 1; medium
2 or 3; severe about half the plan or all of it (see each method). Randomness comes from an RNG
seeded by (task id, type, severity, method).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from mcp_resili.errors import UserError
from mcp_resili.tasks.model import ConstantBinding, InputBinding, StepBinding, Task
from mcp_resili.tools import ToolLibrary
from mcp_resili.tools.search import ToolIndex

Severity = Literal["light", "medium", "severe"]
SEVERITIES: tuple[Severity, ...] = ("light", "medium", "severe")

FLAW_METHODS: dict[str, tuple[str, ...]] = {
    "sequence_disorder": ("dependency", "swap"),
    "tool_misuse": ("similar", "wrong_category"),
    "parameter_error": ("wrong", "missing", "wrong_type"),
    "missing_step": ("critical", "middle", "validation"),
    "redundant_operations": ("duplicate", "unnecessary"),
    "logical_inconsistency": ("format", "unrelated"),
    "semantic_drift": ("drift", "mismatch"),
}
FLAW_TYPES = tuple(FLAW_METHODS)
#: Other spellings accepted on the command line (the issue's and the paper's names).
FLAW_ALIASES = {
    "sequential_ordering": "sequence_disorder",
    "redundant_operation": "redundant_operations",
    "logic_discontinuity": "logical_inconsistency",
    "logical_discontinuity": "logical_inconsistency",
    "missing_steps": "missing_step",
    "parameter_errors": "parameter_error",
}
FILLER_TOOLS = ("utility_logger", "utility_cache", "utility_tracker")
#: Tools a flaw may insert, with the shape of ``data`` each needs: any payload, parsed records, or text
#: content. They have no declared dependencies, no argument but ``data`` that the world checks and
#: (``output_format``, below) a constant: an inserted step is then a call a reader can follow, fed
#: with an earlier step's output, which costs what a redundant call costs and nothing more.
INSERTABLE_TOOLS: dict[str, Literal["any", "records", "content"]] = {
    "utility_logger": "any",
    "utility_cache": "any",
    "utility_tracker": "any",
    "utility_helper": "any",
    "integration_scheduler": "any",
    "file_operations_compressor": "any",
    "computation_simulator": "any",
    "integration_mapper": "records",
    "data_processing_filter": "records",
    "computation_optimizer": "records",
    "data_processing_parser": "content",
    "file_operations_converter": "content",
}
_INSERTED_CONSTANTS = {"output_format": '"json"'}


class FlawError(UserError):
    """A flaw specification that cannot be used."""


class PlanStep(BaseModel):
    """One step of a rendered plan."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tool: str
    reason: str
    requires: tuple[str, ...] = ()
    #: Parameter → where its value comes from, as the agent reads it.
    arguments: dict[str, str] = {}
    note: str | None = None


class Plan(BaseModel):
    """An ordered workflow plan."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    steps: tuple[PlanStep, ...]

    @property
    def tools(self) -> list[str]:
        """The tools in plan order."""
        return [s.tool for s in self.steps]


def _argument_text(task: Task, tool_of: dict[str, str], binding: object) -> str:
    if isinstance(binding, InputBinding):
        return f"{json.dumps(task.inputs[binding.key])} (task input `{binding.key}`)"
    if isinstance(binding, StepBinding):
        return f"the `{binding.path}` returned by {tool_of[binding.step]}"
    if isinstance(binding, ConstantBinding):
        return json.dumps(binding.value, sort_keys=True)
    raise TypeError(f"unknown binding {binding!r}")


def optimal_plan(task: Task, library: ToolLibrary, order: list[str] | None = None) -> Plan:
    """The plan of ``task`` in ``order`` (step ids; default: the stored DP plan, else workflow order)."""
    stored = task.metadata.get("optimal_workflow", {})
    ids = order or list(stored.get("steps") or [s.id for s in task.workflow.steps])
    tool_of = {s.id: s.tool for s in task.workflow.steps}
    steps = []
    for sid in ids:
        step = task.workflow.step(sid)
        spec = library.spec(step.tool)
        steps.append(
            PlanStep(
                tool=step.tool,
                reason=f"{spec.operation} step ({spec.category}): {spec.description}",
                requires=spec.dependencies,
                arguments={k: _argument_text(task, tool_of, b) for k, b in step.arguments.items()},
            )
        )
    return Plan(steps=tuple(steps))


def parse_flaw(text: str) -> tuple[str, Severity, str]:
    """``TYPE[:SEVERITY[:METHOD]]`` → (type, severity, method); severity defaults to severe."""
    parts = text.split(":")
    if not parts[0] or len(parts) > 3:
        raise FlawError(f"flaw {text!r}: expected TYPE[:SEVERITY[:METHOD]], e.g. missing_step:light")
    flaw = FLAW_ALIASES.get(parts[0], parts[0])
    if flaw not in FLAW_METHODS:
        raise FlawError(f"unknown flaw type {parts[0]!r}; choose from {', '.join(FLAW_TYPES)}")
    severity = parts[1] if len(parts) > 1 and parts[1] else "severe"
    if severity not in SEVERITIES:
        raise FlawError(f"unknown severity {severity!r}; choose from {', '.join(SEVERITIES)}")
    method = parts[2] if len(parts) > 2 else FLAW_METHODS[flaw][0]
    if method not in FLAW_METHODS[flaw]:
        raise FlawError(f"unknown method {method!r} for {flaw}; choose from {', '.join(FLAW_METHODS[flaw])}")
    return flaw, severity, method


class _Context:
    def __init__(self, task: Task, library: ToolLibrary, index: ToolIndex, rng: random.Random) -> None:
        self.task = task
        self.library = library
        self.index = index
        self.rng = rng

    def step_for(self, tool: str) -> PlanStep:
        spec = self.library.spec(tool)
        return PlanStep(
            tool=tool,
            reason=f"{spec.operation} step ({spec.category}): {spec.description}",
            requires=spec.dependencies,
        )


def _count(severity: Severity, n: int, light: int, medium: int, severe: int) -> int:
    value = {"light": light, "medium": medium, "severe": severe}[severity]
    return max(1, min(value, n))


# --- sequence_disorder ---------------------------------------------------------------------------


def _disorder_dependency(plan: Plan, severity: Severity, ctx: _Context) -> Plan:
    steps = list(plan.steps)
    has_prerequisites = {ctx.task.workflow.step(b).tool for _, b in ctx.task.workflow.edges}
    dependent = [i for i, step in enumerate(steps) if i > 0 and step.tool in has_prerequisites]
    if not dependent:
        return _disorder_swap(plan, severity, ctx)
    chosen = [ctx.rng.choice(dependent)] if severity == "light" else dependent
    moved = [steps[i] for i in chosen]
    rest = [s for i, s in enumerate(steps) if i not in chosen]
    return Plan(steps=tuple(moved + rest))


def _disorder_swap(plan: Plan, severity: Severity, ctx: _Context) -> Plan:
    steps = list(plan.steps)
    n = len(steps)
    if len(set(plan.tools)) < 2:
        raise FlawError("sequence_disorder needs a plan with two different tools")
    if severity == "severe":
        shuffled = steps[:]
        while [s.tool for s in shuffled] == [s.tool for s in steps]:
            ctx.rng.shuffle(shuffled)
        return Plan(steps=tuple(shuffled))
    swaps = 1 if severity == "light" else max(1, min(ctx.rng.randint(2, 3), n // 2))
    positions = ctx.rng.sample(range(n - 1), min(swaps, n - 1))
    for i in positions:
        steps[i], steps[i + 1] = steps[i + 1], steps[i]
    if [s.tool for s in steps] == plan.tools:  # two swaps undid each other
        steps[0], steps[1] = steps[1], steps[0]
    return Plan(steps=tuple(steps))


# --- tool_misuse and semantic_drift --------------------------------------------------------------


def _replace(plan: Plan, positions: list[int], pick: Callable[[int, str], str], ctx: _Context) -> Plan:
    steps = list(plan.steps)
    for i in positions:
        original = steps[i]
        tool = pick(i, original.tool)
        spec = ctx.library.spec(tool)
        steps[i] = PlanStep(
            tool=tool,
            # Same wording as a real step: the flaw must be visible in the plan, not labelled as one.
            reason=f"{spec.operation} step ({spec.category}): {spec.description}",
            requires=spec.dependencies,
            arguments=original.arguments,
        )
    return Plan(steps=tuple(steps))


def _misuse_similar(plan: Plan, severity: Severity, ctx: _Context) -> Plan:
    n = len(plan.steps)
    k = _count(severity, n, 1, min(2, n // 2), n // 2 + 1)
    positions = sorted(ctx.rng.sample(range(n), k))
    used = set(plan.tools)
    return _replace(plan, positions, lambda i, t: ctx.index.most_similar(t, used)[0].name, ctx)


def _misuse_category(plan: Plan, severity: Severity, ctx: _Context) -> Plan:
    n = len(plan.steps)
    k = _count(severity, n, 1, min(2, n // 2), n // 2 + 1)
    positions = sorted(ctx.rng.sample(range(n), k))
    used = set(plan.tools)

    def pick(i: int, tool: str) -> str:
        category = ctx.library.spec(tool).category
        pool = sorted(s.name for s in ctx.library if s.category != category and s.name not in used)
        return ctx.rng.choice(pool)

    return _replace(plan, positions, pick, ctx)


def _drift_mismatch(plan: Plan, severity: Severity, ctx: _Context) -> Plan:
    n = len(plan.steps)
    k = _count(severity, n, 1, min(2, n // 3), n // 2)
    positions = sorted(ctx.rng.sample(range(n), k))
    used = set(plan.tools)

    def pick(i: int, tool: str) -> str:
        ranked = ctx.index.most_similar(tool, used)
        # Similar but not the closest: ranks 2-4, the "plausible but functionally wrong" band.
        return ctx.rng.choice(ranked[1:4] or ranked[:1]).name

    return _replace(plan, positions, pick, ctx)


def _drift_chain(plan: Plan, severity: Severity, ctx: _Context) -> Plan:
    n = len(plan.steps)
    start = {"light": n - 2, "medium": n // 2, "severe": 2}[severity]
    start = max(0, min(start, n - 1))
    used = set(plan.tools)
    previous = plan.steps[start - 1].tool if start > 0 else plan.steps[0].tool

    def pick(i: int, tool: str) -> str:
        nonlocal previous
        # Each replacement is the tool closest to the previous replacement that is not a plan tool:
        # the plan drifts away step by step (paper C.3, T_i = argmax S(t, T_{i-1}) (1 - F(t, T_orig))).
        candidate = next(h.name for h in ctx.index.most_similar(previous, used | {tool}))
        used.add(candidate)
        previous = candidate
        return candidate

    return _replace(plan, list(range(start, n)), pick, ctx)


# --- parameter_error -----------------------------------------------------------------------------

_WRONG_VALUES = {
    "source": '"data/archive_old.bin" (task input `source`)',
    "destination": '"/dev/null"',
    "output_format": '"yaml"',
    "precision": "-1",
}


def _parameters(plan: Plan, severity: Severity, ctx: _Context, method: str) -> Plan:
    steps = list(plan.steps)
    n = len(steps)
    candidates = [i for i, s in enumerate(steps) if s.arguments]
    k = min(len(candidates), _count(severity, n, 1, min(2, n), n // 2 + 1))
    for i in sorted(ctx.rng.sample(candidates, k)):
        step = steps[i]
        arguments = dict(step.arguments)
        name = ctx.rng.choice(sorted(arguments))
        if method == "missing":
            del arguments[name]
        elif method == "wrong_type":
            arguments[name] = "42" if not arguments[name].startswith("42") else '"forty-two"'
        else:
            wrong = _WRONG_VALUES.get(name)
            if wrong is None or wrong == arguments[name]:
                # Wire the argument to the wrong output: another step's metadata instead of its data.
                others = [t for t in plan.tools if t != step.tool] or [step.tool]
                wrong = f"the `metadata` returned by {ctx.rng.choice(others)}"
            arguments[name] = wrong
        steps[i] = step.model_copy(update={"arguments": arguments})
    return Plan(steps=tuple(steps))


# --- missing_step --------------------------------------------------------------------------------


def _drop(plan: Plan, drop: set[int]) -> Plan:
    if not drop:
        drop = {len(plan.steps) - 1}
    kept = tuple(s for i, s in enumerate(plan.steps) if i not in drop)
    return Plan(steps=kept or plan.steps[:1])


def _missing(plan: Plan, severity: Severity, ctx: _Context, method: str) -> Plan:
    n = len(plan.steps)
    interior = list(range(1, n - 1))
    if method == "validation":
        drop = {i for i, s in enumerate(plan.steps) if "validat" in s.tool or "check" in s.tool}
        if drop and len(drop) < n:
            return _drop(plan, drop)
        method = "critical"  # no validation step to remove
    if not interior:
        return _drop(plan, {n - 1} if n > 1 else set())
    if severity == "light":
        return _drop(plan, {ctx.rng.choice(interior)})
    if severity == "medium":
        return _drop(plan, set(ctx.rng.sample(interior, min(2, len(interior)))))
    return _drop(plan, set(interior))


# --- redundant_operations ------------------------------------------------------------------------


def _duplicate(plan: Plan, severity: Severity, ctx: _Context) -> Plan:
    steps = list(plan.steps)
    n = len(steps)
    if severity == "severe":
        return Plan(steps=tuple(s for s in steps for _ in range(2)))
    k = 1 if severity == "light" else min(ctx.rng.randint(2, 3), n)
    for i in sorted(ctx.rng.sample(range(n), k), reverse=True):
        steps.insert(i + 1, steps[i])
    return Plan(steps=tuple(steps))


def _data_shape(tool: str, ctx: _Context) -> set[str]:
    """The fields of the ``data`` object ``tool`` returns (its output schema's)."""
    output = ctx.library.spec(tool).output_schema or {}
    data = output.get("properties", {}).get("data", {})
    return set(data.get("properties", {}))


def _insert_bound(steps: list[PlanStep], tool: str, ctx: _Context) -> bool:
    """Insert a step of ``tool`` fed with the ``data`` of an earlier step (True), or find no place for it.

    The position is drawn among those after a step whose output fits the tool (records for a records
    tool, text content for a text tool, anything otherwise); the step reads the nearest such output.
    """
    need = INSERTABLE_TOOLS[tool]
    places = []
    for position in range(1, len(steps) + 1):
        fits = [s.tool for s in steps[:position] if need == "any" or need in _data_shape(s.tool, ctx)]
        if fits:
            places.append((position, fits[-1]))
    if not places:
        return False
    position, source = ctx.rng.choice(places)
    arguments = {"data": f"the `data` returned by {source}"}
    for name in ctx.library.spec(tool).input_schema.get("required", ()):
        if name != "data":
            arguments[name] = _INSERTED_CONSTANTS[name]
    steps.insert(position, ctx.step_for(tool).model_copy(update={"arguments": arguments}))
    return True


def _unnecessary(plan: Plan, severity: Severity, ctx: _Context) -> Plan:
    steps = list(plan.steps)
    n = len(steps)
    k = {"light": 1, "medium": 3, "severe": n}[severity]
    pool = [t for t in FILLER_TOOLS if t not in plan.tools] or [
        t for t in INSERTABLE_TOOLS if t not in plan.tools
    ]
    for _ in range(k):
        _insert_bound(steps, ctx.rng.choice(pool), ctx)
    return Plan(steps=tuple(steps))


# --- logical_inconsistency -----------------------------------------------------------------------

_FORMATS = ("xml", "csv", "yaml")


def _format(plan: Plan, severity: Severity, ctx: _Context) -> Plan:
    steps = list(plan.steps)
    n = len(steps)
    pairs = list(range(1, n))
    k = min(len(pairs), _count(severity, n, 1, 2, n // 2))
    for i in sorted(ctx.rng.sample(pairs, k)):
        previous = steps[i - 1].tool
        fmt = ctx.rng.choice(_FORMATS)
        arguments = dict(steps[i].arguments)
        key = "data" if "data" in arguments else next(iter(sorted(arguments)), "data")
        arguments[key] = f"the raw {fmt.upper()} text returned by {previous}"
        steps[i] = steps[i].model_copy(
            update={"arguments": arguments, "note": f"expects {fmt.upper()} input from {previous}"}
        )
    return Plan(steps=tuple(steps))


def _unrelated(plan: Plan, severity: Severity, ctx: _Context) -> Plan:
    steps = list(plan.steps)
    n = len(steps)
    k = _count(severity, n, 1, 2, n // 2)
    present = {ctx.library.spec(t).category for t in plan.tools}
    unused = [t for t in INSERTABLE_TOOLS if t not in plan.tools]
    pool = [t for t in unused if ctx.library.spec(t).category not in present] or unused
    inserted = 0
    while inserted < k and pool:
        tool = ctx.rng.choice(pool)
        if _insert_bound(steps, tool, ctx):
            inserted += 1
        else:
            pool.remove(tool)  # nothing before any position has the data it reads
    return Plan(steps=tuple(steps))


_METHODS: dict[tuple[str, str], Callable[[Plan, Severity, _Context], Plan]] = {
    ("sequence_disorder", "dependency"): _disorder_dependency,
    ("sequence_disorder", "swap"): _disorder_swap,
    ("tool_misuse", "similar"): _misuse_similar,
    ("tool_misuse", "wrong_category"): _misuse_category,
    ("parameter_error", "wrong"): lambda p, s, c: _parameters(p, s, c, "wrong"),
    ("parameter_error", "missing"): lambda p, s, c: _parameters(p, s, c, "missing"),
    ("parameter_error", "wrong_type"): lambda p, s, c: _parameters(p, s, c, "wrong_type"),
    ("missing_step", "critical"): lambda p, s, c: _missing(p, s, c, "critical"),
    ("missing_step", "middle"): lambda p, s, c: _missing(p, s, c, "middle"),
    ("missing_step", "validation"): lambda p, s, c: _missing(p, s, c, "validation"),
    ("redundant_operations", "duplicate"): _duplicate,
    ("redundant_operations", "unnecessary"): _unnecessary,
    ("logical_inconsistency", "format"): _format,
    ("logical_inconsistency", "unrelated"): _unrelated,
    ("semantic_drift", "drift"): _drift_chain,
    ("semantic_drift", "mismatch"): _drift_mismatch,
}


def apply_flaw(
    task: Task, plan: Plan, library: ToolLibrary, index: ToolIndex, flaw: str, severity: Severity, method: str
) -> Plan:
    """A flawed copy of ``plan``; raises `FlawError` if it would equal ``plan`` (never for suite tasks)."""
    key = f"{task.id}:{flaw}:{severity}:{method}"
    rng = random.Random(hashlib.blake2b(key.encode(), digest_size=8).digest())
    flawed = _METHODS[(flaw, method)](plan, severity, _Context(task, library, index, rng))
    if flawed == plan:
        raise FlawError(f"flaw {flaw}:{severity}:{method} left the plan of {task.id} unchanged")
    return flawed
