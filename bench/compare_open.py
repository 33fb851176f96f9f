"""How fast a ten-run comparison report opens in headless Chromium, against a baseline revision.

One scripted ResiliBench sweep is played once (or an existing store holding one is named with
``--source``); its rows are then copied into a new store as ten runs with SQL, varying nothing but
the run id and the episode ids (prefixed with the run's number, so they stay unique across runs as
real runs' are). Playing ten sweeps would cost about 5 minutes each on two shared cores.

Each side builds ``mcp-resili report R1 ... R10 --html DIR`` from its own source tree in a fresh
child process (CPU and peak RSS measured from outside). Each folder is then opened in headless
Chromium over the DevTools protocol (``tests/browser.py``: Chromium starts on about:blank, then
navigates to a copy of index.html with a probe script at the end of its body). The time is the
page's own: ``performance.now()`` (ms since navigation started) once the episode browser shows its
first page (rows in its table and its "episodes 1–50 of N" line) and two more frames were painted.
Rounds alternate sides; the median of each side is shown.

    python bench/compare_open.py --source /tmp/sweep.db --write-docs
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from benchdocs import write_section
from report_size import default_base, make_store, stored_run
from trees import checkout, revision_of, tree_env

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from browser import open_in_chromium, probe_copy  # noqa: E402

START, END = "<!-- compare-open:start -->", "<!-- compare-open:end -->"
CHROMIUM = Path("/usr/bin/chromium")
#: Goal of issue 37 (item 5): a ten-run comparison of 20,000 episodes each opens in under 3 s.
GOAL_MS = 3_000


@dataclass
class Side:
    name: str
    cpu: float = 0.0
    wall: float = 0.0
    peak_mib: float = 0.0
    bytes_on_disk: int = 0
    opened_ms: list[float] = field(default_factory=list)
    seen: dict[str, object] = field(default_factory=dict)


def sweep_parser(description: str) -> argparse.ArgumentParser:
    """The options both comparison benches take: the sweep, its runs, the revision, the docs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--source", type=Path, help="a store holding one sweep (else one is played)")
    parser.add_argument("--episodes", type=int, default=20_160, help="episodes of the sweep played")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--this", default=".", help="the revision measured (default: this checkout)")
    parser.add_argument("--write-docs", action="store_true", help="rewrite its section of docs/benchmarks.md")
    return parser


def prepared_runs(
    work: Path, source: Path | None, episodes: int, runs: int, name: str
) -> tuple[Path, list[str], int]:
    """A store of ``runs`` copies of one sweep run in ``work / name``: (its path, run ids, episodes per run).

    The sweep is ``source`` when given (its first run), else one made now of ``episodes`` episodes.
    """
    source = source.resolve() if source else work / "sweep.db"
    source_run, per_run = stored_run(source) if source.exists() else make_store(source, episodes, False)
    db = work / name
    run_ids = ten_runs(source, source_run, db, runs)
    print(f"store: {runs} runs of {per_run:,} episodes", flush=True)
    return db, run_ids, per_run


def ten_runs(source: Path, source_run: str, db: Path, runs: int) -> list[str]:
    """``source_run`` of ``source`` as ``runs`` runs in a new store ``db``; returns their ids.

    ``db`` starts as a file copy of ``source`` (so it is a store of this version as it is); other runs
    are dropped, the run is copied, then itself renamed to the first copy.
    """
    ids = [f"copy-{n:02d}" for n in range(runs)]
    shutil.copyfile(source, db)
    connection = sqlite3.connect(db)
    try:
        connection.execute("DELETE FROM episodes WHERE run_id != ?", (source_run,))
        connection.execute("DELETE FROM runs WHERE id != ?", (source_run,))
        columns = [row[1] for row in connection.execute("PRAGMA table_info(episodes)")]
        rest = ", ".join(c for c in columns if c not in ("run_id", "episode_id"))
        for n, run_id in enumerate(ids):
            connection.execute(
                "INSERT INTO runs SELECT ?, created_at, suite, seed, config FROM runs WHERE id = ?",
                (run_id, source_run),
            )
            connection.execute(
                f"INSERT INTO episodes (run_id, episode_id, {rest}) "
                f"SELECT ?, ? || episode_id, {rest} FROM episodes WHERE run_id = ?",
                (run_id, f"{n:02d}-", source_run),
            )
        connection.execute("DELETE FROM episodes WHERE run_id = ?", (source_run,))
        connection.execute("DELETE FROM runs WHERE id = ?", (source_run,))
        connection.commit()
    finally:
        connection.close()
    return ids


def build(tree: Path, db: Path, run_ids: list[str], out: Path, side: Side) -> None:
    """``report R1 ... --html OUT`` from ``tree`` in a child process, measured from outside."""
    argv = [sys.executable, "-m", "mcp_resili", "report", *run_ids, "--db", str(db), "--html", str(out)]
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv, cwd=out.parent, env=tree_env(tree), stdout=subprocess.DEVNULL, stderr=err
        )
        _, status, usage = os.wait4(proc.pid, 0)
        side.wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"the report of {tree} failed: {err.read().decode().strip().splitlines()[-1:]}")
    side.cpu = usage.ru_utime + usage.ru_stime
    side.peak_mib = usage.ru_maxrss / 1024
    side.bytes_on_disk = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())


def main() -> int:
    parser = sweep_parser(__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="openings per side")
    parser.add_argument("--base", default=None, help="baseline revision (default: git merge-base HEAD main)")
    args = parser.parse_args()
    base_rev = args.base or default_base()
    with tempfile.TemporaryDirectory(prefix="mcp-resili-compare-open-") as tmp:
        work = Path(tmp)
        db, run_ids, per_run = prepared_runs(work, args.source, args.episodes, args.runs, "ten.db")
        with checkout(base_rev) as base_tree, checkout(args.this) as ours:
            sides = {
                "base": Side(f"baseline `{base_rev[:10]}`"),
                "this": Side(f"this ({revision_of(ours)})"),
            }
            pages = {}
            for key, tree in (("base", base_tree), ("this", ours)):
                out = work / key
                build(tree, db, run_ids, out, sides[key])
                pages[key] = probe_copy(out / "index.html")
                s = sides[key]
                print(
                    f"{s.name:28} built in CPU {s.cpu:.1f} s, peak RSS {s.peak_mib:.0f} MiB, "
                    f"{s.bytes_on_disk / 1e6:.1f} MB",
                    flush=True,
                )
            for n in range(args.rounds):
                for key in ("base", "this") if n % 2 == 0 else ("this", "base"):
                    seen, errors = open_in_chromium(CHROMIUM, work / f"chromium-{key}-{n}", pages[key])
                    if errors:
                        raise SystemExit(f"{sides[key].name}: script errors: {errors}")
                    sides[key].opened_ms.append(float(seen["ms"]))  # type: ignore[arg-type]
                    sides[key].seen = seen
                    print(f"{sides[key].name:28} opened in {seen['ms']:.0f} ms: {seen['info']}", flush=True)
    this = sides["this"]
    medians = {key: statistics.median(s.opened_ms) for key, s in sides.items()}
    ratio = medians["this"] / medians["base"]
    print(f"this / baseline: opening {ratio:.2f}")
    if args.write_docs:
        machine = f"Python {platform.python_version()}, {os.cpu_count()} shared cores"
        version = subprocess.run([str(CHROMIUM), "--version"], capture_output=True, text=True).stdout.strip()
        total = args.runs * per_run
        lines = [
            START,
            f"## A {args.runs}-run comparison opened in Chromium (`bench/compare_open.py`)",
            "",
            f"`mcp-resili report R1 … R{args.runs} --html DIR` over {args.runs} runs of {per_run:,} episodes "
            f"each ({total:,} in all). One scripted ResiliBench sweep (`run --model scripted:oracle`, four "
            "variants, one trial) was played once and **its rows copied nine more times with SQL**, "
            "varying nothing but the run id and the episode ids (prefixed with the copy's number): "
            "the ten runs are identical in content. Each side builds the folder from its own source "
            "tree; then "
            f"{version} (headless) opens each over the DevTools protocol, starting on about:blank. "
            "The time is the page's own `performance.now()` when the episode browser shows its first "
            "page and two frames "
            f"have been painted after it; {args.rounds} openings per side, alternating, median shown. "
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {machine}.",
            "",
            "| revision | folder MB | build CPU s | build peak RSS MiB | opened in ms (median) "
            "| openings ms |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for key, s in sides.items():
            lines.append(
                f"| {s.name} | {s.bytes_on_disk / 1e6:.1f} | {s.cpu:.1f} | {s.peak_mib:.0f} | "
                f"{medians[key]:,.0f} | {', '.join(f'{ms:,.0f}' for ms in s.opened_ms)} |"
            )
        met = "**met**" if medians["this"] < GOAL_MS else "**not met**"
        lines += [
            "",
            f"This ÷ baseline: opening **{ratio:.2f}**. Goal (issue 37): under {GOAL_MS / 1000:.0f} s "
            f"({met}; the browser's first page: {this.seen.get('info')}).",
            END,
        ]
        write_section("\n".join(lines), START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
