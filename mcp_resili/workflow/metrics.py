"""Workflow metrics (WorFBench / WorkflowPerturb): Chain F1, Graph F1, Kendall's τ, BLEU, GLEU.

All functions are pure. A predicted workflow is compared with a golden one through an alignment of
their steps (`mcp_resili.workflow.match.align`): exact identity for ``tools`` workflows, an offline
token similarity for ``text`` ones, one-to-one pairs chosen for the longest order-consistent
alignment, so repeated tools pair correctly. Two pitfalls of the reference code are avoided: nothing
matched gives a chain length of 0 (no LIS floor of 1), and predicted edges are mapped through the
matching before they are compared with golden edges.

* **Chain F1**: ``l`` = the longest subsequence of paired predicted steps (in predicted order) that is
  a subsequence of *some* topological order of the golden DAG, i.e. the best over all topological
  orders, computed exactly. P = l/|pred|, R = l/|gold|.
* **Graph F1**, two named definitions (P = k/|pred|, R = k/|gold|):

  - ``lcc`` (WorFBench, the default): ``k`` = the largest connected component of the paired golden
    steps joined by the golden edges the prediction also has (predicted edges mapped through the
    pairs). A predicted *sequence* (an executed trace) claims an order, not edges: it has a golden
    edge when it ran the edge's two steps in that order. WorFBench's virtual START and END nodes
    (before every source, after every sink) join components but are not counted. For a sequence,
    a golden source joins START (a sink joins END) only when the sequence ran it in the golden
    order with every paired step it has an edge to: otherwise a branch run before its root would
    still join the root's component through END (a → r → b against r → {a, b} scored 1.0).
  - ``mcs`` (WorkflowPerturb): ``k`` = the largest set of paired steps whose induced subgraphs agree
    (every pair has the same edges in the same directions in both workflows): the maximum common
    induced subgraph under the pairs, exact (a maximum clique). For a predicted sequence a pair
    disagrees when the golden DAG has an edge between them that the sequence ran the other way.

* **Kendall's τ** = (C − D) / (n(n−1)/2) over the n *aligned* golden steps: those the prediction
  accounts for, as a one-to-one partner or merged into a predicted step that stands for several
  (WorkflowPerturb's compressed step). A partner takes its predicted step's position; a step merged
  into another's node has no position of its own, so its pairs are neither concordant nor
  discordant (the precedence the merge erased). Two positioned steps are concordant when the
  predicted order agrees with the golden partial order (pairs the golden DAG leaves unordered are
  concordant: either order is right), discordant otherwise. Missing golden steps and extra predicted
  steps are not aligned, so deleting or adding a step leaves τ alone (the F1 scores see it);
  reordering and compressing move it: k merges in an n-step chain give τ = (n−k)(n−k−1)/(n(n−1)).
  With fewer than two aligned steps (n < 2, two empty workflows included) there is no pair to order:
  τ is **undefined** (None), neither 1.0 nor 0.0, and no alert rule fires on it.
* **BLEU** (Papineni et al.) with smoothing method 1 (ε = 0.1 for empty n-gram matches; 0 when no
  unigram matches, as in NLTK) and the brevity penalty, over orders 1..min(4, |reference|) so short
  tool workflows can reach 1.0;
  **GLEU** (Wu et al.) = min(n-gram precision, recall) over orders 1..4. Tokens: step labels for
  ``tools`` workflows (a merged step's ``a+b`` is one token); lower-cased words of the step texts
  joined in listed order for ``text``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal, get_args

import networkx as nx

from mcp_resili.workflow.match import (
    TEXT_MATCH_THRESHOLD,
    Alignment,
    align,
    content_words,
    downsets,
    longest_consistent,
    match_steps,
    text_similarity,
    words,
)
from mcp_resili.workflow.model import WorkflowGraph

METRICS = ("chain_f1", "graph_f1", "kendall_tau", "bleu", "gleu")
#: The range of each metric's values (Kendall's τ alone can be negative: a reversed order is −1).
METRIC_BOUNDS: dict[str, tuple[float, float]] = {
    **dict.fromkeys(METRICS, (0.0, 1.0)),
    "kendall_tau": (-1.0, 1.0),
}
#: What an alert rule may name: the metrics, and Graph F1 under a fixed definition.
GATE_METRICS = (*METRICS, "graph_f1_lcc", "graph_f1_mcs")
GraphDefinition = Literal["lcc", "mcs"]
GRAPH_DEFINITIONS: tuple[GraphDefinition, ...] = get_args(GraphDefinition)
#: WorFBench's largest connected component: the definition the project's brief and WorFBench use.
DEFAULT_GRAPH: GraphDefinition = "lcc"

__all__ = [
    "DEFAULT_GRAPH",
    "GATE_METRICS",
    "GRAPH_DEFINITIONS",
    "METRICS",
    "TEXT_MATCH_THRESHOLD",
    "Alignment",
    "GraphDefinition",
    "WorkflowScores",
    "align",
    "bleu",
    "chain_f1",
    "content_words",
    "evaluate",
    "gleu",
    "graph_f1",
    "kendall_tau",
    "match_steps",
    "text_similarity",
    "words",
]


def check_graph_definition(definition: str) -> GraphDefinition:
    """``definition`` as a `GraphDefinition`; a clear `ValueError` for anything else."""
    for known in GRAPH_DEFINITIONS:
        if definition == known:
            return known
    raise ValueError(f"unknown Graph F1 definition {definition!r}; choose from {list(GRAPH_DEFINITIONS)}")


def _pairs(matching: Alignment | Mapping[str, str]) -> Mapping[str, str]:
    return matching.pairs if isinstance(matching, Alignment) else matching


def f1(common: int, n_pred: int, n_gold: int) -> float:
    """Harmonic mean of common/n_pred and common/n_gold (1.0 when both workflows are empty)."""
    if n_pred == 0 and n_gold == 0:
        return 1.0
    if common == 0:
        return 0.0
    precision, recall = common / n_pred, common / n_gold
    return 2 * precision * recall / (precision + recall)


def _max_clique_size(nodes: Sequence[str], compatible: set[frozenset[str]]) -> int:
    graph: nx.Graph[str] = nx.Graph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from((a, b) for a, b in (sorted(pair) for pair in compatible))
    _, size = nx.max_weight_clique(graph, weight=None)
    return int(size)


def _matched_in_pred_order(pred: WorkflowGraph, matching: Mapping[str, str]) -> list[str]:
    return [matching[s.id] for s in pred.steps if s.id in matching]


def chain_length(pred: WorkflowGraph, gold: WorkflowGraph, matching: Alignment | Mapping[str, str]) -> int:
    """Longest subsequence of paired predicted steps that fits some topological order of ``gold``."""
    pairs = _pairs(matching)
    index = {s.id: n for n, s in enumerate(gold.steps)}
    fixed = [[(index[pairs[s.id]], 1.0)] if s.id in pairs else [] for s in pred.steps]
    return len(longest_consistent(fixed, downsets(gold)))


def chain_f1(
    pred: WorkflowGraph, gold: WorkflowGraph, matching: Alignment | Mapping[str, str] | None = None
) -> float:
    """Chain F1 against the best topological order of ``gold``."""
    pairs = match_steps(pred, gold) if matching is None else _pairs(matching)
    return f1(chain_length(pred, gold, pairs), len(pred.steps), len(gold.steps))


def common_component_size(
    pred: WorkflowGraph, gold: WorkflowGraph, matching: Alignment | Mapping[str, str]
) -> int:
    """WorFBench's ``k``: the most paired steps in one connected component over the shared edges.

    As in WorFBench's graphs, a virtual START precedes every source and a virtual END follows every
    sink, so that a workflow made of independent parts can be matched whole; the two are not
    counted in ``k``.
    """
    pairs = _pairs(matching)
    if not pairs:
        return 0
    back = {g: p for p, g in pairs.items()}
    gold_edges = list(gold.structure)
    if pred.is_sequence:
        position = {s.id: n for n, s in enumerate(pred.steps)}

        def shared(u: str, v: str) -> bool:
            return position[back[u]] < position[back[v]]

        def in_order(p: str) -> bool:
            # A sequence claims an order: START and END join a golden source or sink only when every
            # golden edge between it and another paired step ran in the golden direction.
            g = pairs[p]
            return all(shared(u, v) for u, v in gold_edges if g in (u, v) and u in back and v in back)

        pred_source = pred_sink = in_order
    else:
        pred_edges = set(pred.structure)
        has_in = {b for _, b in pred_edges}
        has_out = {a for a, _ in pred_edges}

        def shared(u: str, v: str) -> bool:
            return (back[u], back[v]) in pred_edges

        def pred_source(p: str) -> bool:
            return p not in has_in

        def pred_sink(p: str) -> bool:
            return p not in has_out

    start, end = object(), object()
    gold_in = {b for _, b in gold_edges}
    gold_out = {a for a, _ in gold_edges}
    graph: nx.Graph[object] = nx.Graph()
    graph.add_nodes_from(back)
    graph.add_edges_from((u, v) for u, v in gold_edges if u in back and v in back and shared(u, v))
    graph.add_edges_from((start, g) for g in back if g not in gold_in and pred_source(back[g]))
    graph.add_edges_from((g, end) for g in back if g not in gold_out and pred_sink(back[g]))
    return max(len(component - {start, end}) for component in nx.connected_components(graph))


def common_subgraph_size(
    pred: WorkflowGraph, gold: WorkflowGraph, matching: Alignment | Mapping[str, str]
) -> int:
    """WorkflowPerturb's ``k``: the largest common induced subgraph under the pairs (edges mapped)."""
    pairs = _pairs(matching)
    gold_edges = set(gold.structure)
    mapped = _matched_in_pred_order(pred, pairs)
    if pred.is_sequence:
        position = {g: n for n, g in enumerate(mapped)}

        def agree(a: str, b: str) -> bool:
            first, second = (a, b) if position[a] < position[b] else (b, a)
            return (second, first) not in gold_edges

    else:
        pred_edges = {(pairs[a], pairs[b]) for a, b in pred.structure if a in pairs and b in pairs}

        def agree(a: str, b: str) -> bool:
            return ((a, b) in pred_edges) == ((a, b) in gold_edges) and ((b, a) in pred_edges) == (
                (b, a) in gold_edges
            )

    compatible = {frozenset((a, b)) for i, a in enumerate(mapped) for b in mapped[i + 1 :] if agree(a, b)}
    return _max_clique_size(mapped, compatible) if mapped else 0


def graph_f1(
    pred: WorkflowGraph,
    gold: WorkflowGraph,
    matching: Alignment | Mapping[str, str] | None = None,
    definition: GraphDefinition = DEFAULT_GRAPH,
) -> float:
    """Graph F1 under ``definition``: ``lcc`` (WorFBench) or ``mcs`` (WorkflowPerturb)."""
    definition = check_graph_definition(definition)
    pairs = match_steps(pred, gold) if matching is None else _pairs(matching)
    size = common_component_size if definition == "lcc" else common_subgraph_size
    return f1(size(pred, gold, pairs), len(pred.steps), len(gold.steps))


def aligned_steps(pred: WorkflowGraph, alignment: Alignment | Mapping[str, str]) -> tuple[list[str], int]:
    """τ's inputs: the golden steps with a position of their own, in predicted order, and n.

    Each predicted step that covers golden steps gives its first one (its one-to-one partner) its
    position; golden steps merged into it are aligned (they count in n) without a position.
    """
    if not isinstance(alignment, Alignment):
        alignment = Alignment(pairs=dict(alignment), covers={p: (g,) for p, g in alignment.items()})
    positioned = [alignment.covers[s.id][0] for s in pred.steps if s.id in alignment.covers]
    return positioned, sum(len(golden) for golden in alignment.covers.values())


def kendall_tau(
    pred: WorkflowGraph, gold: WorkflowGraph, alignment: Alignment | Mapping[str, str] | None = None
) -> float | None:
    """Kendall's τ = (C − D) / (n(n−1)/2) over the n aligned golden steps; None when n < 2."""
    positioned, n = aligned_steps(pred, align(pred, gold) if alignment is None else alignment)
    if n < 2:
        return None  # no pair to order: no evidence of order either way
    index = {s.id: n for n, s in enumerate(gold.steps)}
    down = downsets(gold)
    # b ran after a but is one of a's ancestors: that pair is discordant.
    discordant = sum(
        1 for i, a in enumerate(positioned) for b in positioned[i + 1 :] if down[index[a]] >> index[b] & 1
    )
    concordant = len(positioned) * (len(positioned) - 1) // 2 - discordant
    return (concordant - discordant) / (n * (n - 1) / 2)


def tokens(workflow: WorkflowGraph) -> list[str]:
    """The token sequence lexical metrics compare (see the module docstring)."""
    if workflow.kind == "tools":
        return workflow.labels()
    return [w for label in workflow.labels() for w in words(label)]


def _ngrams(seq: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(seq[i : i + n]) for i in range(len(seq) - n + 1))


def bleu(hypothesis: Sequence[str], reference: Sequence[str], max_order: int = 4) -> float:
    """Sentence BLEU with smoothing method 1 over orders 1..min(max_order, |reference|).

    As in NLTK, no unigram in common scores 0 (smoothing would otherwise leave a floor above 0).
    """
    if not hypothesis or not reference:
        return 1.0 if not hypothesis and not reference else 0.0
    orders = min(max_order, len(reference))
    log_sum = 0.0
    for n in range(1, orders + 1):
        hyp, ref = _ngrams(hypothesis, n), _ngrams(reference, n)
        total = sum(hyp.values())
        matches = sum((hyp & ref).values())
        if n == 1 and not matches:
            return 0.0
        precision = matches / total if matches else 0.1 / max(1, total)
        log_sum += math.log(precision)
    brevity = 1.0 if len(hypothesis) > len(reference) else math.exp(1 - len(reference) / len(hypothesis))
    return brevity * math.exp(log_sum / orders)


def gleu(hypothesis: Sequence[str], reference: Sequence[str], max_order: int = 4) -> float:
    """Google-BLEU: min(precision, recall) of all n-grams of orders 1..max_order."""
    if not hypothesis or not reference:
        return 1.0 if not hypothesis and not reference else 0.0
    matches = hyp_total = ref_total = 0
    for n in range(1, max_order + 1):
        hyp, ref = _ngrams(hypothesis, n), _ngrams(reference, n)
        matches += sum((hyp & ref).values())
        hyp_total += sum(hyp.values())
        ref_total += sum(ref.values())
    return min(matches / hyp_total, matches / ref_total)


@dataclass(frozen=True)
class WorkflowScores:
    """Every metric of one (predicted, golden) pair, plus the match count.

    ``graph_f1`` is under the definition asked for; ``graph_f1_lcc`` and ``graph_f1_mcs`` are both,
    so that a threshold can name the definition it was calibrated with.
    """

    chain_f1: float
    graph_f1: float
    graph_f1_lcc: float
    graph_f1_mcs: float
    kendall_tau: float | None  # None: fewer than two aligned steps, no order to judge
    bleu: float
    gleu: float
    matched: int
    predicted_steps: int
    golden_steps: int

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON-ready form, rounded to 4 places (an undefined τ is None)."""
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def reference_order(
    pred: WorkflowGraph, gold: WorkflowGraph, matching: Alignment | Mapping[str, str]
) -> WorkflowGraph:
    """``gold`` listed in the topological order closest to ``pred``'s order.

    Lexical metrics compare token sequences; a DAG allows several, and a candidate that runs two
    independent steps in the other order must not lose n-grams for it.
    """
    position = {g: float(n) for n, g in enumerate(_matched_in_pred_order(pred, _pairs(matching)))}
    listed = {s.id: n for n, s in enumerate(gold.steps)}
    order = list(
        nx.lexicographical_topological_sort(
            gold.graph(), key=lambda g: (position.get(g, float(listed[g])), listed[g])
        )
    )
    by_id = {s.id: s for s in gold.steps}
    return gold.model_copy(update={"steps": tuple(by_id[i] for i in order)})


def evaluate(
    pred: WorkflowGraph,
    gold: WorkflowGraph,
    *,
    graph: GraphDefinition = DEFAULT_GRAPH,
    match_arguments: bool = False,
) -> WorkflowScores:
    """All metrics of ``pred`` against ``gold``, Graph F1 under the ``graph`` definition.

    ``match_arguments``: tool steps pair only when their arguments are equal too (where both carry
    arguments).
    """
    graph = check_graph_definition(graph)
    alignment = align(pred, gold, match_arguments)
    hyp, ref = tokens(pred), tokens(reference_order(pred, gold, alignment))
    by_definition = {d: graph_f1(pred, gold, alignment, d) for d in GRAPH_DEFINITIONS}
    return WorkflowScores(
        chain_f1=chain_f1(pred, gold, alignment),
        graph_f1=by_definition[graph],
        graph_f1_lcc=by_definition["lcc"],
        graph_f1_mcs=by_definition["mcs"],
        kendall_tau=kendall_tau(pred, gold, alignment),
        bleu=bleu(hyp, ref),
        gleu=gleu(hyp, ref),
        matched=len(alignment.pairs),
        predicted_steps=len(pred.steps),
        golden_steps=len(gold.steps),
    )
