"""The HTML folder report of a scripted run: bytes on disk, CPU and peak memory, against a baseline revision.

One store is made first: a scripted ResiliBench sweep (``scripted:oracle`` over the first N/4 tasks
times four prompt variants, one trial) played by this checkout, or with ``--synthetic`` a
synthetic run of ResiliBench-shaped episodes written straight into the store. Then each side
builds ``mcp-resili report RUN --html DIR`` from its own source tree (the baseline revision checked
out into a temporary work tree, and this checkout) in a fresh child process, rounds alternating
sides so that other jobs on the machine weigh on both alike. Measured from outside: the folder's
bytes on disk per episode, the child's CPU seconds (user + system, start-up included) and its peak
resident set (``ru_maxrss``).

    python bench/report_size.py                      # 2,000 episodes, against `git merge-base HEAD main`
    python bench/report_size.py --episodes 20160 --write-docs
"""

from __future__ import annotations

import argparse
import base64
import binascii
import gzip
import hashlib
import os
import platform
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from benchdocs import write_section
from trees import checkout, revision_of, tree_env

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- report-size:start -->", "<!-- report-size:end -->"
VARIANTS = ("baseline", "cot", "optimal", "flawed:sequence_disorder")
#: Goals of issue 37 (item 5): per episode on disk, peak RSS, CPU for 20,000 episodes.
GOAL_BYTES, GOAL_RSS_MIB, GOAL_CPU_20K = 2_500, 300, 20.0


@dataclass
class Built:
    episodes: int
    bytes_on_disk: int
    files: int
    cpu: float
    peak_mib: float
    wall: float
    content: str

    @property
    def per_episode(self) -> float:
        return self.bytes_on_disk / self.episodes


def default_base() -> str:
    """Where this branch left main: the report before this work."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], capture_output=True, text=True
    )
    return done.stdout.strip() or "main"


def make_store(db: Path, episodes: int, synthetic: bool) -> tuple[str, int]:
    """The run every side reports on: (run id, episodes stored)."""
    if synthetic:
        sys.path.insert(0, str(ROOT))
        from mcp_resili.suites.resilibench.synthetic import write_synthetic_run

        write_synthetic_run(db, episodes, run_id="synthetic", seed=0)
        return "synthetic", episodes
    tasks = -(-episodes // len(VARIANTS))
    argv = [sys.executable, "-m", "mcp_resili", "run", "--model", "scripted:oracle", "--trials", "1"]
    argv += ["--concurrency", "16", "--db", str(db), "--limit", str(tasks), "--time-scale", "0"]
    for variant in VARIANTS:
        argv += ["--variant", variant]
    done = subprocess.run(argv, cwd=db.parent, env=tree_env(ROOT), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the scripted run failed: {done.stderr.strip().splitlines()[-1:]}")
    return stored_run(db)


def stored_run(db: Path) -> tuple[str, int]:
    """The biggest run in ``db``: (run id, episodes)."""
    connection = sqlite3.connect(db)
    try:
        run_id, count = connection.execute(
            "SELECT run_id, COUNT(*) FROM episodes GROUP BY run_id ORDER BY COUNT(*) DESC LIMIT 1"
        ).fetchone()
    finally:
        connection.close()
    return str(run_id), int(count)


def disk_usage(folder: Path) -> tuple[int, int]:
    """(bytes, files) of everything under ``folder``."""
    sizes = [p.stat().st_size for p in folder.rglob("*") if p.is_file()]
    return sum(sizes), len(sizes)


_PACKED = re.compile(r'"([A-Za-z0-9+/=]{16,})"')
_GENERATION = re.compile(r"episodes/[0-9a-f]{16}/")


def content_digest(folder: Path) -> str:
    """A digest of what the report says, not of how it is packed: every file with its packed data
    unpacked (gzip level, and so the generation folder's name, left out)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        text = _GENERATION.sub("episodes/GEN/", path.read_text(encoding="utf-8"))
        digest.update(path.name.encode() + b"\0")
        for n, part in enumerate(_PACKED.split(text)):
            digest.update(_unpacked(part) if n % 2 else part.encode())
    return digest.hexdigest()[:16]


def _unpacked(part: str) -> bytes:
    """A packed payload's bytes; a string that only looks like one (an older report's) as it is."""
    try:
        return gzip.decompress(base64.b64decode(part))
    except (binascii.Error, OSError, EOFError):  # not base64, or not gzip (BadGzipFile is an OSError)
        return part.encode()


def build(tree: Path, db: Path, run_id: str, episodes: int, out: Path) -> Built:
    """``report RUN --html OUT`` from ``tree`` in a child process, measured from outside."""
    argv = [sys.executable, "-m", "mcp_resili", "report", run_id, "--db", str(db), "--html", str(out)]
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv, cwd=out.parent, env=tree_env(tree), stdout=subprocess.DEVNULL, stderr=err
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"the report of {tree} failed: {err.read().decode().strip().splitlines()[-1:]}")
    size, files = disk_usage(out)
    # Linux reports ru_maxrss in KiB.
    cpu = usage.ru_utime + usage.ru_stime
    return Built(episodes, size, files, cpu, usage.ru_maxrss / 1024, wall, content_digest(out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2_000)
    parser.add_argument("--base", default=None, help="baseline revision (default: git merge-base HEAD main)")
    parser.add_argument("--this", default=".", help="the revision measured (default: this checkout as it is)")
    parser.add_argument("--store", type=Path, help="keep the run's database here (reused when it exists)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--synthetic", action="store_true", help="a synthetic store instead of a scripted run"
    )
    parser.add_argument("--write-docs", action="store_true", help="rewrite its section of docs/benchmarks.md")
    args = parser.parse_args()
    base_rev = args.base or default_base()
    results: dict[str, list[Built]] = {"base": [], "this": []}
    with tempfile.TemporaryDirectory(prefix="mcp-resili-report-size-") as tmp:
        work = Path(tmp)
        db = args.store.resolve() if args.store else work / "run.db"
        started = time.perf_counter()
        run_id, episodes = stored_run(db) if db.exists() else make_store(db, args.episodes, args.synthetic)
        print(f"store: {episodes:,} episodes in {time.perf_counter() - started:.0f} s", flush=True)
        with checkout(base_rev) as base_tree, checkout(args.this) as ours:
            names = {"base": f"baseline `{base_rev[:10]}`", "this": f"this ({revision_of(ours)})"}
            for n in range(args.rounds):
                for side, tree in (("base", base_tree), ("this", ours)):
                    out = work / f"{side}-{n}"
                    got = build(tree, db, run_id, episodes, out)
                    results[side].append(got)
                    subprocess.run(["rm", "-rf", str(out)], check=True)
                    print(
                        f"{names[side]:28} {got.bytes_on_disk / 1e6:8.1f} MB on disk "
                        f"({got.per_episode:,.0f} B per episode, {got.files:,} files), CPU {got.cpu:.1f} s, "
                        f"peak RSS {got.peak_mib:.0f} MiB, wall {got.wall:.1f} s, content {got.content}",
                        flush=True,
                    )
    base, this = (min(results[side], key=lambda b: b.cpu) for side in ("base", "this"))
    ratios = (this.per_episode / base.per_episode, this.cpu / base.cpu, this.peak_mib / base.peak_mib)
    print(f"this / baseline: bytes {ratios[0]:.3f}, CPU {ratios[1]:.2f}, peak RSS {ratios[2]:.2f}")
    same = base.content == this.content
    print(f"content (packed data unpacked) the same as the baseline's: {same}")
    if args.write_docs:
        source = "synthetic ResiliBench-shaped run" if args.synthetic else "scripted ResiliBench sweep"
        how = (
            "`suites/resilibench/synthetic.py`"
            if args.synthetic
            else "`run --model scripted:oracle --limit N/4 --variant "
            + " --variant ".join(VARIANTS)
            + " --trials 1`"
        )
        machine = f"Python {platform.python_version()}, {os.cpu_count()} shared cores"
        lines = [
            START,
            f"## Report size and build cost at {episodes:,} episodes (`bench/report_size.py`)",
            "",
            f"`mcp-resili report RUN --html DIR` (the folder form) of one {source} "
            f"({how}), "
            "built by each side from its own source tree in a fresh process, measured from outside "
            "(bytes of every file in DIR; the child's user + system CPU, start-up included; its "
            f"`ru_maxrss`). {args.rounds} round(s), the lower CPU of each side shown. "
            f"{datetime.now(UTC):%Y-%m-%d}, {machine}.",
            "",
            "| revision | episodes | on disk | bytes per episode | files | CPU s | peak RSS MiB |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for side in ("base", "this"):
            b = min(results[side], key=lambda r: r.cpu)
            lines.append(
                f"| {names[side]} | {b.episodes:,} | {b.bytes_on_disk / 1e6:.1f} MB | {b.per_episode:,.0f} "
                f"| {b.files:,} | {b.cpu:.1f} | {b.peak_mib:.0f} |"
            )
        cpu_20k = this.cpu * 20_000 / this.episodes

        def met(ok: bool) -> str:
            return "**met**" if ok else "**not met**"

        lines += [
            "",
            f"This ÷ baseline: bytes **{ratios[0]:.3f}**, CPU **{ratios[1]:.2f}**, "
            f"peak RSS **{ratios[2]:.2f}**. Goals (issue 37): under {GOAL_BYTES:,} bytes per episode "
            f"({met(this.per_episode < GOAL_BYTES)}), peak RSS under {GOAL_RSS_MIB} MiB "
            f"({met(this.peak_mib < GOAL_RSS_MIB)} at this size), under {GOAL_CPU_20K:.0f} s of CPU "
            f"for 20,000 episodes ({cpu_20k:.1f} s scaled linearly from this run: "
            f"{met(cpu_20k < GOAL_CPU_20K)}). What the two folders say (every file, packed data "
            f"unpacked) is {'the same' if same else '**not** the same'} on both sides.",
            END,
        ]
        write_section("\n".join(lines), START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
