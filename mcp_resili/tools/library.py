"""A tool library: specs (data) bound to deterministic simulated implementations (code)."""

from __future__ import annotations

import graphlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from typing import TYPE_CHECKING, Any

from mcp_resili.tools.spec import ToolSpec
from mcp_resili.tools.validator import CompiledSchema, compiled

if TYPE_CHECKING:
    import networkx as nx

#: Per-episode mutable state a simulator may read and write (files written, tokens issued, ...).
ToolState = dict[str, Any]
#: A simulated tool: validated arguments and the episode's state in, a schema-valid result out.
Simulator = Callable[[Mapping[str, Any], ToolState], dict[str, Any]]


class ToolFailure(Exception):
    """A tool's own, declared failure (not an injected fault): e.g. FILE_NOT_FOUND for a missing file."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ToolLibrary:
    """Named tool specs with their simulators; the server serves exactly these."""

    name: str
    specs: tuple[ToolSpec, ...]
    simulators: Mapping[str, Simulator] = field(repr=False)
    #: Tools whose simulators may run on the server's event loop for small arguments: their work is
    #: bounded by a small multiple of their arguments' (and the episode state's) size, with no loop
    #: over a count the caller picks and no waiting. Every other tool runs in a worker thread.
    inline: frozenset[str] = frozenset()
    #: Whether every simulator builds its result from new lists and dicts: none is held by the tool
    #: state, the arguments, an earlier result or anything else (strings and numbers may be shared,
    #: nothing can change them), and every value is plain JSON. The server then records a result as
    #: it is instead of a copy; the test suite checks every such result (`server.backend`).
    fresh_results: bool = False

    def __post_init__(self) -> None:
        names = [spec.name for spec in self.specs]
        unknown_inline = sorted(self.inline - set(names))
        if unknown_inline:
            raise ValueError(f"library {self.name!r} marks unknown tools inline: {unknown_inline}")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"library {self.name!r} declares tools more than once: {duplicates}")
        missing = sorted(set(names) - set(self.simulators))
        if missing:
            raise ValueError(f"library {self.name!r} has no simulator for: {missing}")
        for spec in self.specs:
            unknown = sorted(set(spec.dependencies) - set(names))
            if unknown:
                raise ValueError(f"tool {spec.name!r} depends on unknown tools {unknown}")
        # graphlib, not networkx: importing networkx is a fifth of `tasks list`'s CPU (bench/listings.py).
        try:
            graphlib.TopologicalSorter({spec.name: spec.dependencies for spec in self.specs}).prepare()
        except graphlib.CycleError:
            raise ValueError(f"library {self.name!r} has cyclic tool dependencies") from None

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    @cached_property
    def by_name(self) -> dict[str, ToolSpec]:
        """Specs keyed by tool name."""
        return {spec.name: spec for spec in self.specs}

    @cached_property
    def dependency_graph(self) -> nx.DiGraph[str]:
        """Edges point from a dependency to the tool that needs it."""
        import networkx as nx

        graph: nx.DiGraph[str] = nx.DiGraph()
        graph.add_nodes_from(spec.name for spec in self.specs)
        graph.add_edges_from((dep, spec.name) for spec in self.specs for dep in spec.dependencies)
        return graph

    @cached_property
    def _output_validators(self) -> dict[str, CompiledSchema]:
        # Built once: ``jsonschema.validate`` re-checks the schema itself on every call (~10 ms).
        return {
            spec.name: compiled(spec.output_schema) for spec in self.specs if spec.output_schema is not None
        }

    def spec(self, name: str) -> ToolSpec:
        """Return the spec of ``name`` or raise ``KeyError`` naming the known tools."""
        try:
            return self.by_name[name]
        except KeyError:
            raise KeyError(f"unknown tool {name!r}; known tools: {', '.join(sorted(self.by_name))}") from None

    def simulate(self, name: str, arguments: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
        """Run the simulated tool and check its output against the declared output schema."""
        result = self.simulators[name](arguments, state)
        validator = self._output_validators.get(name)
        if validator is not None:
            # A simulator that breaks its own schema is a harness bug, never an agent failure.
            validator.validate(result)
        return result


def load_specs(package: str, filename: str) -> tuple[ToolSpec, ...]:
    """Load tool specs stored as a JSON list inside ``package``."""
    raw = json.loads(resources.files(package).joinpath(filename).read_text(encoding="utf-8"))
    return tuple(ToolSpec.model_validate(item) for item in raw)
