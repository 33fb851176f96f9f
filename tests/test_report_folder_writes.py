"""``report --html``: a rewrite of a report folder (or one-file page) that fails, is killed or is
interrupted at any step leaves one whole report, the old or the new, never a mix; later writes recover.
A review finding: the old report was lost when the new one failed mid-write. Synthetic runs of the
tiny suite (tests/tiny_suite/synthetic.py).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tiny_suite.synthetic import write_synthetic_run

from mcp_resili.cli import main
from mcp_resili.registry.loader import find_suite
from mcp_resili.report.build import load_report
from mcp_resili.report.episodes import CHUNK_SIZE, unpack
from mcp_resili.report.html import write_folder


def folder_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def folder_paths(folder: Path) -> list[str]:
    """Every file and folder under ``folder``: an empty staging folder left behind shows here."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def source_of(folder: Path) -> str:
    """Where the folder's page loads its data from (``episodes/GEN/``; ``episodes/`` in the old layout)."""
    page = (folder / "index.html").read_text(encoding="utf-8")
    found = re.search(r'<section id="episodes" data-source="([^"]*)">', page)
    assert found is not None
    return found.group(1)


def episode_ids(index_js: bytes) -> list[str]:
    """The episode ids in an ``index.js``, in the browser's order."""
    found = re.fullmatch(r'mcpResiliIndex\("([A-Za-z0-9+/=]*)"\);\n', index_js.decode(), re.S)
    assert found is not None
    index = unpack(found.group(1))
    return [row[index["fields"].index("id")] for row in index["rows"]]


def loaded(folder: Path) -> dict[str, bytes]:
    """Every file the folder's page needs (itself, its index, every chunk the index needs), by path,
    after checking that they exist and fit together: each chunk's number matches its name, and the
    chunks hold the index's episodes in its order."""
    page = (folder / "index.html").read_bytes()
    assert page.decode().rstrip().endswith("</html>")
    source = source_of(folder)
    files = {"index.html": page, f"{source}index.js": (folder / source / "index.js").read_bytes()}
    ids = episode_ids(files[f"{source}index.js"])
    details: list[str] = []
    for n in range(-(-len(ids) // CHUNK_SIZE)):
        name = f"{source}chunk-{n:05d}.js"
        files[name] = (folder / name).read_bytes()
        chunk = re.fullmatch(r'mcpResiliChunk\((\d+),"([A-Za-z0-9+/=]*)"\);\n', files[name].decode(), re.S)
        assert chunk is not None and int(chunk.group(1)) == n
        details.extend(d["id"] for d in unpack(chunk.group(2)))
    assert details == ids  # the index and the chunks belong to one report
    return files


def readable(folder: Path) -> list[str]:
    """The episode ids the folder's page shows, checked against its chunks: every one is loadable, and
    the page's generation folder holds nothing else."""
    files = loaded(folder)
    source = source_of(folder)
    assert re.fullmatch(r"episodes/[0-9a-f]{16}/", source)
    assert sorted(f"{source}{p.name}" for p in (folder / source).iterdir()) == sorted(
        set(files) - {"index.html"}
    )
    return episode_ids(files[f"{source}index.js"])


def to_flat(folder: Path) -> None:
    """Turn a report folder into the layout earlier versions wrote: its data straight in episodes/."""
    source = source_of(folder)
    for path in sorted((folder / source).iterdir()):
        path.rename(folder / "episodes" / path.name)
    (folder / source).rmdir()
    page = folder / "index.html"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace(f'data-source="{source}"', 'data-source="episodes/"'), encoding="utf-8")


def disk_fills(monkeypatch: pytest.MonkeyPatch, under: Path, *, after: int) -> list[Path]:
    """Make the disk fill up in the write after the first ``after`` files under ``under``: that
    write gets half its data out, then fails (ENOSPC). Returns the files written there, in order."""
    writes: list[Path] = []

    def filling(original: Callable[..., int]) -> Callable[..., int]:
        def write(self: Path, data: Any, *args: Any, **kwargs: Any) -> int:
            if under in self.parents:
                writes.append(self)
                if len(writes) == after + 1:
                    original(self, data[: len(data) // 2], *args, **kwargs)
                    raise OSError(errno.ENOSPC, "No space left on device", str(self))
            return original(self, data, *args, **kwargs)

        return write

    monkeypatch.setattr(Path, "write_text", filling(Path.write_text))
    monkeypatch.setattr(Path, "write_bytes", filling(Path.write_bytes))
    return writes


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    db = tmp_path / "runs.db"
    matrix = {"models": ("scripted:oracle", "scripted:naive"), "faults": ("none",), "variants": ("baseline",)}
    write_synthetic_run(db, 80, run_id="small", seed=1, **matrix)  # one chunk
    write_synthetic_run(db, 250, run_id="big", seed=2, **matrix)  # three chunks
    return db


def test_a_report_that_fails_mid_write_leaves_the_old_report_intact_and_readable(
    two_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "report"
    assert main(["report", "small", "--db", str(two_runs), "--html", str(folder)]) == 0
    before, paths = folder_files(folder), folder_paths(folder)
    small = readable(folder)
    assert len(small) == 80

    writes = disk_fills(monkeypatch, folder, after=1)
    capsys.readouterr()
    assert main(["report", "big", "--db", str(two_runs), "--html", str(folder)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "No space left on device" in line
    assert "chunk-00000" in writes[0].name  # the first chunk was written, then the disk filled
    assert writes[1].parent.name.endswith(".partial")  # while staged, away from the old report
    monkeypatch.undo()

    assert folder_files(folder) == before  # byte for byte, and no partial file left behind
    assert folder_paths(folder) == paths  # nor a staging folder
    assert readable(folder) == small


def test_a_successful_rewrite_leaves_no_stale_chunks_and_no_partial_files(
    two_runs: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "report"
    (folder / "episodes" / ".gen-0123456789abcdef.partial").mkdir(parents=True)  # left by killed writes
    (folder / "episodes" / ".gen-0123456789abcdef.partial" / "chunk-00000.js").write_text("half")
    (folder / "episodes" / ".chunk-00007.js.partial").write_text("left by a killed write")
    (folder / ".index.html.partial").write_text("<!doctype")
    assert main(["report", "big", "--db", str(two_runs), "--html", str(folder)]) == 0
    assert len(readable(folder)) == 250
    big = source_of(folder)
    assert main(["report", "small", "--db", str(two_runs), "--html", str(folder)]) == 0
    assert len(readable(folder)) == 80
    gen = source_of(folder)
    assert gen != big
    assert sorted(folder_files(folder)) == [f"{gen}chunk-00000.js", f"{gen}index.js", "index.html"]
    assert folder_paths(folder) == [
        "episodes",
        gen.rstrip("/"),
        f"{gen}chunk-00000.js",
        f"{gen}index.js",
        "index.html",
    ]


# Every call that changes the file system, as the report's writer (and shutil and pathlib in it) make it.
FS_CALLS = ("mkdir", "rename", "replace", "unlink", "rmdir")


class Killed(OSError):
    """The failure `stop_at` injects in a change to the disk."""


class Interrupted(KeyboardInterrupt):
    """The interrupt (Ctrl-C) `stop_at` injects just after a change to the disk."""


def stop_at(monkeypatch: pytest.MonkeyPatch, step: int, mode: str) -> list[str]:
    """Stop the write at its ``step``-th change to the file system (from 0); returns the changes tried.

    ``fails``: that change fails (a file being written gets half its data out first), the writer's
    clean-up runs. ``killed``: every later change fails too, as if the process died there (its
    clean-up cannot touch the disk either). ``interrupted``: the change is made, then `Interrupted`.
    """
    calls: list[str] = []

    def fails(name: str) -> bool:
        calls.append(name)
        return len(calls) - 1 == step or (mode == "killed" and len(calls) - 1 > step)

    def interrupt() -> None:
        if mode == "interrupted" and len(calls) - 1 == step:
            raise Interrupted

    def os_call(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if fails(name) and mode != "interrupted":
                raise Killed(errno.EIO, f"stopped at {name}")
            result = original(*args, **kwargs)
            interrupt()
            return result

        return call

    def write_call(name: str, original: Callable[..., int]) -> Callable[..., int]:
        def write(self: Path, data: Any, *args: Any, **kwargs: Any) -> int:
            if fails(name) and mode != "interrupted":
                original(self, data[: len(data) // 2], *args, **kwargs)
                raise Killed(errno.EIO, f"stopped in {name}", str(self))
            written = original(self, data, *args, **kwargs)
            interrupt()
            return written

        return write

    for name in FS_CALLS:
        monkeypatch.setattr(os, name, os_call(name, getattr(os, name)))
    for name in ("write_text", "write_bytes"):
        monkeypatch.setattr(Path, name, write_call(name, getattr(Path, name)))
    return calls


@pytest.mark.parametrize("mode", ["fails", "killed", "interrupted"])
@pytest.mark.parametrize(
    ("old", "new", "flat"),
    [("small", "big", False), ("big", "small", False), ("small", "big", True)],
    ids=["grows", "shrinks", "from-flat-layout"],
)
def test_a_rewrite_stopped_at_any_step_leaves_one_whole_report(
    two_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: str, new: str, flat: bool, mode: str
) -> None:
    """Stop the write of ``new`` over ``old`` at each of its changes to the disk in turn: the page
    always loads all of one report, the old or the new, never a mix; a write stopped before the switch
    that could clean up leaves the old folder byte for byte; and the next write of either report gives
    exactly the folder a clean write gives."""
    reports = {run: load_report(two_runs, run, find_suite=find_suite) for run in (old, new)}
    clean = {run: write_folder(reports[run], tmp_path / f"clean-{run}").parent for run in (old, new)}
    start = tmp_path / "start"
    shutil.copytree(clean[old], start)
    if flat:
        to_flat(start)
    whole = {"old": loaded(start), "new": loaded(clean[new])}

    step = 0
    while True:
        folder = tmp_path / f"step-{step}"
        shutil.copytree(start, folder)
        before, paths = folder_files(folder), folder_paths(folder)
        with monkeypatch.context() as patch:
            calls = stop_at(patch, step, mode)
            try:
                write_folder(reports[new], folder)
                stopped = False
            except (Killed, Interrupted):
                stopped = True
        if step >= len(calls):  # the write got through every change: each one has been stopped once
            assert not stopped and loaded(folder) == whole["new"]
            break
        where = f"stopped at change {step} ({calls[step]})"
        shown = [name for name, files in whole.items() if loaded(folder) == files]
        assert len(shown) == 1, f"{where}: the page loads a mix"
        if stopped and mode == "fails":  # the switch itself never fails half-way
            assert shown == ["old"], where
        if stopped and mode != "killed" and shown == ["old"]:  # it cleaned up after itself
            assert folder_files(folder) == before and folder_paths(folder) == paths, where
        if not stopped:  # only the clean-up after the switch was hit: the new report is in place
            assert shown == ["new"], where
        # The next writes recover from whatever was left: first the old report (reusing nothing half
        # deleted), then the new one, each giving exactly what a write into an empty folder gives.
        for run in (old, new):
            write_folder(reports[run], folder)
            assert folder_files(folder) == folder_files(clean[run]), where
            assert folder_paths(folder) == folder_paths(clean[run]), where
        step += 1
    assert step >= 10  # staging, writes, the renames, the switch, the clean-up: all were counted


def test_a_folder_in_the_flat_layout_of_earlier_versions_is_upgraded(two_runs: Path, tmp_path: Path) -> None:
    folder = tmp_path / "report"
    assert main(["report", "big", "--db", str(two_runs), "--html", str(folder)]) == 0
    to_flat(folder)  # episodes/index.js and episodes/chunk-0000{0,1,2}.js, as earlier versions wrote
    (folder / "episodes" / ".chunk-00001.js.partial").write_text("left by a killed write")
    assert source_of(folder) == "episodes/" and len(loaded(folder)) == 1 + 1 + 3
    assert main(["report", "small", "--db", str(two_runs), "--html", str(folder)]) == 0
    assert len(readable(folder)) == 80
    assert not [p.name for p in (folder / "episodes").iterdir() if p.is_file()]  # no flat file is left
    clean = write_folder(load_report(two_runs, "small", find_suite=find_suite), tmp_path / "clean").parent
    assert folder_files(folder) == folder_files(clean) and folder_paths(folder) == folder_paths(clean)


def test_the_same_report_written_twice_gives_the_same_names_and_bytes(two_runs: Path, tmp_path: Path) -> None:
    small, big = (
        load_report(two_runs, "small", find_suite=find_suite),
        load_report(two_runs, "big", find_suite=find_suite),
    )
    folder = tmp_path / "report"
    write_folder(small, folder)
    first = folder_files(folder)
    write_folder(small, folder)  # the generation already there is reused, none is staged beside it
    assert folder_files(folder) == first and len(first) == 3
    elsewhere = write_folder(small, tmp_path / "elsewhere").parent
    assert folder_files(elsewhere) == first
    assert re.fullmatch(r"episodes/[0-9a-f]{16}/", source_of(folder))
    assert source_of(write_folder(big, tmp_path / "big").parent) != source_of(folder)  # names follow content


def test_a_one_file_report_that_fails_mid_write_leaves_the_old_file(
    two_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "run.html"
    assert main(["report", "small", "--db", str(two_runs), "--html", str(page)]) == 0
    before = page.read_bytes()

    disk_fills(monkeypatch, tmp_path, after=0)
    assert main(["report", "big", "--db", str(two_runs), "--html", str(page)]) == 2
    monkeypatch.undo()
    assert page.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("runs.db")] == ["run.html"]
