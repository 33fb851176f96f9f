"""Generate ResiliBench tasks as data: operation sequences → tools → a DAG with real data flow.

Each task type has an operation sequence (paper App. C.2). Every operation is matched to one tool of
the library (seeded choice among the tools that implement it); the planner then closes the chain
under declared dependencies and data needs (a tool that consumes records gets a parser, a parser
gets a reader or fetcher), binds every argument to a user input, a constant or an earlier step,
and derives the DAG from those bindings and the declared dependencies. Every generated workflow is
executed once on the simulators (no faults) and kept only if it runs cleanly, so every task is
solvable by construction. Each task stores its DP-optimal workflow (`optimal.py`).

`generate_full_suite` makes the 5,040 distinct tasks of paper Table 7 (``full.json.gz``); the
default run's 40 tasks are the first 8 of every type (``default.json``). Both are written by
``scripts/regenerate_default_tasks.py``; see ``docs/resilibench.md``.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mcp_resili.suites.resilibench.faults import ResiliBenchFaults
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.optimal import solve_optimal_workflow
from mcp_resili.suites.resilibench.world import WORLD_KEY, World
from mcp_resili.tasks.model import (
    Binding,
    ConstantBinding,
    InputBinding,
    StepBinding,
    Task,
    TaskConstraints,
    TaskSet,
    Workflow,
    WorkflowStep,
    resolve_arguments,
)
from mcp_resili.tools import ToolFailure, ToolLibrary

#: The fault model the stored optimal workflows are solved for (the suite's default).
DEFAULT_FAULTS = ResiliBenchFaults.model_validate({})

DataKind = Literal["text", "records", "any"]

#: Operation → tools that implement it (the paper's semantic matching, made explicit and offline).
#: Together with `SIDE_TOOLS` and the dependency closure these pools reach all 30 tools.
OPERATION_TOOLS: dict[str, tuple[str, ...]] = {
    "input": ("file_operations_reader", "network_fetcher"),
    "read": ("file_operations_reader", "network_fetcher"),
    "fetch": ("network_fetcher",),
    "parse": ("data_processing_parser",),
    "process": (
        "data_processing_filter",
        "data_processing_transformer",
        "data_processing_aggregator",
        "data_processing_validator",
        "integration_mapper",
        "computation_analyzer",
        "file_operations_converter",
    ),
    "validate": ("data_processing_validator", "network_validator"),
    "transform": (
        "data_processing_transformer",
        "integration_mapper",
        "data_processing_filter",
        "file_operations_converter",
    ),
    "aggregate": ("data_processing_aggregator",),
    "compute": (
        "computation_calculator",
        "computation_analyzer",
        "computation_predictor",
        "computation_optimizer",
        "computation_simulator",
    ),
    "write": ("file_operations_writer", "integration_queue", "utility_cache", "file_operations_compressor"),
    "post": ("network_poster", "integration_queue", "integration_scheduler", "network_router"),
    "output": (
        "file_operations_writer",
        "utility_notifier",
        "utility_logger",
        "utility_helper",
        "utility_tracker",
        "network_router",
        "file_operations_compressor",
        "integration_scheduler",
    ),
}

#: Independent side steps some tasks add (a second root of the DAG: nothing flows out of them).
SIDE_TOOLS = (
    "file_operations_scanner",
    "network_monitor",
    "integration_connector",
    "integration_authenticator",
)
#: Probability that a task gets one side step, and that an easy task gets an output step.
SIDE_STEP_PROBABILITY = 0.25
EXTRA_OUTPUT_PROBABILITY = 0.5

#: Task type → (complexity, operation sequence). Sequences follow paper App. C.2.
TASK_TYPES: dict[str, tuple[Literal["easy", "medium", "hard"], tuple[str, ...]]] = {
    "basic_file_processing": ("easy", ("input", "process")),
    "simple_data_transformation": ("easy", ("process",)),
    "complex_validation_pipeline": ("medium", ("read", "validate", "transform", "aggregate", "write")),
    "complex_network_integration": ("medium", ("fetch", "parse", "validate", "transform", "post")),
    "advanced_computation_pipeline": (
        "hard",
        ("read", "validate", "transform", "compute", "aggregate", "write"),
    ),
}

#: The user-input key each (tool, parameter) is bound to.
INPUT_KEYS: dict[tuple[str, str], str] = {
    ("file_operations_reader", "source"): "source",
    ("network_fetcher", "source"): "url",
    ("network_monitor", "source"): "url",
    ("integration_authenticator", "source"): "service",
    ("integration_connector", "source"): "service",
    ("file_operations_scanner", "source"): "directory",
    ("file_operations_writer", "destination"): "destination",
    ("network_poster", "destination"): "endpoint",
    ("network_router", "destination"): "endpoint",
    ("integration_queue", "destination"): "queue",
    ("utility_notifier", "destination"): "recipient",
}

#: How the task text names each step (``{key}`` refers to user inputs).
PHRASES: dict[str, str] = {
    "file_operations_reader": "read the file {source}",
    "file_operations_writer": "save the result to {destination}",
    "file_operations_converter": "convert the content to {output_format}",
    "file_operations_scanner": "scan the directory {directory}",
    "file_operations_compressor": "compress the result for archiving",
    "data_processing_parser": "parse the content into records",
    "data_processing_transformer": "transform the records ({operation})",
    "data_processing_validator": "validate the records",
    "data_processing_aggregator": "aggregate the records by {group_by}",
    "data_processing_filter": "keep the records with a value of at least {min_value}",
    "network_fetcher": "fetch the data from {url}",
    "network_poster": "post the result to {endpoint}",
    "network_monitor": "check the health of {url}",
    "network_router": "route the payload to {endpoint}",
    "network_validator": "verify the payload before it is sent on",
    "computation_calculator": "compute the {operation} of the values",
    "computation_analyzer": "compute summary statistics",
    "computation_predictor": "predict the next value",
    "computation_optimizer": "select the {limit} highest-value records",
    "computation_simulator": "run a {iterations}-iteration simulation on the data",
    "integration_authenticator": "authenticate with {service}",
    "integration_connector": "connect to {service}",
    "integration_mapper": "map the record fields to the target schema ({mapping_text})",
    "integration_queue": "queue the result on {queue}",
    "integration_scheduler": "schedule a follow-up job for {when}",
    "utility_notifier": "notify {recipient}",
    "utility_tracker": "track the processing event",
    "utility_cache": "cache the result",
    "utility_logger": "log the outcome at {level} level",
    "utility_helper": "format the result as {output_format}",
}

_WORDS = ("sales", "orders", "sensors", "inventory", "payments", "visits", "tickets", "shipments", "metrics")


def data_kind_consumed(library: ToolLibrary, tool: str) -> DataKind | None:
    """What a tool's ``data`` argument needs, read off its input schema (None: no data argument)."""
    schema = library.spec(tool).input_schema
    if "data" not in schema.get("required", []):
        return None
    needed = schema["properties"]["data"].get("required", [])
    return "records" if "records" in needed else "text" if "content" in needed else "any"


def data_kind_produced(library: ToolLibrary, tool: str) -> DataKind | None:
    """What a tool's result ``data`` provides, read off its output schema."""
    schema = library.spec(tool).output_schema or {}
    props = schema.get("properties", {}).get("data", {}).get("properties", {})
    if "records" in props and props["records"].get("items", {}).get("required"):
        return "records"
    if "content" in props and "enum" in props.get("format", {}):
        return "text"
    return None


@dataclass(frozen=True)
class _Draft:
    tools: tuple[str, ...]
    inputs: dict[str, Any]
    constants: dict[str, dict[str, Any]]


def _inputs(rng: random.Random) -> dict[str, Any]:
    word = rng.choice(_WORDS)
    n = rng.randrange(100, 1000)
    fmt = rng.choice(("csv", "json", "xml"))
    return {
        "source": f"data/{word}_{n}.{fmt}",
        "url": f"https://api.example.com/{word}/{n}",
        "service": rng.choice(("crm", "billing", "warehouse", "analytics")),
        "directory": f"data/{word}",
        "destination": f"out/{word}_{n}_result.json",
        "endpoint": f"https://hooks.example.com/{word}",
        "queue": f"{word}-events",
        "recipient": rng.choice(("ops@example.com", "#data-team", "oncall")),
    }


def _constants(rng: random.Random, tool: str) -> dict[str, Any]:
    """Per-tool settings drawn from small menus: tasks with the same tools still differ in what they ask."""
    if tool == "data_processing_filter":
        return {"options": {"min_value": rng.choice((100, 250, 400, 500, 750))}}
    if tool == "data_processing_transformer":
        return {"options": {"operation": rng.choice(("normalize", "scale", "uppercase"))}}
    if tool == "data_processing_aggregator":
        return {"options": {"group_by": rng.choice(("category", "name"))}}
    if tool == "computation_calculator":
        return {"options": {"operation": rng.choice(("sum", "mean", "max", "min"))}, "precision": 2}
    if tool == "computation_optimizer":
        return {"options": {"limit": rng.choice((2, 3, 5))}}
    if tool == "computation_simulator":
        return {"options": {"iterations": rng.choice((10, 50, 100))}}
    if tool == "file_operations_converter":
        return {"output_format": rng.choice(("csv", "json", "xml"))}
    if tool == "utility_helper":
        return {"output_format": rng.choice(("text", "csv", "json"))}
    if tool == "utility_logger":
        return {"options": {"level": rng.choice(("info", "warning"))}}
    if tool == "integration_scheduler":
        return {"options": {"when": f"2026-0{rng.randrange(1, 10)}-15T0{rng.randrange(0, 10)}:00:00Z"}}
    if tool == "integration_mapper":
        return {
            "options": {"mapping": rng.choice(({"name": "label"}, {"name": "owner"}, {"value": "amount"}))}
        }
    return {}


def _close(library: ToolLibrary, chosen: Sequence[str], source_tool: str) -> tuple[str, ...]:
    """Order ``chosen`` and add what it needs: declared dependencies first, then data providers."""
    plan: list[str] = []

    def has(kind: DataKind) -> bool:
        return any(data_kind_produced(library, t) == kind for t in plan)

    def ensure(tool: str) -> None:
        if tool in plan:
            return
        for dep in library.spec(tool).dependencies:
            ensure(dep)
        need = data_kind_consumed(library, tool)
        if need == "records" and not has("records"):
            ensure("data_processing_parser")
        elif (need == "text" and not has("text")) or (need == "any" and not plan):
            ensure(source_tool)
        plan.append(tool)

    for tool in chosen:
        ensure(tool)
    return tuple(plan)


def build_workflow(library: ToolLibrary, draft: _Draft) -> Workflow:
    """Bind every argument of every step and derive the DAG edges."""
    steps: list[WorkflowStep] = []
    edges: set[tuple[str, str]] = set()
    latest: dict[str, str] = {}  # tool → step id
    latest_kind: dict[DataKind, str] = {}
    for index, tool in enumerate(draft.tools):
        step_id = f"s{index + 1}"
        spec = library.spec(tool)
        arguments: dict[str, Binding] = {}
        for param in spec.input_schema.get("required", []):
            if param == "data":
                kind = data_kind_consumed(library, tool)
                provider = latest_kind.get(kind) if kind in ("records", "text") else steps[-1].id
                if provider is None:
                    raise ValueError(f"no provider of {kind} data for {tool}")
                arguments["data"] = StepBinding(step=provider)
                edges.add((provider, step_id))
            elif (tool, param) in INPUT_KEYS:
                arguments[param] = InputBinding(key=INPUT_KEYS[(tool, param)])
        for param, value in draft.constants.get(tool, {}).items():
            arguments[param] = ConstantBinding(value=value)
        missing = set(spec.input_schema.get("required", [])) - set(arguments)
        if missing:
            raise ValueError(f"cannot bind {sorted(missing)} of {tool}")
        for dep in spec.dependencies:
            edges.add((latest[dep], step_id))
        steps.append(WorkflowStep(id=step_id, tool=tool, arguments=arguments))
        latest[tool] = step_id
        produced = data_kind_produced(library, tool)
        if produced is not None:
            latest_kind[produced] = step_id
    return Workflow(steps=tuple(steps), edges=tuple(sorted(edges)))


def _solvable(library: ToolLibrary, workflow: Workflow, inputs: dict[str, Any]) -> bool:
    state: dict[str, Any] = {WORLD_KEY: World.of(workflow, inputs)}
    results: dict[str, Any] = {}
    try:
        for step in workflow.steps:
            results[step.id] = library.simulate(step.tool, resolve_arguments(step, inputs, results), state)
    except ToolFailure:
        return False
    return True


def _phrase_fields(inputs: dict[str, Any], constants: dict[str, Any]) -> dict[str, Any]:
    fields = {**inputs, **{k: v for k, v in constants.items() if k != "options"}}
    fields.update(constants.get("options", {}))
    mapping = fields.get("mapping")
    if isinstance(mapping, dict):
        fields["mapping_text"] = ", ".join(f"{a} → {b}" for a, b in mapping.items())
    return fields


def _describe(tools: Sequence[str], inputs: dict[str, Any], constants: dict[str, dict[str, Any]]) -> str:
    phrases = [PHRASES[t].format(**_phrase_fields(inputs, constants.get(t, {}))) for t in tools]
    text = ", then ".join(phrases)
    return text[0].upper() + text[1:] + "."


def turn_budget(tool_count: int) -> int:
    """The paper's 10-turn budget, stretched to two turns per tool for long workflows.

    A 9-tool task could not even finish in 10 turns: the ``finish`` call takes a turn too.
    """
    return max(10, 2 * tool_count)


#: Paper Table 7: tasks per type in the full suite (5,040). Complexity follows the type (App. B.1.1):
#: easy 1,200 + 320 = 1,520, medium 1,520 + 1,360 = 2,880, hard 640 — both marginals exactly.
TABLE7_COUNTS: dict[str, int] = {
    "basic_file_processing": 1200,
    "simple_data_transformation": 320,
    "complex_validation_pipeline": 1520,
    "complex_network_integration": 1360,
    "advanced_computation_pipeline": 640,
}
#: The seed of the published full suite and of the embedded default run's tasks.
SUITE_SEED = 2026
#: Tasks per type in the default run (a prefix of every type's list in the full suite).
DEFAULT_PER_TYPE = 8


def _content_key(task_type: str, tools: Sequence[str], inputs: dict[str, Any], constants: Any) -> str:
    """What makes two tasks the same task: type, tools, inputs and constants (not the wording)."""
    text = json.dumps([task_type, list(tools), inputs, constants], sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def draft_task(library: ToolLibrary, seed: int, task_type: str, index: int, attempt: int) -> Task | None:
    """The task drawn for (seed, type, index, attempt), or None when that draw is not solvable."""
    complexity, operations = TASK_TYPES[task_type]
    key = f"{seed}:{task_type}:{index}:{attempt}"
    rng = random.Random(hashlib.blake2b(key.encode(), digest_size=8).digest())
    chosen = [rng.choice(OPERATION_TOOLS[op]) for op in operations]
    if complexity == "easy" and rng.random() < EXTRA_OUTPUT_PROBABILITY:
        chosen.append(rng.choice(OPERATION_TOOLS["output"]))
    if rng.random() < SIDE_STEP_PROBABILITY:
        chosen.append(rng.choice(SIDE_TOOLS))
    source_tool = chosen[0] if chosen[0] in OPERATION_TOOLS["read"] else rng.choice(OPERATION_TOOLS["read"])
    tools = _close(library, list(dict.fromkeys(chosen)), source_tool)
    inputs = _inputs(rng)
    draft = _Draft(tools, inputs, {t: _constants(rng, t) for t in tools})
    workflow = build_workflow(library, draft)
    used = {b.key for s in workflow.steps for b in s.arguments.values() if isinstance(b, InputBinding)}
    inputs = {k: v for k, v in inputs.items() if k in used}
    if not _solvable(library, workflow, inputs):
        return None
    sinks = [s.tool for s in workflow.steps if not any(a == s.id for a, _ in workflow.edges)]
    max_turns = turn_budget(len(tools))
    optimum = solve_optimal_workflow(workflow, library, DEFAULT_FAULTS, max_turns)
    return Task(
        id=f"task_{hashlib.blake2b(key.encode(), digest_size=4).hexdigest()}",
        suite="resilibench",
        task_type=task_type,
        complexity=complexity,
        description=_describe(tools, inputs, draft.constants),
        inputs=inputs,
        expected_outputs={"success": True, "outputs_from": sinks},
        required_tools=tools,
        workflow=workflow,
        constraints=TaskConstraints(timeout=300, max_retries=3, max_turns=max_turns),
        metadata={
            "template": task_type,
            "operations": list(operations),
            "generator_seed": seed,
            "generator_key": key,
            "content_key": _content_key(task_type, tools, inputs, draft.constants),
            "optimal_workflow": optimum.to_metadata(),
        },
    )


def rebuild_task(library: ToolLibrary, generator_key: str) -> Task | None:
    """Rebuild a stored task from its ``metadata["generator_key"]`` (``seed:type:index:attempt``)."""
    seed, task_type, index, attempt = generator_key.split(":")
    return draft_task(library, int(seed), task_type, int(index), int(attempt))


def generate_task(
    library: ToolLibrary, seed: int, task_type: str, index: int, *, taken: set[str] | None = None
) -> Task:
    """Generate task ``index`` of ``task_type``; deterministic in (seed, task_type, index, ``taken``).

    ``taken`` holds the content keys and ids of tasks already generated; a draw that repeats one is
    skipped, so a task set never holds the same task twice. The new task's keys are added.
    """
    taken = set() if taken is None else taken
    for attempt in range(200):
        task = draft_task(library, seed, task_type, index, attempt)
        if task is None or task.metadata["content_key"] in taken or task.id in taken:
            continue
        taken.update((task.metadata["content_key"], task.id))
        return task
    raise RuntimeError(f"no new solvable {task_type} task after 200 attempts (seed {seed}, index {index})")


def _interleave(per_type: dict[str, list[Task]]) -> list[Task]:
    """Merge the per-type lists so that every prefix is close to the full mix (for ``run --limit``)."""
    keyed = [
        ((i + 0.5) / len(tasks), order, task)
        for order, tasks in enumerate(per_type.values())
        for i, task in enumerate(tasks)
    ]
    return [task for *_, task in sorted(keyed, key=lambda k: (k[0], k[1]))]


def generate_tasks(seed: int, per_type: dict[str, int], *, interleave: bool = False) -> TaskSet:
    """Generate ``per_type[t]`` distinct tasks of every task type ``t`` (index order within a type)."""
    library = resilibench_library()
    taken: set[str] = set()
    by_type = {
        t: [generate_task(library, seed, t, i, taken=taken) for i in range(n)] for t, n in per_type.items()
    }
    tasks = _interleave(by_type) if interleave else [t for ts in by_type.values() for t in ts]
    return TaskSet(
        suite="resilibench", seed=seed, generator="mcp_resili.suites.resilibench.generate", tasks=tuple(tasks)
    )


def generate_full_suite(seed: int = SUITE_SEED) -> TaskSet:
    """The full ResiliBench suite: 5,040 distinct tasks with the paper's Table 7 counts, interleaved."""
    return generate_tasks(seed, TABLE7_COUNTS, interleave=True)
