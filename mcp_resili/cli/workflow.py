"""``compare`` (the workflow CI gate), ``perturb`` and ``calibrate`` (WorkflowPerturb)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mcp_resili.cli.common import Commands, add_seed
from mcp_resili.errors import UserError

if TYPE_CHECKING:
    from mcp_resili.workflow import WorkflowGraph


def register(commands: Commands) -> None:
    """Add ``compare``, ``perturb`` and ``calibrate``."""
    compare = commands.add_parser(
        "compare", help="gate a candidate workflow against its golden one (exit 1 on a regression)"
    )
    compare.add_argument("golden", type=Path, help="workflow JSON, or a trace JSONL (its executed tools)")
    compare.add_argument("candidate", type=Path, help="workflow JSON, or a trace JSONL")
    compare.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="MODE=VALUE",
        help="override an alert threshold, e.g. missing_steps=0.8 (repeatable)",
    )
    compare.add_argument(
        "--thresholds",
        choices=("tools", "paper"),
        help="alert thresholds: tools (calibrated on tool-call workflows) or paper (WorkflowPerturb "
        "Table 1); default: tools for tool-call goldens, paper for text goldens",
    )
    _add_graph(compare)
    compare.add_argument(
        "--match-arguments", action="store_true", help="tool steps pair only when their arguments agree too"
    )
    compare.add_argument("--json", action="store_true", help="print the verdict as JSON")
    compare.set_defaults(handler=compare_command)

    perturb = commands.add_parser(
        "perturb", help="write a WorkflowPerturb variant of a workflow (for calibration)"
    )
    perturb.add_argument("workflow", type=Path)
    perturb.add_argument("--type", choices=("missing", "compressed", "description"), required=True)
    perturb.add_argument("--level", type=float, default=0.3, help="α: 0.1, 0.3 or 0.5 (any value in (0, 1))")
    add_seed(perturb, what="perturbation")
    perturb.set_defaults(handler=perturb_command)

    _add_calibrate(commands)


def _add_calibrate(commands: Commands) -> None:
    calibrate = commands.add_parser(
        "calibrate", help="each workflow metric's mean per perturbation and level, and its sensitivity Δ"
    )
    calibrate.add_argument("workflows", nargs="*", type=Path, help="golden workflow files (JSON or trace)")
    calibrate.add_argument("--suite", help="use every task's golden DAG of this suite instead")
    add_seed(calibrate, what="perturbations")
    _add_graph(calibrate)
    calibrate.add_argument(
        "--derive-thresholds",
        action="store_true",
        help="fit alert thresholds separating alpha=0.1 from alpha>=0.3 (see docs/reports.md)",
    )
    calibrate.add_argument(
        "--seeds",
        type=int,
        help="perturbation seeds per golden, from --seed on (default 1; 3 with --derive-thresholds)",
    )
    calibrate.add_argument(
        "--held-out",
        type=float,
        default=0.5,
        metavar="SHARE",
        help="with --derive-thresholds: share of the goldens (split by structure) held out to report "
        "the fitted gate's false-alert and miss rates on, with other seeds (default 0.5; 0: report "
        "in sample, as the fit saw them)",
    )
    calibrate.add_argument(
        "--min-steps",
        type=int,
        help="goldens shorter than this are skipped (default 1; 5 with --derive-thresholds)",
    )
    calibrate.set_defaults(handler=calibrate_command)


def _add_graph(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--graph",
        choices=("lcc", "mcs"),
        default="lcc",
        help="Graph F1 definition: lcc (WorFBench's largest connected component, default) or mcs "
        "(WorkflowPerturb's maximum common induced subgraph)",
    )


def compare_command(args: argparse.Namespace) -> int:
    """Exit 1 when an alert fires, 0 otherwise."""
    from mcp_resili.workflow import compare, load_workflow, rules_with

    overrides = {}
    for item in args.threshold:
        mode, sep, value = item.partition("=")
        try:
            overrides[mode] = float(value)
        except ValueError:
            raise UserError(f"--threshold expects MODE=NUMBER, got {item!r}") from None
        if not sep:
            raise UserError(f"--threshold expects MODE=NUMBER, got {item!r}")
    try:
        rules = rules_with(overrides, args.thresholds)
        golden = load_workflow(args.golden)
        verdict = compare(
            golden,
            load_workflow(args.candidate),
            rules,
            graph=args.graph,
            match_arguments=args.match_arguments,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.thresholds == "paper" and golden.kind == "tools":
        print(
            "mcp-resili: warning: --thresholds paper was calibrated on text workflows; on tool-call "
            "workflows its BLEU/GLEU rule alerts on most candidates with one call missing (see "
            "docs/reports.md); the tools set is calibrated for them",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=2))
    else:
        for name, value in verdict.scores.to_dict().items():
            print(f"{name:>16}  {'undefined (fewer than two aligned steps)' if value is None else value}")
        print(f"{'thresholds':>16}  {verdict.threshold_set} · graph_f1 = {verdict.graph}")
        for alert in verdict.alerts:
            print(f"ALERT {alert}")
        print("regression" if verdict.regression else "ok: no alert fired")
    return 1 if verdict.regression else 0


def perturb_command(args: argparse.Namespace) -> int:
    """Print a perturbed workflow as JSON."""
    from mcp_resili.workflow import load_workflow, perturb

    try:
        variant = perturb(load_workflow(args.workflow), args.type, args.level, args.seed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    print(variant.model_dump_json(indent=2))
    return 0


def calibrate_command(args: argparse.Namespace) -> int:
    """Print each metric's sensitivity to the perturbations (or fitted thresholds) as JSON."""
    from mcp_resili.registry.loader import get_suite
    from mcp_resili.workflow import load_workflow, sensitivity, workflow_from_task
    from mcp_resili.workflow.calibration import MIN_STEPS

    if bool(args.suite) == bool(args.workflows):
        raise UserError("give golden workflow files or --suite NAME (one of the two)")
    if args.suite:
        goldens = [workflow_from_task(t) for t in get_suite(args.suite).tasks]
    else:
        goldens = [load_workflow(path) for path in args.workflows]
    derive = args.derive_thresholds
    seeds = args.seeds if args.seeds is not None else (3 if derive else 1)
    min_steps = args.min_steps if args.min_steps is not None else (MIN_STEPS if derive else 1)
    if seeds < 1 or min_steps < 1:
        raise UserError("--seeds and --min-steps must be at least 1")
    if derive:
        return _derive_command(args, goldens, seeds, min_steps)
    result = sensitivity(goldens, args.seed, graph=args.graph, seeds=seeds, min_steps=min_steps)
    header = {"workflows": len(goldens), "seed": args.seed, "seeds": seeds, "min_steps": min_steps}
    print(json.dumps({**header, "graph": args.graph, **result}, indent=2))
    return 0


def _derive_command(
    args: argparse.Namespace, goldens: list[WorkflowGraph], seeds: int, min_steps: int
) -> int:
    """``calibrate --derive-thresholds``: fit on one split of the goldens, judge the gate on the other."""
    from mcp_resili.workflow.calibration import (
        HELD_OUT_SEEDS,
        check_rules,
        derive_thresholds,
        rules_from_fits,
        split_goldens,
    )

    if not 0 <= args.held_out < 1:
        raise UserError(f"--held-out must be in [0, 1), got {args.held_out}")
    fitting, held_out = split_goldens(goldens, args.held_out) if args.held_out else (goldens, goldens)
    if not fitting or not held_out:
        raise UserError(
            f"--held-out {args.held_out} left no golden on one side of the split ({len(goldens)} "
            "golden(s)): give more goldens, or --held-out 0 to report in sample"
        )
    fitting_seeds = range(args.seed, args.seed + seeds)
    fits = derive_thresholds(fitting, seeds=fitting_seeds, min_steps=min_steps)
    derived = rules_from_fits(fits)
    # Held out: other goldens and other seeds; in sample (--held-out 0): the fit's own variants.
    check_seeds = [args.seed + s for s in HELD_OUT_SEEDS] if args.held_out else list(fitting_seeds)
    checks = check_rules(derived, held_out, check_seeds, min_steps) if derived else []
    rules = [{"mode": r.failure_mode, "metrics": list(r.metrics), "below": r.threshold} for r in derived]
    print(
        json.dumps(
            {
                "workflows": len(goldens),
                "fitted_on": {"workflows": len(fitting), "seeds": list(fitting_seeds)},
                "checked_on": {
                    "workflows": len(held_out),
                    "seeds": check_seeds,
                    "held_out": bool(args.held_out),
                },
                "fits": [f.to_dict() for f in fits],
                "rules": rules,
                "gate": [c.to_dict() for c in checks],
            },
            indent=2,
        )
    )
    return 0
