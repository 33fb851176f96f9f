"""Where bench scripts publish: each one owns a marked section of a docs page and rewrites only that."""

from __future__ import annotations

from pathlib import Path

#: The page most benches write to.
BENCHMARKS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def write_section(section: str, start: str, end: str, page: Path = BENCHMARKS_PAGE) -> None:
    """Put ``section`` (which begins with ``start`` and ends with ``end``) in place of the page's
    text between those markers, or append it when the page has none yet."""
    text = page.read_text(encoding="utf-8") if page.exists() else "# Benchmarks\n"
    first, last = text.find(start), text.find(end)
    if first != -1 and last > first:
        text = text[:first] + section + text[last + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    page.write_text(text, encoding="utf-8")
