"""What each flaw type costs an agent that trusts its plan, and whether every flaw changes the plan.

``rates`` (default): the plan-follower (``scripted:plan-follower``, which calls the printed plan's
tools with the printed arguments) on a sample of the full suite, once with the optimal plan and
once per (flaw type, severity) with the default method, and with the two methods that insert steps
(``redundant_operations:unnecessary``, ``logical_inconsistency:unrelated``), all under the default
fault model and meeting the same fault draws (same seed, same fault keys). Prints a markdown table
of the full rate with its 95% Wilson interval beside the optimal plan's, per severity and pooled
per type, whether the intervals overlap, and how many episodes the stop rule (5 failed calls in a
row) cut. The same-run baseline is the optimal-plan row.

``visible``: every (type, method, severity) on every task: ``apply_flaw`` raises when a plan comes
out unchanged; this counts those and times the sweep.

Usage:
    python bench/resilibench_flaws.py [rates] [--tasks N] [--trials K] [--flaws all|insertion]
        (default 200 tasks x 2 trials, all)
    python bench/resilibench_flaws.py visible [--every K]
"""

import argparse
import tempfile
import time
from pathlib import Path

import anyio

from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.report import wilson_interval
from mcp_resili.suites.resilibench.flaws import FLAW_METHODS, SEVERITIES, FlawError, apply_flaw, optimal_plan
from mcp_resili.suites.resilibench.library import resilibench_library
from mcp_resili.suites.resilibench.prompts import render_plan
from mcp_resili.suites.resilibench.tasks import full_tasks
from mcp_resili.tools.search import ToolIndex


def visible(every):
    library = resilibench_library()
    index = ToolIndex(library.specs)
    tasks = full_tasks()[::every]
    start = time.perf_counter()
    checked = unchanged = 0
    for task in tasks:
        plan = optimal_plan(task, library)
        shown = render_plan(task, plan)
        for flaw, methods in FLAW_METHODS.items():
            for method in methods:
                for severity in SEVERITIES:
                    checked += 1
                    try:
                        flawed = apply_flaw(task, plan, library, index, flaw, severity, method)
                    except FlawError:
                        unchanged += 1
                        continue
                    if render_plan(task, flawed) == shown:
                        unchanged += 1
    elapsed = time.perf_counter() - start
    print(
        f"{len(tasks)} tasks x {checked // len(tasks)} (type, method, severity) = {checked} flawed plans; "
        f"unchanged: {unchanged}; {elapsed:.1f} s"
    )


def cell(full, n):
    low, high = wilson_interval(full, n)
    return f"{100 * full / n:.1f} ({100 * low:.1f}–{100 * high:.1f})", (low, high)


#: The methods that insert steps, measured beside the default method of their type.
INSERTION_METHODS = (("redundant_operations", "unnecessary"), ("logical_inconsistency", "unrelated"))


def rows_of(flaws_only):
    """(label, variant spec without severity) per table row: each type's default method, then insertions."""
    rows = [(f, f"flawed:{f}") for f in FLAW_METHODS]
    rows += [(f"{f}:{m}", f"flawed:{f}:{{s}}:{m}") for f, m in INSERTION_METHODS]
    if flaws_only == "insertion":
        rows = rows[-len(INSERTION_METHODS) :]
    return rows


def spec(template, severity):
    return template.format(s=severity) if "{s}" in template else f"{template}:{severity}"


def rates(n_tasks, trials, which):
    tasks = full_tasks()
    step = max(1, len(tasks) // n_tasks)
    sample = tuple(t.id for t in tasks[::step][:n_tasks])
    table = rows_of(which)
    variants = ("optimal", *(spec(t, s) for _, t in table for s in SEVERITIES))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        config = RunConfig(
            db=Path(tmp) / "flaws.db",
            models=("scripted:plan-follower",),
            variants=variants,
            tasks=sample,
            trials=trials,
            concurrency=16,
        )
        result = anyio.run(execute, config)
    elapsed = time.perf_counter() - start
    full = {v: 0 for v in variants}
    n = {v: 0 for v in variants}
    cut = {v: 0 for v in variants}
    for row in result.rows:
        n[row.variant] += 1
        full[row.variant] += row.label == "full"
        cut[row.variant] += row.score["components"]["termination_rule"] == "too_many_errors"
    base_text, (base_low, _) = cell(full["optimal"], n["optimal"])
    print(
        f"plan-follower, default faults, {len(sample)} tasks (every {step}th of the full suite) x {trials} "
        f"trials = {n['optimal']} episodes per severity; {len(result.rows)} episodes in {elapsed:.0f} s"
    )
    print()
    base_cut = 100 * cut["optimal"] / n["optimal"]
    print(
        "| flaw type | severity | full % (95% CI) | optimal plan full % (95% CI) | intervals overlap "
        "| 5 failed calls in a row % (optimal plan) |"
    )
    print("|---|---|---:|---:|---|---:|")
    for label, template in table:
        rows = [(s, *(d[spec(template, s)] for d in (full, n, cut))) for s in SEVERITIES]
        rows.append(("pooled", *(sum(r[i] for r in rows) for i in (1, 2, 3))))
        for severity, k, m, c in rows:
            text, (_, high) = cell(k, m)
            print(
                f"| {label} | {severity} | {text} | {base_text} | {'yes' if high >= base_low else 'no'} "
                f"| {100 * c / m:.1f} ({base_cut:.1f}) |"
            )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", nargs="?", choices=("rates", "visible"), default="rates")
    parser.add_argument("--every", type=int, default=1, help="visible: use every K-th task")
    parser.add_argument("--tasks", type=int, default=200, help="rates: tasks sampled from the full suite")
    parser.add_argument("--trials", type=int, default=2, help="rates: trials per task")
    parser.add_argument(
        "--flaws",
        choices=("all", "insertion"),
        default="all",
        help="rates: every type's default method plus the inserting methods, or the inserting ones only",
    )
    args = parser.parse_args()
    if args.mode == "visible":
        visible(args.every)
    else:
        rates(args.tasks, args.trials, args.flaws)


if __name__ == "__main__":
    main()
