"""No scripted agent beats ResiliBench's bounds: >= 10,000 episodes through the runner and the server.

Agents: ``scripted:oracle``, ``scripted:naive``, ``scripted:greedy-retry`` (several calls per turn,
greedy retries) and ``scripted:plan-follower`` on every prompt variant (baseline, cot, optimal and
each of the seven flaw types at its default severity). Two fault configurations: the suite's
default (base 0.8, each task's own call budget) and a harsh one (base 0.6, the paper's budget of 10
calls), where bound (ii) often says full success was impossible.

Two paths:

* **runner**: ``mcp-resili run``'s engine (in process), whose agent loop stops at the budget;
* **outside**: an MCP client that plays the oracle and greedy-retry with a budget of 60 calls and
  no stop rules against ``serve`` with a trace directory; the server-side traces are scored with
  the suite's scorer (what ``mcp-resili score`` runs). Only the scorer holds these agents to the
  budget. The server records the setting's budget in every trace header (``serve --max-turns``).

Checks, printed at the end: no episode is scored ``full`` where bound (ii) says impossible, and for
every (path, configuration, agent, variant) the full rate's 95% Wilson interval reaches down to the
mean bound (iii) of its episodes (the rate is not above the exact optimum).

Usage: python bench/resilibench_bounds.py [--tasks N]   (default 400 tasks, one trial each)
"""

import argparse
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import anyio
from mcp import Client

from mcp_resili.agents.scripted import OracleAgent
from mcp_resili.client.episode import EpisodeSpec
from mcp_resili.client.loop import play_episode
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.faults import parse_fault_spec
from mcp_resili.registry.loader import get_suite
from mcp_resili.report import wilson_interval
from mcp_resili.server.app import ResiliServer
from mcp_resili.suites.resilibench.agents import GreedyRetryAgent
from mcp_resili.suites.resilibench.flaws import FLAW_TYPES
from mcp_resili.trace import Trace

CONFIGS = {"default": ("resilibench", None), "harsh": ("resilibench:base=0.6", 10)}
PLAN_VARIANTS = ("baseline", "cot", "optimal", *(f"flawed:{f}" for f in FLAW_TYPES))
OUTSIDE_AGENTS = {"scripted:oracle": OracleAgent, "scripted:greedy-retry": GreedyRetryAgent}
OUTSIDE_CALLS = 60


async def runner_rows(config_name, sample, db):
    spec, max_turns = CONFIGS[config_name]
    rows = []
    for models, variants in (
        (("scripted:oracle", "scripted:naive", "scripted:greedy-retry"), ("baseline",)),
        (("scripted:plan-follower",), PLAN_VARIANTS),
    ):
        config = RunConfig(
            db=db,
            models=models,
            variants=variants,
            faults=(spec,),
            tasks=sample,
            trials=1,
            max_turns=max_turns,
            concurrency=16,
            seed=1,
        )
        result = await execute(config)
        rows += [
            ("runner", config_name, r.model, r.variant, r.label, r.score["components"]) for r in result.rows
        ]
    return rows


async def outside_rows(config_name, sample, trace_dir):
    suite = get_suite("resilibench")
    spec, max_turns = CONFIGS[config_name]
    # `serve --max-turns`: the traces carry the setting's budget, which the scorer and bounds use.
    server = ResiliServer(
        suite, parse_fault_spec(spec, suite.spec_scope), seed=1, trace_dir=trace_dir, max_turns=max_turns
    )
    rows = []
    async with Client(server.mcp) as client:
        tools = (await client.list_tools()).tools
        for name, agent in OUTSIDE_AGENTS.items():
            for n, task_id in enumerate(sample):
                task = suite.task(task_id)
                episode = EpisodeSpec(
                    f"{config_name}-{name.split(':')[1]}-{n}",
                    f"{task.id}/0",
                    1,
                    task,
                    suite.prompt(task, "baseline"),
                    max_turns=OUTSIDE_CALLS,
                )
                await play_episode(client, agent(), episode, tools)
                trace = Trace.read(trace_dir / f"{episode.id}.jsonl")
                score = suite.score(task, trace)
                rows.append(("outside", config_name, name, "baseline", score.label, score.components))
    return rows


async def collect(sample):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for config_name in CONFIGS:
            rows += await runner_rows(config_name, sample, Path(tmp) / f"{config_name}.db")
            rows += await outside_rows(config_name, sample, Path(tmp) / f"traces-{config_name}")
    return rows


def report(rows, elapsed):
    impossible = [r for r in rows if r[5]["bound_ii_full_possible"] is False]
    beaten = [r for r in impossible if r[4] == "full"]
    over_budget = sum(1 for r in rows if r[5]["calls_over_budget"])
    print(f"{len(rows)} episodes in {elapsed:.0f} s; bound (ii) says impossible for {len(impossible)}")
    print(f"episodes scored full where bound (ii) says impossible: {len(beaten)}")
    print(f"episodes with calls past the budget (outside agents; those calls did not count): {over_budget}")
    print()
    print(
        "| path | faults | agent | variant | episodes | full % (95% CI) | mean bound (iii) % "
        "| bound (ii) % | rate <= bound (iii) within CI |"
    )
    print("|---|---|---|---|---:|---:|---:|---:|---|")
    groups = defaultdict(list)
    for r in rows:
        groups[r[:4]].append(r)
    failures = 0
    for (path, config_name, model, variant), members in groups.items():
        n = len(members)
        full = sum(1 for m in members if m[4] == "full")
        low, high = wilson_interval(full, n)
        bound_iii = sum(m[5]["bound_iii_full_probability"] for m in members) / n
        bound_ii = sum(1 for m in members if m[5]["bound_ii_full_possible"]) / n
        ok = low <= bound_iii
        failures += not ok
        print(
            f"| {path} | {config_name} | {model} | {variant} | {n} | {100 * full / n:.1f} "
            f"({100 * low:.1f}–{100 * high:.1f}) | {100 * bound_iii:.1f} | {100 * bound_ii:.1f} | "
            f"{'yes' if ok else 'NO'} |"
        )
    print()
    print(f"groups above bound (iii): {failures}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=400, help="tasks sampled from the full suite")
    args = parser.parse_args()
    tasks = get_suite("resilibench").tasks
    step = max(1, len(tasks) // args.tasks)
    sample = tuple(t.id for t in tasks[::step][: args.tasks])
    start = time.perf_counter()
    rows = anyio.run(collect, sample)
    report(rows, time.perf_counter() - start)


if __name__ == "__main__":
    main()
