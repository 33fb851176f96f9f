"""Runner CPU per episode with a hosted model, against an earlier revision measured in the same run.

Each measurement is a fresh Python process that imports mcp-resili from a source tree and plays
``--episodes`` ResiliBench episodes of ``openai:bench`` (the real openai SDK, 2 model turns per
episode) against `lean_model.py` answering at once, at ``--concurrency``, after a warm-up run in the
same process; it prints the runner's process CPU time per episode (the fake runs in a process of its
own and is not counted). The baseline is the same against ``git archive BASE`` (default: the revision
before the providers moved to the SDKs' aiohttp transport); rounds alternate the two sides so load
from other jobs hits both alike. Reported: each side's median over rounds and the ratio of medians.

    python bench/hosted_cpu.py [--base REV] [--episodes N] [--concurrency C] [--rounds R] [--write-docs]
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from episode_cpu import against_base, measured_on, revision_parser, rounds_table, run_child

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- hosted-cpu:start -->", "<!-- hosted-cpu:end -->"
#: The last revision whose providers used the SDKs' httpx2 transport (sharded connection pools).
DEFAULT_BASE = "5087302"

CHILD = r"""
import json, subprocess, sys, tempfile, time
from pathlib import Path
import anyio
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.registry.loader import get_suite

async def main(episodes, concurrency, fake):
    proc = subprocess.Popen([sys.executable, fake, "--latency", "0"], stdout=subprocess.PIPE, text=True)
    port = proc.stdout.readline().strip()
    url = port if port.startswith("http") else f"http://127.0.0.1:{port}/v1"
    tmp = Path(tempfile.mkdtemp())
    # The fake answers the same whatever the task: tasks only set what the MCP calls carry.
    tasks = tuple(t.id for t in get_suite("resilibench").default_tasks[:32])
    common = dict(models=("openai:bench",), faults=("none",), tasks=tasks, base_url=url, max_turns=2,
                  concurrency=concurrency)
    try:
        await execute(RunConfig(db=tmp / "warm.db", trials=2, **common))
        cpu = time.process_time()
        result = await execute(RunConfig(db=tmp / "run.db", trials=episodes // len(tasks), **common))
        cpu = time.process_time() - cpu
    finally:
        proc.kill()
        proc.wait()
    completed = sum(1 for r in result.rows if r.termination == "completed")
    print(json.dumps({"episodes": len(result.rows), "completed": completed, "cpu": cpu}))

anyio.run(main, int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
"""


def measure(tree: Path, episodes: int, concurrency: int) -> dict[str, float]:
    fake = str(ROOT / "bench" / "lean_model.py")
    data = run_child(tree, CHILD, str(episodes), str(concurrency), fake, OPENAI_API_KEY="not-needed")
    if data["completed"] != data["episodes"]:
        raise SystemExit(f"{tree}: {data['episodes'] - data['completed']} episodes did not complete")
    return data


def section(
    base: str, base_ms: list[float], ours_ms: list[float], args: argparse.Namespace, load: float
) -> str:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    lines = [
        START,
        "## Runner CPU per episode with a hosted model (`bench/hosted_cpu.py`)",
        "",
        measured_on(load) + ".",
        "",
        f"{args.episodes} ResiliBench episodes of `openai:bench` at concurrency {args.concurrency}"
        " (the real openai SDK, 2 turns per episode) against `bench/lean_model.py` answering at once,"
        " after a warm-up run in the same process; the runner's CPU only."
        f" {len(base_ms)} rounds alternating the baseline revision `{base}` (the SDKs' httpx2 transport,"
        f" one connection pool per 16 episodes in flight) and this revision (`{rev.stdout.strip()}`,"
        " the SDKs' aiohttp transport, one pool), each a fresh process.",
        "",
        *rounds_table(base, base_ms, ours_ms, "runner CPU ms / episode"),
        "",
        f"Reproduce: `python bench/hosted_cpu.py --base {base} --write-docs`.",
        END,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = revision_parser(__doc__, DEFAULT_BASE, 640)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    against_base(
        args,
        lambda tree: measure(tree, args.episodes, args.concurrency),
        lambda base_ms, ours_ms, load: section(args.base, base_ms, ours_ms, args, load),
        (START, END),
    )


if __name__ == "__main__":
    main()
