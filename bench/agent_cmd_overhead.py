"""What playing an episode with an agent program costs, against the built-in loop, in the same run.

Three runs of the same ResiliBench tasks (tool faults on, no model-API faults), in this process:

* the built-in loop with ``scripted:oracle`` (the baseline: no HTTP at all);
* the built-in loop behind the gateway (``--llm-faults none``: the oracle played by the model server
  through the ``openai`` SDK and the gateway, on loopback);
* ``--agent-cmd`` with tests/fakes/stdlib_agent.py (a standard-library program: MCP through the stdio
  bridge, the model through the gateway), and with examples/harnesses/openai_loop.py (the ``openai``
  and ``mcp`` SDKs).

For each: this process's CPU per episode (the runner, its MCP server, model server and gateway),
the children's CPU per episode (the agent programs and their bridges), and the wall time per
episode at ``--concurrency 4``. Run: ``python bench/agent_cmd_overhead.py [--episodes N]``.
"""

from __future__ import annotations

import argparse
import resource
import shlex
import sys
import tempfile
import time
from pathlib import Path

import anyio

from mcp_resili.client.plan import RunConfig
from mcp_resili.client.runner import execute, local_executor
from mcp_resili.harness import session_factory
from mcp_resili.registry.loader import get_suite

ROOT = Path(__file__).resolve().parents[1]


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


async def measure(name: str, tasks: tuple[str, ...], work: Path, **options: object) -> dict[str, float]:
    config = RunConfig(
        suite="resilibench",
        models=("scripted:oracle",),
        faults=("resilibench",),
        tasks=tasks,
        trials=1,
        time_scale=0.0,
        concurrency=4,
        db=work / f"{name}.db",
        **options,  # type: ignore[arg-type]
    )
    own, children, started = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.monotonic()
    result = await execute(config, executor=local_executor(session_factory=session_factory))
    n = len(result.rows)
    return {
        "episodes": n,
        "runner_cpu_ms": 1000 * (_cpu(resource.RUSAGE_SELF) - own) / n,
        "children_cpu_ms": 1000 * (_cpu(resource.RUSAGE_CHILDREN) - children) / n,
        "wall_ms": 1000 * (time.monotonic() - started) / n,
        "full": sum(r.label == "full" for r in result.rows) / n,
    }


async def main(episodes: int) -> None:
    tasks = tuple(t.id for t in get_suite("resilibench").default_tasks[:episodes])
    python = sys.executable
    runs = {
        "built-in loop, scripted:oracle": {},
        "built-in loop behind the gateway": {"llm_faults": "none"},
        "--agent-cmd stdlib_agent.py": {
            "agent_cmd": shlex.join([python, str(ROOT / "tests" / "fakes" / "stdlib_agent.py")])
        },
        "--agent-cmd openai_loop.py": {
            "agent_cmd": shlex.join([python, str(ROOT / "examples" / "harnesses" / "openai_loop.py")])
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        await measure("warm-up", tasks[:2], Path(tmp))  # imports, suite data, first connections
        columns = ("run", "episodes", "runner CPU ms/episode", "agent programs' CPU ms/episode")
        columns += ("wall ms/episode (concurrency 4)", "full")
        print("| " + " | ".join(columns) + " |")
        print("|---|---|---|---|---|---|")
        for name, options in runs.items():
            m = await measure(name.replace(" ", "_").strip("-"), tasks, Path(tmp), **options)
            print(
                f"| {name} | {m['episodes']:.0f} | {m['runner_cpu_ms']:.1f} | {m['children_cpu_ms']:.1f} | "
                f"{m['wall_ms']:.0f} | {m['full']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=20)
    anyio.run(main, parser.parse_args().episodes)
