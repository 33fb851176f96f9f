"""Report size and build time at 20,000 episodes, against the same pipeline at 2,000 (same-run baseline).

A synthetic ResiliBench-shaped run (``mcp_resili/suites/resilibench/synthetic.py``: real task ids, traces that
follow the golden workflows, injected faults, ~1% infrastructure errors) is written straight into a
store; then ``report --html DIR`` builds the folder form, ``report RUN_A RUN_B --html DIR`` the
comparison of two such runs, and headless Chromium opens each page and waits for the episode
browser to show its first rows. Measured: what a browser loads to show the page (index.html plus
the index, episodes/GEN/index.js), the largest chunk loaded when an episode is opened, the whole
folder, the CPU seconds of the build, and whether one self-contained file is refused (it must be,
past 10 MB).

    python bench/report_scale.py                 # 2,000 and 20,000 episodes, and two 20,000-episode runs
    python bench/report_scale.py --write-docs    # also update the section of docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchdocs import write_section

REPO_ROOT = Path(__file__).resolve().parents[1]
START_MARKER = "<!-- report-scale:start -->"
END_MARKER = "<!-- report-scale:end -->"
CHROMIUM = Path("/usr/bin/chromium")
LIMIT_MB = 10.0


@dataclass
class Measure:
    label: str
    episodes: int
    page_bytes: int
    index_bytes: int
    largest_chunk: int
    folder_bytes: int
    build_cpu_s: float
    build_wall_s: float
    one_file_refused: bool
    browser_rows: str

    @property
    def initial_mb(self) -> float:
        return (self.page_bytes + self.index_bytes) / 1e6


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mcp_resili", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO_ROOT)


def _browser_rows(page: Path, profile: Path) -> str:
    """The episode browser's page-info line once Chromium has run the page's scripts."""
    if not CHROMIUM.exists():
        return "chromium not installed"
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=30000",
        "--dump-dom",
        page.as_uri(),
    ]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False).stdout
    found = re.search(r'id="page-info">([^<]*)<', dom)
    return found.group(1) if found else "no rows shown"


def _generation(folder: Path) -> Path:
    """The folder the report's page loads its index and chunks from (``episodes/GEN/``)."""
    page = (folder / "index.html").read_text(encoding="utf-8")
    found = re.search(r'<section id="episodes" data-source="([^"]*)"', page)
    if found is None:
        raise SystemExit(f"{folder}/index.html names no episodes folder")
    return folder / found.group(1)


def measure(label: str, db: Path, runs: list[str], episodes: int, work: Path) -> Measure:
    folder = work / f"report-{label}"
    cpu, wall = _cpu(), time.perf_counter()
    done = _cli("report", *runs, "--db", str(db), "--html", str(folder))
    cpu, wall = _cpu() - cpu, time.perf_counter() - wall
    if done.returncode != 0:
        raise SystemExit(f"report failed: {done.stderr}")
    one_file = _cli("report", *runs, "--db", str(db), "--html", str(work / f"{label}.html"))
    data = _generation(folder)
    chunks = list(data.glob("chunk-*.js"))
    result = Measure(
        label=label,
        episodes=episodes,
        page_bytes=(folder / "index.html").stat().st_size,
        index_bytes=(data / "index.js").stat().st_size,
        largest_chunk=max(p.stat().st_size for p in chunks),
        folder_bytes=sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()),
        build_cpu_s=cpu,
        build_wall_s=wall,
        one_file_refused=one_file.returncode == 2,
        browser_rows=_browser_rows(folder / "index.html", work / "chromium-profile"),
    )
    shutil.rmtree(folder)
    print(result, file=sys.stderr)
    return result


def docs_section(results: list[Measure], load: str) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{os.cpu_count()} CPUs ({platform.machine()}), Python {platform.python_version()}"
    base = results[0]
    rows = []
    for r in results:
        rows.append(
            f"| {r.label} | {r.episodes:,} | {r.page_bytes / 1e3:.0f} kB | {r.index_bytes / 1e6:.2f} MB | "
            f"**{r.initial_mb:.2f} MB** | {r.largest_chunk / 1e6:.2f} MB | {r.folder_bytes / 1e6:.0f} MB | "
            f"{r.build_cpu_s:.1f} ({r.build_cpu_s / base.build_cpu_s:.1f}×) | "
            f"{'refused (exit 2)' if r.one_file_refused else 'written'} | {r.browser_rows} |"
        )
    big = [r for r in results if r.episodes >= 20_000]
    met = all(r.initial_mb <= LIMIT_MB for r in big)
    lines = [
        START_MARKER,
        "## Report size at 20,000 episodes (`bench/report_scale.py`)",
        "",
        "Synthetic ResiliBench-shaped runs (`suites/resilibench/synthetic.py`: the 40 default tasks, traces",
        "following their golden workflows, faults, ~1% infrastructure errors) written straight into a store,",
        "then `mcp-resili report --html DIR` (the folder form). *Loaded to show the page*: index.html plus",
        "its index (episodes/GEN/index.js), everything a browser fetches before anyone opens an episode;",
        "opening one loads its chunk of 100 episodes (episodes/GEN/chunk-NNNNN.js). Same-run baseline: the",
        "same pipeline at 2,000 episodes; CPU seconds of the `report` process (start-up included), ratio to",
        "the baseline in brackets. *Browser*: what the episode browser said after headless Chromium ran",
        "the page.",
        "",
        f"- Date: {now}; machine: {machine}; load average at start: {load}",
        "- Command: `python bench/report_scale.py --write-docs`",
        "",
        "| report | episodes | index.html | episodes/GEN/index.js | loaded to show the page | largest chunk "
        "| whole folder | build CPU s | one file (`--html x.html`) | browser |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
        *rows,
        "",
        f"Target (issue 16): a 20,000-episode report opens under {LIMIT_MB:.0f} MB: "
        f"**{'met' if met else 'not met'}**. index.html does not grow with the episodes (only the",
        "tables' numbers change); the index costs about 100 bytes per episode; the details (tool results",
        "cut to 1,500 characters) stay on disk until an episode of their chunk is opened.",
        END_MARKER,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20_000)
    parser.add_argument("--baseline", type=int, default=2_000)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO_ROOT))
    from mcp_resili.suites.resilibench.synthetic import write_synthetic_run

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db = work / "scale.db"
        started = time.perf_counter()
        write_synthetic_run(db, args.baseline, run_id="baseline", seed=0)
        write_synthetic_run(db, args.episodes, run_id="big-a", seed=1)
        write_synthetic_run(db, args.episodes, run_id="big-b", seed=2)
        print(f"synthetic store written in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        results = [
            measure(f"one run, {args.baseline:,}", db, ["baseline"], args.baseline, work),
            measure(f"one run, {args.episodes:,}", db, ["big-a"], args.episodes, work),
            measure("two runs compared", db, ["big-a", "big-b"], 2 * args.episodes, work),
        ]
    section = docs_section(results, load)
    print(section)
    if args.write_docs:
        write_section(section, START_MARKER, END_MARKER)


if __name__ == "__main__":
    main()
