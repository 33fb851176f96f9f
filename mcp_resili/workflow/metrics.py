"""Workflow metrics (WorFBench / WorkflowPerturb): Chain F1, Graph F1, Kendall's τ, BLEU, GLEU.

All functions are pure. A predicted workflow is compared with a golden one through a one-to-one
*matching* of their steps (`match_steps`): exact label identity for ``tools`` workflows, an
offline token similarity with a threshold for ``text`` workflows. Two pitfalls of the reference
code are avoided: nothing matched gives a chain length of 0 (no LIS floor of 1), and predicted
edges are mapped through the matching before they are compared with golden edges.

* **Chain F1**: ``l`` = the longest subsequence of matched predicted steps (in predicted order)
  that is a subsequence of *some* topological order of the golden DAG — exactly, not against one
  canonical order: a subsequence fits some topological order iff no pair in it is reversed with
  respect to the DAG's reachability, so ``l`` is a maximum clique of the "not reversed" pair graph
  (bounded by the golden size). P = l/|pred|, R = l/|gold|.
* **Graph F1**: ``k`` = the largest set of matched steps whose induced subgraphs agree (every pair
  has the same edges, in the same directions, in both workflows, predicted edges mapped through the
  matching) — again an exact maximum clique. A predicted *sequence* (an executed trace) claims no
  dependencies, only an order: a pair disagrees when the golden DAG has an edge between them that
  the sequence ran in the opposite direction.
* **Kendall's τ** over aligned steps: a pair is concordant when the predicted order agrees with the
  golden partial order (pairs the golden DAG leaves unordered are concordant: either order is
  right), discordant otherwise. With one aligned step τ is 1.0 (no pair disagrees); with none, 0.0
  (1.0 for two empty workflows).
* **BLEU** (Papineni et al.) with smoothing method 1 (ε = 0.1 for empty n-gram matches) and the
  brevity penalty, over orders 1..min(4, |reference|) so short tool workflows can reach 1.0;
  **GLEU** (Wu et al.) = min(n-gram precision, recall) over orders 1..4. Tokens: step labels for
  ``tools`` workflows; lower-cased words of the step texts joined in listed order for ``text``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import networkx as nx

from mcp_resili.workflow.model import WorkflowGraph

#: Minimum text similarity for two text steps to match (a Dice coefficient over content words).
TEXT_MATCH_THRESHOLD = 0.5
METRICS = ("chain_f1", "graph_f1", "kendall_tau", "bleu", "gleu")

_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "from",
        "by",
        "with",
        "and",
        "or",
        "then",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "into",
        "as",
        "is",
        "are",
        "be",
        "all",
        "each",
        "any",
        "their",
        "your",
        "our",
    ]
)
_SUFFIXES = ("ing", "ed", "es", "s")


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters, digits, underscores)."""
    return re.findall(r"[a-z0-9_]+", text.lower())


def content_words(text: str) -> Counter[str]:
    """Stemmed words without stopwords, counted."""
    return Counter(_stem(w) for w in words(text) if w not in _STOPWORDS)


def text_similarity(a: str, b: str) -> float:
    """Dice coefficient of the stemmed content words of ``a`` and ``b`` (0..1), no network needed."""
    ca, cb = content_words(a), content_words(b)
    total = sum(ca.values()) + sum(cb.values())
    return 2 * sum((ca & cb).values()) / total if total else 1.0


def match_steps(pred: WorkflowGraph, gold: WorkflowGraph) -> dict[str, str]:
    """A one-to-one matching predicted step id → golden step id.

    ``tools``: equal labels, the k-th occurrence of a tool in each workflow paired (listed order).
    ``text``: a maximum-weight matching over pairs with similarity ≥ `TEXT_MATCH_THRESHOLD`.
    """
    if pred.kind != gold.kind:
        raise ValueError(f"cannot compare a {pred.kind!r} workflow with a {gold.kind!r} one")
    if gold.kind == "tools":
        waiting: dict[str, list[str]] = {}
        for step in gold.steps:
            waiting.setdefault(step.label, []).append(step.id)
        matching = {}
        for step in pred.steps:
            queue = waiting.get(step.label)
            if queue:
                matching[step.id] = queue.pop(0)
        return matching
    bipartite: nx.Graph[tuple[str, str]] = nx.Graph()
    for p in pred.steps:
        for g in gold.steps:
            similarity = text_similarity(p.label, g.label)
            if similarity >= TEXT_MATCH_THRESHOLD:
                bipartite.add_edge(("p", p.id), ("g", g.id), weight=similarity)
    pairs = nx.max_weight_matching(bipartite)
    matching = {}
    for u, v in pairs:
        p_node, g_node = (u, v) if u[0] == "p" else (v, u)
        matching[p_node[1]] = g_node[1]
    return matching


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


def _matched_in_pred_order(pred: WorkflowGraph, matching: dict[str, str]) -> list[str]:
    return [matching[s.id] for s in pred.steps if s.id in matching]


def chain_length(pred: WorkflowGraph, gold: WorkflowGraph, matching: dict[str, str]) -> int:
    """Longest subsequence of matched steps that fits some topological order of ``gold``."""
    sequence = _matched_in_pred_order(pred, matching)
    reach = nx.transitive_closure_dag(gold.graph())
    compatible = {
        frozenset((a, b))
        for i, a in enumerate(sequence)
        for b in sequence[i + 1 :]
        if not reach.has_edge(b, a)  # b comes later in pred, so b must not be an ancestor of a
    }
    return _max_clique_size(sequence, compatible) if sequence else 0


def chain_f1(pred: WorkflowGraph, gold: WorkflowGraph, matching: dict[str, str] | None = None) -> float:
    """Chain F1 against the best topological order of ``gold``."""
    matching = match_steps(pred, gold) if matching is None else matching
    return f1(chain_length(pred, gold, matching), len(pred.steps), len(gold.steps))


def common_subgraph_size(pred: WorkflowGraph, gold: WorkflowGraph, matching: dict[str, str]) -> int:
    """Size of the largest common induced subgraph under ``matching`` (edges mapped through it)."""
    gold_edges = set(gold.structure)
    mapped = [matching[s.id] for s in pred.steps if s.id in matching]
    if pred.is_sequence:
        position = {g: n for n, g in enumerate(mapped)}

        def agree(a: str, b: str) -> bool:
            first, second = (a, b) if position[a] < position[b] else (b, a)
            return (second, first) not in gold_edges

    else:
        pred_edges = {
            (matching[a], matching[b]) for a, b in pred.structure if a in matching and b in matching
        }

        def agree(a: str, b: str) -> bool:
            return ((a, b) in pred_edges) == ((a, b) in gold_edges) and ((b, a) in pred_edges) == (
                (b, a) in gold_edges
            )

    compatible = {frozenset((a, b)) for i, a in enumerate(mapped) for b in mapped[i + 1 :] if agree(a, b)}
    return _max_clique_size(mapped, compatible) if mapped else 0


def graph_f1(pred: WorkflowGraph, gold: WorkflowGraph, matching: dict[str, str] | None = None) -> float:
    """Graph F1: the largest common induced subgraph of the two workflows under the matching."""
    matching = match_steps(pred, gold) if matching is None else matching
    return f1(common_subgraph_size(pred, gold, matching), len(pred.steps), len(gold.steps))


def kendall_tau(pred: WorkflowGraph, gold: WorkflowGraph, matching: dict[str, str] | None = None) -> float:
    """Kendall's τ = (C − D) / (n(n−1)/2) over the aligned steps, against the golden partial order."""
    matching = match_steps(pred, gold) if matching is None else matching
    sequence = _matched_in_pred_order(pred, matching)
    n = len(sequence)
    if n < 2:
        # No pair to order: one aligned step disagrees with nothing; none aligned is no evidence.
        return 1.0 if n == 1 or len(pred.steps) == len(gold.steps) == 0 else 0.0
    reach = nx.transitive_closure_dag(gold.graph())
    discordant = sum(1 for i, a in enumerate(sequence) for b in sequence[i + 1 :] if reach.has_edge(b, a))
    pairs = n * (n - 1) // 2
    return (pairs - 2 * discordant) / pairs


def tokens(workflow: WorkflowGraph) -> list[str]:
    """The token sequence lexical metrics compare (see the module docstring)."""
    if workflow.kind == "tools":
        return workflow.labels()
    return [w for label in workflow.labels() for w in words(label)]


def _ngrams(seq: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(seq[i : i + n]) for i in range(len(seq) - n + 1))


def bleu(hypothesis: Sequence[str], reference: Sequence[str], max_order: int = 4) -> float:
    """Sentence BLEU with smoothing method 1 over orders 1..min(max_order, |reference|)."""
    if not hypothesis or not reference:
        return 1.0 if not hypothesis and not reference else 0.0
    orders = min(max_order, len(reference))
    log_sum = 0.0
    for n in range(1, orders + 1):
        hyp, ref = _ngrams(hypothesis, n), _ngrams(reference, n)
        total = sum(hyp.values())
        matches = sum((hyp & ref).values())
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
    """Every metric of one (predicted, golden) pair, plus the match count."""

    chain_f1: float
    graph_f1: float
    kendall_tau: float
    bleu: float
    gleu: float
    matched: int
    predicted_steps: int
    golden_steps: int

    def to_dict(self) -> dict[str, float | int]:
        """JSON-ready form, rounded to 4 places."""
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def reference_order(pred: WorkflowGraph, gold: WorkflowGraph, matching: dict[str, str]) -> WorkflowGraph:
    """``gold`` listed in the topological order closest to ``pred``'s order.

    Lexical metrics compare token sequences; a DAG allows several, and a candidate that runs two
    independent steps in the other order must not lose n-grams for it.
    """
    position = {g: float(n) for n, g in enumerate(_matched_in_pred_order(pred, matching))}
    listed = {s.id: n for n, s in enumerate(gold.steps)}
    order = list(
        nx.lexicographical_topological_sort(
            gold.graph(), key=lambda g: (position.get(g, float(listed[g])), listed[g])
        )
    )
    by_id = {s.id: s for s in gold.steps}
    return gold.model_copy(update={"steps": tuple(by_id[i] for i in order)})


def evaluate(pred: WorkflowGraph, gold: WorkflowGraph) -> WorkflowScores:
    """All metrics of ``pred`` against ``gold``."""
    matching = match_steps(pred, gold)
    hyp, ref = tokens(pred), tokens(reference_order(pred, gold, matching))
    return WorkflowScores(
        chain_f1=chain_f1(pred, gold, matching),
        graph_f1=graph_f1(pred, gold, matching),
        kendall_tau=kendall_tau(pred, gold, matching),
        bleu=bleu(hyp, ref),
        gleu=gleu(hyp, ref),
        matched=len(matching),
        predicted_steps=len(pred.steps),
        golden_steps=len(gold.steps),
    )
