"""Offline lexical tool search: TF-IDF cosine over tool names, categories and descriptions.

The paper's executor ranks tools by embedding similarity; we keep the benchmark offline (no model
download) with a transparent lexical score. The same score drives ``search_tools`` (discovery) and
the "similar tool" choices of the flawed-workflow generator.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from mcp_resili.tools.spec import ToolSpec

_TOKEN = re.compile(r"[a-z0-9]+")
#: Words too common in tool texts to tell tools apart.
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "or",
        "the",
        "of",
        "to",
        "for",
        "from",
        "in",
        "on",
        "by",
        "with",
        "as",
        "is",
        "it",
        "its",
        "at",
        "be",
        "this",
        "that",
        "data",
        "tool",
        "tools",
    ]
)


def tokens(text: str) -> list[str]:
    """Lower-case word tokens with a crude plural/verb stem (``records`` → ``record``)."""
    out = []
    for word in _TOKEN.findall(text.lower().replace("_", " ")):
        if word in _STOP:
            continue
        for suffix in ("ing", "es", "s"):
            if word.endswith(suffix) and len(word) - len(suffix) >= 4:
                word = word[: -len(suffix)]
                break
        out.append(word)
    return out


def _document(spec: ToolSpec) -> list[str]:
    # The name counts twice: a query naming the operation ("parser") should find that tool first.
    return tokens(f"{spec.name} {spec.name} {spec.category} {spec.operation} {spec.description}")


@dataclass(frozen=True)
class SearchHit:
    """One ranked tool."""

    name: str
    score: float


@dataclass
class ToolIndex:
    """TF-IDF vectors of a set of tools."""

    specs: tuple[ToolSpec, ...]
    _vectors: dict[str, dict[str, float]] = field(init=False, repr=False)
    _idf: dict[str, float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        docs = {spec.name: Counter(_document(spec)) for spec in self.specs}
        df: Counter[str] = Counter(term for doc in docs.values() for term in doc)
        n = len(docs)
        self._idf = {term: math.log((1 + n) / (1 + count)) + 1 for term, count in df.items()}
        self._vectors = {name: self._vector(doc) for name, doc in docs.items()}

    def _vector(self, counts: Counter[str]) -> dict[str, float]:
        weights = {t: c * self._idf.get(t, 0.0) for t, c in counts.items() if t in self._idf}
        norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
        return {t: w / norm for t, w in weights.items()}

    def search(self, query: str, limit: int = 5) -> list[SearchHit]:
        """Tools ranked by cosine similarity to ``query`` (ties by name); tools scoring 0 are left out."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        vector = self._vector(Counter(tokens(query)))
        hits = [
            SearchHit(name, round(sum(w * doc.get(t, 0.0) for t, w in vector.items()), 4))
            for name, doc in self._vectors.items()
        ]
        ranked = sorted((h for h in hits if h.score > 0), key=lambda h: (-h.score, h.name))
        return ranked[:limit]

    def similarity(self, a: str, b: str) -> float:
        """Cosine similarity of two tools' texts (1.0 for the same tool)."""
        va, vb = self._vectors[a], self._vectors[b]
        return sum(w * vb.get(t, 0.0) for t, w in va.items())

    def most_similar(self, name: str, exclude: set[str] | frozenset[str] = frozenset()) -> list[SearchHit]:
        """Other tools ranked by similarity to ``name`` (ties by name), without ``exclude``."""
        hits = [
            SearchHit(other, round(self.similarity(name, other), 4))
            for other in self._vectors
            if other != name and other not in exclude
        ]
        return sorted(hits, key=lambda h: (-h.score, h.name))
