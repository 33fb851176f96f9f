"""The ToolMaze tool corpus: data (``corpus.json``, made by ``corpus.build_corpus``) and simulators."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from mcp_resili.suites.toolmaze.corpus import Corpus, CorpusGroup, CorpusTool, DomainInfo, Op
from mcp_resili.suites.toolmaze.simulators import simulators
from mcp_resili.tools.library import ToolLibrary
from mcp_resili.tools.spec import ErrorCode, ToolSpec

CORPUS_FILE = "corpus.json"


def _spec(raw: dict[str, Any]) -> ToolSpec:
    # Embedded, generated data: the specs skip the JSON Schema metaschema check (~15 ms each; the
    # generator's schemas are checked by tests), everything else is validated.
    fields = {
        **raw,
        "errors": tuple(ErrorCode.model_validate(e) for e in raw.get("errors", ())),
        "dependencies": tuple(raw.get("dependencies", ())),
    }
    return ToolSpec.model_construct(**fields)


def parse_corpus(text: str) -> Corpus:
    """A corpus from its JSON form (``corpus.json``)."""
    raw = json.loads(text)
    tools = tuple(
        CorpusTool.model_construct(
            spec=_spec(t["spec"]),
            domain=str(t["domain"]),
            role=t["role"],
            ops=tuple(t["ops"]),
            provider=t.get("provider"),
        )
        for t in raw["tools"]
    )
    return Corpus.model_validate({**raw, "tools": ()}).model_copy(update={"tools": tools})


@cache
def toolmaze_corpus() -> Corpus:
    """The embedded corpus (``corpus.json``)."""
    return parse_corpus(
        resources.files(__package__ or __name__).joinpath(CORPUS_FILE).read_text(encoding="utf-8")
    )


@dataclass(frozen=True)
class CorpusIndex:
    """Lookups into the corpus by name."""

    tools: dict[str, CorpusTool]
    ops: dict[str, Op]
    groups: dict[str, CorpusGroup]
    domains: dict[str, DomainInfo]

    def last_op(self, tool: str) -> Op:
        """The op whose record ``tool`` returns."""
        return self.ops[self.tools[tool].ops[-1]]

    def first_op(self, tool: str) -> Op:
        """The op whose inputs ``tool`` takes."""
        return self.ops[self.tools[tool].ops[0]]


@cache
def corpus_index() -> CorpusIndex:
    """The embedded corpus, indexed by name."""
    corpus = toolmaze_corpus()
    return CorpusIndex(
        tools={t.spec.name: t for t in corpus.tools},
        ops={op.name: op for op in corpus.ops},
        groups={g.id: g for g in corpus.groups},
        domains={d.name: d for d in corpus.domains},
    )


@cache
def toolmaze_library() -> ToolLibrary:
    """The ToolMaze tools bound to their simulators."""
    corpus = toolmaze_corpus()
    return ToolLibrary("toolmaze", tuple(t.spec for t in corpus.tools), simulators(corpus))


__all__ = [
    "Corpus",
    "CorpusGroup",
    "CorpusIndex",
    "CorpusTool",
    "Op",
    "corpus_index",
    "parse_corpus",
    "toolmaze_corpus",
    "toolmaze_library",
]
