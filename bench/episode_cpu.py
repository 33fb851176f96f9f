"""CPU per episode of the single-process runner, against an earlier revision measured in the same run.

Each measurement is a fresh Python process that imports mcp-resili from a source tree, plays one small
warm-up run (imports, suite loading, first connections), then times ``execute()`` of
``--episodes`` ResiliBench episodes (full task list, stratified sample, ``scripted:oracle``, default
fault plan, no injected waiting) and prints its process CPU time per episode. The baseline is the
same script against ``git archive BASE`` of this repository (default: the revision before issue 15's
work); rounds alternate baseline and current so load from other jobs hits both alike. Reported:
the median over rounds of each side and the ratio of medians (and the median of per-round ratios).

    python bench/episode_cpu.py [--base REV] [--episodes N] [--rounds R] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from benchdocs import write_section

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- episode-cpu:start -->", "<!-- episode-cpu:end -->"
#: The revision the issue measured ("today's revision" when issue 15 was filed).
DEFAULT_BASE = "afbcb14"

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
import anyio
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.registry.loader import get_suite

async def main(episodes):
    tmp = Path(tempfile.mkdtemp())
    # Named tasks (the full list's first N): both revisions play exactly the same episodes.
    tasks = tuple(t.id for t in get_suite("resilibench").tasks[:episodes])
    common = dict(models=("scripted:oracle",), trials=1, time_scale=0.0)
    await execute(RunConfig(db=tmp / "warm.db", tasks=tasks[:5], **common))
    cpu, wall = time.process_time(), time.perf_counter()
    result = await execute(RunConfig(db=tmp / "run.db", tasks=tasks, **common))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    labels = sorted((r.task_id, r.label) for r in result.rows)
    print(json.dumps({"episodes": len(result.rows), "cpu": cpu, "wall": wall, "labels": len(labels)}))

anyio.run(main, int(sys.argv[1]))
"""


def export_revision(rev: str, into: Path) -> Path:
    archive = into / "base.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", rev], cwd=ROOT, stdout=out, check=True)
    tree = into / "base"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def alternate(
    rounds: int, base_tree: Path, measure: Callable[[Path], dict[str, float]]
) -> tuple[list[float], list[float]]:
    """CPU ms per episode of ``base_tree`` and of this tree, per round; rounds alternate who goes first."""
    base_ms: list[float] = []
    ours_ms: list[float] = []
    for r in range(rounds):
        sides = [("base", base_tree), ("ours", ROOT)]
        if r % 2:
            sides.reverse()
        for name, tree in sides:
            m = measure(tree)
            ms = m["cpu"] / m["episodes"] * 1000
            (base_ms if name == "base" else ours_ms).append(ms)
            print(f"round {r + 1} {name}: {ms:.2f} ms CPU/episode ({m['episodes']:.0f} episodes)", flush=True)
    return base_ms, ours_ms


def run_child(tree: Path, code: str, *argv: str, **env: str) -> dict[str, float]:
    """Run ``code`` in a fresh Python importing mcp-resili from ``tree``; its last stdout line as JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    data: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


def measure(tree: Path, episodes: int) -> dict[str, float]:
    return run_child(tree, CHILD, str(episodes))


def measured_on(load: float) -> str:
    """'Measured DATE UTC on N CPUs (arch), Python X; load average at the start L'."""
    return (
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} CPUs"
        f" ({platform.processor() or platform.machine()}), Python {platform.python_version()}; load"
        f" average at the start {load:.1f}"
    )


def ratio(base_ms: list[float], ours_ms: list[float]) -> float:
    """This revision's median over the baseline's."""
    return statistics.median(ours_ms) / statistics.median(base_ms)


def rounds_table(base: str, base_ms: list[float], ours_ms: list[float], what: str) -> list[str]:
    """Markdown lines: each side's median and rounds, then the ratio of medians."""
    paired = statistics.median(x / y for x, y in zip(ours_ms, base_ms, strict=True))
    return [
        f"| revision | {what} (median) | rounds |",
        "|---|---:|---|",
        f"| baseline `{base}` | {statistics.median(base_ms):.2f} | {' '.join(f'{x:.2f}' for x in base_ms)} |",
        f"| this revision | {statistics.median(ours_ms):.2f} | {' '.join(f'{x:.2f}' for x in ours_ms)} |",
        "",
        f"Ratio this / baseline: **{ratio(base_ms, ours_ms):.2f}×**"
        f" (median of per-round ratios {paired:.2f}×).",
    ]


def section(base: str, base_ms: list[float], ours_ms: list[float], episodes: int, load: float) -> str:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    lines = [
        START,
        "## CPU per episode, single process (`bench/episode_cpu.py`)",
        "",
        measured_on(load) + " (a shared machine: other jobs slow both sides; CPU time moves less than"
        " wall time, but caches and frequency still vary, hence rounds and medians).",
        "",
        f"{episodes} ResiliBench episodes (the first {episodes} tasks of the full list,"
        " `scripted:oracle`, default fault plan, `--time-scale 0`) per measurement, after a warm-up"
        " run in the same process;"
        f" {len(base_ms)} rounds alternating the baseline revision `{base}` (the code when issue 15"
        f" was filed) and this revision (`{rev.stdout.strip()}`), each a fresh process.",
        "",
        *rounds_table(base, base_ms, ours_ms, "CPU ms / episode"),
        f"Target ≤ 0.50×: {'**met**' if ratio(base_ms, ours_ms) <= 0.5 else '**not met**'}.",
        "",
        f"Reproduce: `python bench/episode_cpu.py --base {base} --write-docs`.",
        END,
    ]
    return "\n".join(lines)


def revision_parser(doc: str | None, base: str, episodes: int) -> argparse.ArgumentParser:
    """The options of a bench against a base revision: --base, --episodes, --rounds, --write-docs."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default=base, help="baseline git revision")
    parser.add_argument("--episodes", type=int, default=episodes)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write-docs", action="store_true")
    return parser


def against_base(
    args: argparse.Namespace,
    measure: Callable[[Path], dict[str, float]],
    section: Callable[[list[float], list[float], float], str],
    markers: tuple[str, str],
) -> None:
    """Measure this tree against ``args.base`` in alternating rounds; print (and write) the section."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = export_revision(args.base, Path(tmp))
        base_ms, ours_ms = alternate(args.rounds, base_tree, measure)
    text = section(base_ms, ours_ms, load)
    print(text)
    if args.write_docs:
        write_section(text, *markers)


def main() -> None:
    args = revision_parser(__doc__, DEFAULT_BASE, 400).parse_args()
    against_base(
        args,
        lambda tree: measure(tree, args.episodes),
        lambda base_ms, ours_ms, load: section(args.base, base_ms, ours_ms, args.episodes, load),
        (START, END),
    )


if __name__ == "__main__":
    main()
