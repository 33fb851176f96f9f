"""CPU of the server's call pipeline per tool call, against an earlier revision measured in the same run.

Each measurement is a fresh Python process that imports mcp-resili from a source tree, plays a warm-up
run, then plays ``--episodes`` ResiliBench tasks × 4 prompt variants (``scripted:oracle``, default
fault plan, ``--time-scale 0``, concurrency 16) in process, timing the calling thread's CPU while
``CallPipeline.call_with_outcome`` runs (its awaits excluded) and, apart, while the suite's own code
runs inside it (dependency gate, simulators, initial state). Reported per tool call: the pipeline's
own µs (the difference), and the same over the suite's µs, a ratio that a machine slowed or sped up
by other jobs moves much less (both halves slow down alike). Rounds alternate the sides; medians.

    python bench/pipeline_cpu.py [--base REV] [--episodes N] [--rounds R]
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from episode_cpu import export_revision, revision_parser, run_child

#: The revision the pipeline work of issue 37 started from.
DEFAULT_BASE = "4e1c713"

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
import anyio
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.registry.loader import get_suite
from mcp_resili.server import pipeline
from mcp_resili.tools import library

clock = time.thread_time
spent = {"pipeline": 0.0, "suite": 0.0, "calls": 0}

class Timed:
    # Times each stretch the coroutine runs, not the waits between (other episodes run then).
    def __init__(self, coro):
        self.coro = coro
    def __await__(self):
        value, error = None, None
        while True:
            start = clock()
            try:
                step = self.coro.throw(error) if error is not None else self.coro.send(value)
            except StopIteration as stop:
                spent["pipeline"] += clock() - start
                return stop.value
            spent["pipeline"] += clock() - start
            try:
                value, error = (yield step), None
            except BaseException as exc:
                value, error = None, exc

original_call = pipeline.CallPipeline.call_with_outcome
def call_with_outcome(self, *args, **kwargs):
    spent["calls"] += 1
    return Timed(original_call(self, *args, **kwargs))
pipeline.CallPipeline.call_with_outcome = call_with_outcome

def suite_code(function):
    def timed(*args, **kwargs):
        start = clock()
        try:
            return function(*args, **kwargs)
        finally:
            spent["suite"] += clock() - start
    return timed
library.ToolLibrary.simulate = suite_code(library.ToolLibrary.simulate)
original_init = pipeline.CallPipeline.__init__
def init(self, *args, **kwargs):
    original_init(self, *args, **kwargs)
    if self.dependency_gate is not None:
        self.dependency_gate = suite_code(self.dependency_gate)
    if self.initial_state is not None:
        self.initial_state = suite_code(self.initial_state)
pipeline.CallPipeline.__init__ = init

async def main(episodes):
    tmp = Path(tempfile.mkdtemp())
    tasks = tuple(t.id for t in get_suite("resilibench").tasks[:episodes])
    variants = ("baseline", "cot", "optimal", "flawed:sequence_disorder")
    common = dict(models=("scripted:oracle",), trials=1, time_scale=0.0, concurrency=16)
    await execute(RunConfig(db=tmp / "warm.db", tasks=tasks[:5], **common))
    spent.update(pipeline=0.0, suite=0.0, calls=0)
    result = await execute(RunConfig(db=tmp / "run.db", tasks=tasks, variants=variants, **common))
    calls = spent["calls"]
    own = (spent["pipeline"] - spent["suite"]) * 1e6 / calls
    print(json.dumps({"episodes": len(result.rows), "calls": calls, "own_us": own,
                      "suite_us": spent["suite"] * 1e6 / calls}))

anyio.run(main, int(sys.argv[1]))
"""


def main() -> None:
    """Alternate rounds of the base revision and this tree; print each round and the medians."""
    args = revision_parser(__doc__, DEFAULT_BASE, 150).parse_args()
    own: dict[str, list[float]] = {"base": [], "ours": []}
    relative: dict[str, list[float]] = {"base": [], "ours": []}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"base": export_revision(args.base, Path(tmp)), "ours": Path(__file__).resolve().parents[1]}
        for r in range(args.rounds):
            for name in ("base", "ours") if r % 2 == 0 else ("ours", "base"):
                m = run_child(trees[name], CHILD, str(args.episodes))
                own[name].append(m["own_us"])
                relative[name].append(m["own_us"] / m["suite_us"])
                print(
                    f"round {r + 1} {name}: pipeline {m['own_us']:.1f} µs/call besides the suite's"
                    f" {m['suite_us']:.1f} ({m['calls']:.0f} calls, {m['episodes']:.0f} episodes)",
                    flush=True,
                )
    for name in ("base", "ours"):
        print(
            f"{name}: median {statistics.median(own[name]):.1f} µs/call of the pipeline's own,"
            f" {statistics.median(relative[name]):.3f}× the suite's"
        )
    in_us = statistics.median(own["ours"]) / statistics.median(own["base"])
    to_suite = statistics.median(relative["ours"]) / statistics.median(relative["base"])
    print(f"ratio this / {args.base}: {in_us:.2f}× in µs, {to_suite:.2f}× relative to the suite")


if __name__ == "__main__":
    main()
