"""Regenerate the embedded ToolMaze data: the 270-tool corpus and the 400 tasks (byte for byte from the seed).

python scripts/regenerate_toolmaze.py          # rewrite corpus.json and tasks.json
python scripts/regenerate_toolmaze.py --check  # exit 1 if the stored files differ
"""

import sys
from pathlib import Path

from mcp_resili.suites.toolmaze.corpus import build_corpus
from mcp_resili.suites.toolmaze.generate import generate_tasks

DEFAULT_SEED = 2026
ROOT = Path(__file__).resolve().parents[1] / "mcp_resili"
CORPUS_PATH = ROOT / "suites" / "toolmaze" / "corpus.json"
TASKS_PATH = ROOT / "suites" / "toolmaze" / "tasks.json"


def render_corpus() -> str:
    """The corpus as stored (compact JSON; `None` fields left out)."""
    return build_corpus().model_dump_json(exclude_none=True) + "\n"


def render_tasks() -> str:
    """The task set as stored (compact JSON, without the fields a task computes from others)."""
    task_set = generate_tasks(build_corpus(), DEFAULT_SEED)
    computed = {"tasks": {"__all__": {"instance_id", "original_description"}}}
    return task_set.model_dump_json(exclude=computed, exclude_none=True) + "\n"  # type: ignore[arg-type]


if __name__ == "__main__":
    files = {CORPUS_PATH: render_corpus(), TASKS_PATH: render_tasks()}
    if "--check" in sys.argv[1:]:
        stale = [str(p) for p, text in files.items() if p.read_text(encoding="utf-8") != text]
        print("stale: " + ", ".join(stale) if stale else "up to date")
        sys.exit(1 if stale else 0)
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    for path, text in files.items():
        print(f"wrote {path} ({len(text):,} bytes)")
