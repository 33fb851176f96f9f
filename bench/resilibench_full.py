"""Time the full ResiliBench suite: 5,040 tasks x 4 prompt variants with the oracle agent, on 2 processes.

Same-run baseline: the default run (40 tasks x 1 trial, oracle, baseline) timed in the same
invocation, so the per-episode cost of the full run can be compared with it on the same machine.
Usage: python bench/resilibench_full.py [--limit N]   (prints a markdown table for docs/benchmarks.md)
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANT_GROUPS = (("baseline", "cot"), ("optimal", "flawed:sequence_disorder"))


def command(db: Path, variants, limit):
    argv = [sys.executable, "-m", "mcp_resili", "run", "--model", "scripted:oracle", "--trials", "1"]
    argv += ["--json", "--db", str(db), "--concurrency", "16"]
    argv += ["--limit", str(limit)] if limit else ["--all-tasks"]
    for v in variants:
        argv += ["--variant", v]
    return argv


def run_parallel(jobs):
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for argv in jobs]
    outputs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if any(p.returncode for p in procs):
        raise SystemExit(f"a run failed: {[p.returncode for p in procs]}")
    return wall, cpu, [json.loads(o) for o in outputs]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, help="tasks per run (default: all 5,040)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base_argv = [sys.executable, "-m", "mcp_resili", "run", "--model", "scripted:oracle", "--trials", "1"]
        base_wall, base_cpu, base_out = run_parallel([[*base_argv, "--json", "--db", f"{tmp}/base.db"]])
        jobs = [
            command(Path(tmp) / f"full{i}.db", group, args.limit) for i, group in enumerate(VARIANT_GROUPS)
        ]
        wall, cpu, outs = run_parallel(jobs)
    base_eps = sum(g["episodes"] for g in base_out[0]["groups"])
    groups = [g for out in outs for g in out["groups"]]
    episodes = sum(g["episodes"] for g in groups)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end")
    print()
    print("| run | episodes | wall s | CPU s | CPU ms / episode |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| default run (same-run baseline) | {base_eps} | {base_wall:.1f} | {base_cpu:.1f} | "
        f"{1000 * base_cpu / base_eps:.1f} |"
    )
    print(
        f"| full suite x 4 variants, 2 processes | {episodes} | {wall:.1f} | {cpu:.1f} | "
        f"{1000 * cpu / episodes:.1f} |"
    )
    print()
    print("| variant | episodes | full | partial | failure |")
    print("|---|---:|---:|---:|---:|")
    for g in groups:
        lv = g["levels"]
        print(
            f"| {g['variant']} | {g['episodes']} | {lv['full']['rate']:.3f} | {lv['partial']['rate']:.3f} | "
            f"{lv['failure']['rate']:.3f} |"
        )


if __name__ == "__main__":
    main()
