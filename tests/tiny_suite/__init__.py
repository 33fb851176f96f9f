"""The tiny suite: a framework-sized suite the framework's own tests run on.

Five tools (``tools.py``: a declared error, a write that changes the episode's state, a dependency),
six tasks with DAG ground truth (``tasks.py``), two prompt variants, a pure scorer with named
components (``scoring.py``), its own fault SPEC ``tiny[:p=P]`` (``faults.py``), its own scripted
agent ``scripted:tiny-twice`` (``agents.py``) and a report section. It names no stop rules and no
summary columns, so it inherits none.

Written the way a third party writes a suite, from ``mcp_resili`` alone. Tests in this process hand
`suite()` down directly (``execute(config, suite=suite())``, ``ResiliServer(suite(), plan)``); the
conftest also registers it as the ``mcp_resili.suites`` entry point ``tiny`` (`tiny_suite.install`),
so ``mcp-resili ... --suite tiny`` finds it by name, in this process and in the ones tests start.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from mcp_resili import EpisodeRow, ReportSection, Suite, TableBlock, Task
from tiny_suite.agents import TwiceAgent
from tiny_suite.faults import TinyFaults, parse_tiny_spec
from tiny_suite.scoring import golden_arguments, score
from tiny_suite.tasks import tasks
from tiny_suite.tools import TABLE, library

__all__ = [
    "NAME",
    "TABLE",
    "TinyFaults",
    "TwiceAgent",
    "golden_arguments",
    "library",
    "score",
    "suite",
    "tasks",
]

#: The suite's name, and the entry point's.
NAME = "tiny"
VARIANTS = ("baseline", "terse")


def render_prompt(task: Task, variant: str) -> str:
    """``baseline``: the description, the inputs and how to finish; ``terse``: the description only."""
    if variant == "terse":
        return task.description
    inputs = ", ".join(f"{key}={value}" for key, value in task.inputs.items())
    return f"{task.description}\nInputs: {inputs}\nWhen done, call `finish` with status 'completed'."


def report_sections(rows: Sequence[EpisodeRow]) -> list[ReportSection]:
    """One table: per model, the mean share of steps done over scored episodes."""
    shares: dict[str, list[float]] = {}
    for row in rows:
        components = (row.score or {}).get("components", {})
        if row.label is not None and components.get("steps_needed"):
            shares.setdefault(row.model, []).append(components["steps_done"] / components["steps_needed"])
    data = {model: round(sum(values) / len(values), 6) for model, values in sorted(shares.items())}
    table = TableBlock(
        "Steps done",
        ("model", "steps done %"),
        tuple((model, f"{100 * share:.1f}") for model, share in data.items()),
    )
    return [ReportSection(id=NAME, title="Tiny", blocks=(table,), data={"steps_done": data})]


@cache
def suite() -> Suite:
    """The suite (the ``mcp_resili.suites`` entry point ``tiny``)."""
    return Suite(
        name=NAME,
        description="Five tools and six tasks, for the framework's own tests.",
        library=library(),
        load_tasks=tasks,
        render_prompt=render_prompt,
        score=score,
        default_faults="tiny",
        variants=VARIANTS,
        enforce_dependencies=True,
        initial_state=lambda task: {"records": []},
        report_sections=report_sections,
        fault_specs={"tiny": parse_tiny_spec},
        agents={"tiny-twice": TwiceAgent},
    )
