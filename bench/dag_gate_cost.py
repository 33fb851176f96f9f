"""The CPU cost of ResiliBench's DAG gate per tool call, against the same server without it (same run).

Gold runs of the 40 default tasks (no faults: every call succeeds), played through the in-memory MCP
client, three rounds each, once with the suite as shipped and once with ``dependency_gate=None``,
alternating twice. Prints CPU milliseconds per call and the ratio.

Usage: python bench/dag_gate_cost.py
"""

import dataclasses
import sys
import time
from pathlib import Path

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from suites.resilibench.gold import gold_run

from mcp_resili.registry.loader import get_suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.suites.resilibench.faults import ResiliBenchFaults

SUITE = get_suite("resilibench")
PLAN = ResiliBenchFaults(base_success=1.0, max_success=1.0)


async def cpu_per_call(suite, tasks, golds, rounds=3):
    server = ResiliServer(suite, PLAN)
    calls = 0
    async with Client(server.mcp) as client:
        start = time.process_time()
        for r in range(rounds):
            for task in tasks:
                meta = {"mcp-resili/episode": {"id": f"{task.id}-{r}", "task": task.id, "trial": r}}
                for gold in golds[task.id]:
                    await client.call_tool(gold.tool, gold.arguments, meta=meta)
                    calls += 1
        return (time.process_time() - start) / calls


async def main():
    tasks = list(SUITE.default_tasks)
    golds = {t.id: gold_run(t) for t in tasks}
    ungated = dataclasses.replace(SUITE, dependency_gate=None)
    for _ in range(2):
        gated = await cpu_per_call(SUITE, tasks, golds)
        plain = await cpu_per_call(ungated, tasks, golds)
        print(
            f"CPU per call: with the gate {gated * 1e3:.3f} ms, without {plain * 1e3:.3f} ms, "
            f"{gated / plain:.2f}x"
        )


if __name__ == "__main__":
    anyio.run(main)
