"""WorkflowPerturb's graded perturbations of a golden workflow, seeded, and metric sensitivity Δ.

Each perturbation changes exactly N = max(1, ceil(|V|·α)) steps (α ∈ {0.1, 0.3, 0.5}):

* ``missing``: N steps removed; each removed step's predecessors are linked to its successors, so
  the remaining order constraints survive (as when a step is simply left out).
* ``compressed``: N merges, each contracting one edge (u, v) into a single step (labels joined:
  ``a+b`` for tools, ``"a; b"`` for text); the workflow loses N steps. Only edges whose contraction
  keeps a DAG are chosen. The metrics read ``a+b`` as a merged step standing for ``a`` and ``b``
  (`mcp_resili.workflow.match`).
* ``description``: N step labels reworded offline (synonyms from a small table, or a lead-in when no
  word has one); structure untouched. Text workflows only: a tool's name is its identity, not a
  description.

Sensitivity (paper eq. 1): Δ = ½[(s̄(10%) − s̄(30%))/0.2 + (s̄(30%) − s̄(50%))/0.2] = 2.5·(s̄(10%) − s̄(50%)).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Literal

import networkx as nx

from mcp_resili.errors import UserError
from mcp_resili.workflow.metrics import DEFAULT_GRAPH, METRICS, GraphDefinition, evaluate
from mcp_resili.workflow.model import Step, WorkflowGraph

PerturbationType = Literal["missing", "compressed", "description"]
PERTURBATIONS: tuple[PerturbationType, ...] = ("missing", "compressed", "description")
LEVELS = (0.1, 0.3, 0.5)

#: Reworded forms for common workflow verbs and nouns (each maps to alternatives).
SYNONYMS: dict[str, tuple[str, ...]] = {
    "open": ("launch", "bring up"),
    "check": ("verify", "inspect"),
    "verify": ("confirm", "check"),
    "create": ("make", "set up"),
    "send": ("dispatch", "transmit"),
    "read": ("load", "fetch"),
    "write": ("save", "store"),
    "find": ("locate", "look up"),
    "search": ("look for", "query"),
    "get": ("obtain", "retrieve"),
    "go": ("head", "move"),
    "take": ("pick up", "grab"),
    "put": ("place", "set"),
    "remove": ("delete", "take out"),
    "add": ("insert", "include"),
    "select": ("choose", "pick"),
    "click": ("press", "tap"),
    "wait": ("pause", "hold on"),
    "review": ("examine", "go over"),
    "update": ("modify", "revise"),
    "file": ("document",),
    "data": ("records", "information"),
    "customer": ("client",),
    "ticket": ("case", "request"),
    "report": ("summary", "write-up"),
    "issue": ("problem",),
    "buy": ("purchase",),
    "list": ("catalogue",),
    "start": ("begin", "kick off"),
    "finish": ("complete", "wrap up"),
}


class PerturbationError(UserError):
    """A perturbation that cannot be applied to this workflow."""


def change_count(steps: int, alpha: float) -> int:
    """N = max(1, ceil(|V|·α)); raises when fewer than N + 1 steps would be left to work with."""
    if not 0 < alpha < 1:
        raise PerturbationError(f"perturbation level must be in (0, 1), got {alpha}")
    n = max(1, math.ceil(steps * alpha - 1e-9))
    if n >= steps:
        raise PerturbationError(f"a {steps}-step workflow cannot lose {n} steps at level {alpha}")
    return n


def _rebuild(original: WorkflowGraph, graph: nx.DiGraph[str], labels: dict[str, str]) -> WorkflowGraph:
    listed = [s.id for s in original.steps]
    order = list(nx.lexicographical_topological_sort(graph, key=listed.index))
    return WorkflowGraph(
        kind=original.kind,
        steps=tuple(Step(id=i, label=labels[i]) for i in order),
        edges=None
        if original.is_sequence
        else tuple(sorted(graph.edges, key=lambda e: (order.index(e[0]), order.index(e[1])))),
    )


def missing_steps(workflow: WorkflowGraph, alpha: float, rng: random.Random) -> WorkflowGraph:
    """Remove N steps, linking each removed step's predecessors to its successors."""
    n = change_count(len(workflow.steps), alpha)
    graph = workflow.graph()
    for step_id in rng.sample([s.id for s in workflow.steps], n):
        graph.add_edges_from((p, s) for p in graph.predecessors(step_id) for s in graph.successors(step_id))
        graph.remove_node(step_id)
    return _rebuild(workflow, graph, {s.id: s.label for s in workflow.steps})


def compressed_steps(workflow: WorkflowGraph, alpha: float, rng: random.Random) -> WorkflowGraph:
    """Merge N times one step into its successor's predecessor (edge contraction that keeps a DAG)."""
    n = change_count(len(workflow.steps), alpha)
    graph = workflow.graph()
    labels = {s.id: s.label for s in workflow.steps}
    joiner = "+" if workflow.kind == "tools" else "; "
    for _ in range(n):
        candidates = sorted(
            (u, v)
            for u, v in graph.edges
            # Contracting (u, v) makes a cycle iff another path u → … → v exists.
            if not any(nx.has_path(graph, w, v) for w in graph.successors(u) if w != v)
        )
        if not candidates:
            raise PerturbationError("no edge left to compress")
        u, v = rng.choice(candidates)
        labels[u] = f"{labels[u]}{joiner}{labels[v]}"
        # Contract by hand (nx.contracted_nodes is typed as returning an undirected Graph).
        graph.add_edges_from((p, u) for p in graph.predecessors(v) if p != u)
        graph.add_edges_from((u, s) for s in graph.successors(v) if s != u)
        graph.remove_node(v)
    return _rebuild(workflow, graph, labels)


def paraphrase(text: str, rng: random.Random) -> str:
    """Reword ``text``: every word with an entry in `SYNONYMS` replaced, else a lead-in added."""
    out, changed = [], False
    for word in text.split():
        core = word.strip(".,;:!?").lower()
        if core in SYNONYMS:
            replacement = rng.choice(SYNONYMS[core])
            if word[:1].isupper():
                replacement = replacement[:1].upper() + replacement[1:]
            out.append(word.lower().replace(core, replacement))
            changed = True
        else:
            out.append(word)
    return " ".join(out) if changed else f"Next, {text[:1].lower()}{text[1:]}"


def description_changes(workflow: WorkflowGraph, alpha: float, rng: random.Random) -> WorkflowGraph:
    """Reword N step descriptions; ids and edges unchanged (text workflows only)."""
    if workflow.kind != "text":
        raise PerturbationError("description changes apply to text workflows; a tool name is its identity")
    n = change_count(len(workflow.steps), alpha)
    chosen = set(rng.sample([s.id for s in workflow.steps], n))
    steps = tuple(
        Step(id=s.id, label=paraphrase(s.label, rng)) if s.id in chosen else s for s in workflow.steps
    )
    return workflow.model_copy(update={"steps": steps})


def perturb(workflow: WorkflowGraph, kind: PerturbationType, alpha: float, seed: int) -> WorkflowGraph:
    """Apply one perturbation at level ``alpha``, with randomness from ``seed`` only."""
    rng = random.Random(f"workflowperturb:{seed}:{kind}:{alpha}")
    if kind == "missing":
        return missing_steps(workflow, alpha, rng)
    if kind == "compressed":
        return compressed_steps(workflow, alpha, rng)
    if kind == "description":
        return description_changes(workflow, alpha, rng)
    raise PerturbationError(f"unknown perturbation {kind!r}; choose from {list(PERTURBATIONS)}")


def sensitivity(
    goldens: Sequence[WorkflowGraph],
    seed: int = 0,
    graph: GraphDefinition = DEFAULT_GRAPH,
    *,
    seeds: int = 1,
    min_steps: int = 1,
) -> dict[str, dict[str, object]]:
    """Mean metric per (perturbation, level) over ``goldens`` and each metric's Δ = 2.5·(s̄₁₀ − s̄₅₀).

    Δ is a difference of means, so every level averages the same goldens: a golden (per seed
    ``seed`` … ``seed + seeds - 1``) enters a perturbation's means only if it has ``min_steps``
    steps and the perturbation applies to it at all three levels (a 2-step chain loses a step at
    10% but cannot lose one at 50%); the rest are counted as skipped. ``graph`` is the Graph F1
    definition (``lcc`` or ``mcs``).
    """
    out: dict[str, dict[str, object]] = {}
    for kind in PERTURBATIONS:
        sums = {alpha: dict.fromkeys(METRICS, 0.0) for alpha in LEVELS}
        defined = {alpha: dict.fromkeys(METRICS, 0) for alpha in LEVELS}  # τ may be undefined (None)
        used: set[int] = set()
        variants = 0
        for offset in range(seeds):
            for index, gold in enumerate(goldens):
                if len(gold.steps) < min_steps:
                    continue
                try:
                    perturbed = {
                        alpha: perturb(gold, kind, alpha, (seed + offset) * 1_000_003 + index)
                        for alpha in LEVELS
                    }
                except PerturbationError:
                    continue
                for alpha, variant in perturbed.items():
                    scores = evaluate(variant, gold, graph=graph)
                    for metric in METRICS:
                        value = getattr(scores, metric)
                        if value is not None:
                            sums[alpha][metric] += float(value)
                            defined[alpha][metric] += 1
                used.add(index)
                variants += 1
        counts = {"workflows": len(used), "skipped": len(goldens) - len(used), "variants": variants}
        if not variants:
            out[kind] = {**counts, "means": None, "delta": None}
            continue
        means = {
            alpha: {m: v / defined[alpha][m] if defined[alpha][m] else None for m, v in sums[alpha].items()}
            for alpha in LEVELS
        }

        out[kind] = {
            **counts,
            "means": {str(a): {m: _rounded(v) for m, v in means[a].items()} for a in LEVELS},
            "delta": {m: _delta(means[0.1][m], means[0.5][m]) for m in METRICS},
        }
    return out


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _delta(mild: float | None, severe: float | None) -> float | None:
    """Δ = 2.5·(s̄₁₀ − s̄₅₀), undefined when either mean is (τ undefined on every variant)."""
    return None if mild is None or severe is None else round(2.5 * (mild - severe), 4)
