"""Hand-computed workflow metrics: every expected value below is worked out in its comment.

Conventions used in the arithmetic: F1(k) = 2PR/(P+R) with P = k/|pred|, R = k/|gold|. BLEU uses
orders 1..min(4, |ref|), p_n = clipped matches / hypothesis n-grams, or 0.1/max(1, hypothesis
n-grams) when nothing matches (0 overall when no unigram matches), BP = exp(1 − |ref|/|hyp|) unless
|hyp| > |ref|. GLEU = min(Σ matches / Σ hyp n-grams, Σ matches / Σ ref n-grams) over orders 1..4.
The lcc definition links a virtual START to golden sources and golden sinks to a virtual END.
"""

import itertools
import math
import random

import networkx as nx
import pytest

from mcp_resili.workflow import Step, WorkflowGraph, chain_f1, evaluate, kendall_tau


def chain(labels, prefix="s"):
    steps = tuple(Step(id=f"{prefix}{i}", label=label) for i, label in enumerate(labels))
    return WorkflowGraph(
        kind="tools", steps=steps, edges=tuple((a.id, b.id) for a, b in itertools.pairwise(steps))
    )


def dag(labels, edges, prefix="s"):
    steps = tuple(Step(id=f"{prefix}{i}", label=label) for i, label in enumerate(labels))
    return WorkflowGraph(
        kind="tools", steps=steps, edges=tuple((f"{prefix}{a}", f"{prefix}{b}") for a, b in edges)
    )


def ran(labels):
    """An executed sequence (a trace): order only, no edges claimed."""
    return WorkflowGraph(kind="tools", steps=tuple(Step(id=f"p{i}", label=t) for i, t in enumerate(labels)))


DIAMOND = dag(["a", "b", "c", "d"], [(0, 1), (0, 2), (1, 3), (2, 3)])

# (name, golden, predicted, chain F1, graph F1 lcc, graph F1 mcs, Kendall's τ, BLEU, GLEU)
CASES = [
    # Gold cc → bm → cc, ran bm, cc. Best pairing: bm ↔ 2nd step, cc ↔ 3rd step (not the 1st).
    # Chain: l = 2, P = 2/2, R = 2/3 → F1 = (4/3)/(5/3) = 0.8. lcc: edge bm→cc kept, cc→END;
    # k = 2 → 0.8. mcs: the pair agrees → 0.8. τ: n = 2, one concordant pair → 1/1 = 1.
    # BLEU: ref cc bm cc, hyp bm cc, orders 3: p1 = 2/2, p2 = (bm,cc) 1/1, p3 = no trigram 0.1;
    # BP = exp(1 − 3/2) → exp(−1/2)·0.1^(1/3). GLEU: matches 2+1, hyp 2+1, ref 3+2+1 → min(1, 3/6) = 0.5.
    (
        "repeated tool, earlier occurrence missing",
        chain(["check_calendar", "book_meeting", "check_calendar"]),
        ran(["book_meeting", "check_calendar"]),
        0.8,
        0.8,
        0.8,
        1.0,
        math.exp(-0.5) * 0.1 ** (1 / 3),
        0.5,
    ),
    # Chain a b c d, ran a c b d. Chain: l = 3 (a b d or a c d), P = R = 3/4 → 0.75. lcc: a→b and
    # c→d kept, b→c reversed; components {START a b}, {c d END} → k = 2 → 0.5. mcs: only (b, c)
    # disagrees → k = 3 → 0.75. τ: 6 pairs, only (c, b) discordant → (5 − 1)/6 = 2/3.
    # BLEU: p1 = 4/4, p2 (ac cb bd vs ab bc cd) = 0.1/3, p3 = 0.1/2, p4 = 0.1/1, BP = 1 →
    # (1/30 · 1/20 · 1/10)^(1/4) = (1/6000)^(1/4). GLEU: matches 4, hyp 4+3+2+1, ref 10 → 0.4.
    (
        "two adjacent steps swapped",
        chain(["a", "b", "c", "d"]),
        ran(["a", "c", "b", "d"]),
        0.75,
        0.5,
        0.75,
        2 / 3,
        (1 / 6000) ** 0.25,
        0.4,
    ),
    # Chain a b c d, ran d c b a. Chain: l = 1 → P = R = 1/4 → 0.25. lcc: every edge reversed, only
    # START–a and d–END; k = 1 → 0.25. mcs: the three edges disagree, largest independent set of a
    # 4-path = 2 → 0.5. τ: all 6 pairs discordant → −1. BLEU: p1 = 1, p2..p4 as above → (1/6000)^(1/4);
    # GLEU 4/10 = 0.4.
    (
        "full reversal",
        chain(["a", "b", "c", "d"]),
        ran(["d", "c", "b", "a"]),
        0.25,
        0.25,
        0.5,
        -1.0,
        (1 / 6000) ** 0.25,
        0.4,
    ),
    # Nothing predicted: k = l = 0 → 0; τ: n = 0 aligned steps, no pair to order → undefined (None);
    # BLEU/GLEU of an empty hypothesis → 0.
    ("empty prediction", chain(["a", "b", "c"]), ran([]), 0.0, 0.0, 0.0, None, 0.0, 0.0),
    # No label in common: nothing pairs → 0 everywhere, τ undefined (n = 0); BLEU: no unigram matches
    # → 0; GLEU 0/5 = 0.
    ("nothing matching", chain(["a", "b", "c"]), ran(["x", "y"]), 0.0, 0.0, 0.0, None, 0.0, 0.0),
    # One step, matched: l = k = 1 → 1; τ: n = 1, no pair → undefined (it used to read 1.0, as if the
    # order had been checked); BLEU order 1: p1 = 1, BP = 1 → 1; GLEU: 1 match, 1 hyp, 1 ref → 1.
    ("single node", chain(["a"]), ran(["a"]), 1.0, 1.0, 1.0, None, 1.0, 1.0),
    # Two empty workflows: F1 of two empty sets is 1 (f1's convention: nothing to find, nothing
    # extra) for Chain and both Graph F1s; τ: n = 0 → undefined; BLEU and GLEU of two empty token
    # lists are 1.0 by the same convention (no n-gram to miss).
    (
        "two empty workflows",
        WorkflowGraph(kind="tools", steps=()),
        ran([]),
        1.0,
        1.0,
        1.0,
        None,
        1.0,
        1.0,
    ),
    # Root r with branches a and b (r → a, r → b); ran a, r, b: branch a before its root. Chain: l = 2
    # (r then b: no topological order puts a before r) → P = R = 2/3 → 2/3. lcc: r→a ran
    # the wrong way, r→b kept; a is a golden sink, but its edge with r ran backwards, so it does not
    # join END (it used to, which linked it to b through END: k = 3 → 1.0); r has a backward edge
    # too, no START. Components {r b END}, {a} → k = 2 → 2/3, what the same order claimed as explicit
    # edges (a → r → b) gets. mcs: (r, a) disagrees; {r, b} agree → k = 2 → 2/3. τ: n = 3, pairs
    # (a, r) discordant, (a, b) unordered in the DAG → concordant, (r, b) concordant → (2 − 1)/3 =
    # 1/3. BLEU: the reference in the topological order closest to the hypothesis is r a b (a's
    # position 0 cannot precede r); hyp a r b: p1 = 3/3, p2 = (ar rb vs ra ab) 0.1/2, p3 = 0.1/1, BP
    # = 1 → (1/20 · 1/10)^(1/3) = (1/200)^(1/3). GLEU: matches 3+0+0, hyp 3+2+1, ref 6 → 0.5.
    (
        "branch run before its root",
        dag(["r", "a", "b"], [(0, 1), (0, 2)]),
        ran(["a", "r", "b"]),
        2 / 3,
        2 / 3,
        2 / 3,
        1 / 3,
        (1 / 200) ** (1 / 3),
        0.5,
    ),
    # BLEU's golden order: r → {a, b} ran r b a, a valid order. The reference is listed in the golden
    # topological order closest to the hypothesis, r b a (not the listed r a b), so nothing is lost:
    # BLEU = GLEU = 1. (Against the listed order it would be p1 = 1, p2 = (rb ba vs ra ab) 0.1/2,
    # p3 = 0.1 → (1/200)^(1/3).)
    (
        "independent branches in the other order",
        dag(["r", "a", "b"], [(0, 1), (0, 2)]),
        ran(["r", "b", "a"]),
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
    ),
    # Diamond a → {b, c} → d, ran a c b d: a topological order. l = 4 → 1; lcc: every golden edge
    # ran in order → k = 4 → 1; mcs: no edge reversed → 1; τ: (c, b) unordered in the DAG counts as
    # concordant → 6/6 = 1. The reference is listed a c b d like the hypothesis → BLEU = GLEU = 1.
    (
        "parallel branches in the other order",
        DIAMOND,
        ran(["a", "c", "b", "d"]),
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
    ),
    # Diamond predicted as the chain a → b → c → d (a DAG prediction). l = 4 → 1. lcc: a→b and c→d
    # shared, a→c and b→d missing; components {START a b}, {c d END} → k = 2 → 0.5. mcs: (a,c),
    # (b,c), (b,d) disagree; the agreeing pairs ab, ad, cd hold no triangle → k = 2 → 0.5. τ: the
    # order a b c d violates nothing → 1. Reference a b c d = hypothesis → BLEU = GLEU = 1.
    (
        "parallel branches serialised",
        DIAMOND,
        chain(["a", "b", "c", "d"], prefix="p"),
        1.0,
        0.5,
        0.5,
        1.0,
        1.0,
        1.0,
    ),
    # Chain a b c d predicted with no edges at all. l = 4 (listed order) → 1. lcc: no golden edge
    # shared, START–a and d–END only → k = 1 → 2(1/4)(1/4)/(1/2) = 0.25 (WorFBench). mcs: pairs
    # with a golden edge disagree, ac ad bd agree, no triangle → k = 2 → 0.5 (WorkflowPerturb).
    # τ = 1; tokens identical → BLEU = GLEU = 1.
    (
        "edgeless prediction",
        chain(["a", "b", "c", "d"]),
        WorkflowGraph(kind="tools", steps=chain(["a", "b", "c", "d"], prefix="p").steps, edges=()),
        1.0,
        0.25,
        0.5,
        1.0,
        1.0,
        1.0,
    ),
    # Chain a b c, ran a b b c: the second b pairs with nothing. l = k = 3, P = 3/4, R = 1 →
    # (3/2)/(7/4) = 6/7 for all three. τ: the extra b is not aligned; n = 3, all concordant → 1.
    # BLEU (orders 3): p1 = 3/4 (b clipped to 1), p2 = (ab bc of ab bb bc) 2/3, p3 = 0.1/2, BP = 1 →
    # (1/40)^(1/3). GLEU: matches 3+2+0+0 = 5, hyp 4+3+2+1 = 10, ref 3+2+1 = 6 → min(0.5, 5/6) = 0.5.
    (
        "duplicated step",
        chain(["a", "b", "c"]),
        ran(["a", "b", "b", "c"]),
        6 / 7,
        6 / 7,
        6 / 7,
        1.0,
        (1 / 40) ** (1 / 3),
        0.5,
    ),
    # Chain a b c d, ran a+b (one merged step), c, d. a+b pairs with a and covers b. l = 3, P = 3/3,
    # R = 3/4 → 1.5/1.75 = 6/7. lcc: b is unpaired, so only c→d survives: {START a}, {c d END} →
    # k = 2, P = 2/3, R = 2/4 → (2/3)/(7/6) = 4/7. mcs: a, c, d agree → 6/7. τ: n = 4 aligned golden
    # steps (b merged into a's step, without a position), positioned a c d all concordant →
    # 3/(4·3/2) = 0.5. BLEU: hyp a+b c d vs a b c d: p1 = 2/3, p2 = 1/2, p3 = 0.1/1, p4 = 0.1 (no
    # 4-gram), BP = exp(1 − 4/3) → exp(−1/3)(1/300)^(1/4). GLEU: matches 2+1, hyp 3+2+1, ref 4+3+2+1
    # → min(3/6, 3/10) = 0.3.
    (
        "merged (compressed) step",
        chain(["a", "b", "c", "d"]),
        ran(["a+b", "c", "d"]),
        6 / 7,
        4 / 7,
        6 / 7,
        0.5,
        math.exp(-1 / 3) * (1 / 300) ** 0.25,
        0.3,
    ),
    # Chain a b c, ran a c. l = 2, P = 1, R = 2/3 → 0.8. lcc: both golden edges touch b; components
    # {START a}, {c END} → k = 1, P = 1/2, R = 1/3 → (1/3)/(5/6) = 0.4. mcs: a, c have no edge in
    # either → k = 2 → 0.8. τ: n = 2, concordant → 1 (a deletion does not move τ). BLEU (orders 3):
    # p1 = 2/2, p2 = (ac) 0.1/1, p3 = 0.1, BP = exp(1 − 3/2) → exp(−1/2)(1/100)^(1/3). GLEU: matches
    # 2, hyp 2+1, ref 3+2+1 → min(2/3, 1/3) = 1/3.
    (
        "missing middle step",
        chain(["a", "b", "c"]),
        ran(["a", "c"]),
        0.8,
        0.4,
        0.8,
        1.0,
        math.exp(-0.5) * (1 / 100) ** (1 / 3),
        1 / 3,
    ),
]


@pytest.mark.parametrize(
    ("gold", "pred", "chain_f1", "lcc", "mcs", "tau", "bleu", "gleu"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_metrics_match_the_hand_computed_values(gold, pred, chain_f1, lcc, mcs, tau, bleu, gleu):
    scores = evaluate(pred, gold)
    assert scores.chain_f1 == pytest.approx(chain_f1)
    assert scores.graph_f1 == pytest.approx(lcc)
    assert evaluate(pred, gold, graph="mcs").graph_f1 == pytest.approx(mcs)
    assert scores.kendall_tau == (None if tau is None else pytest.approx(tau))
    assert scores.bleu == pytest.approx(bleu)
    assert scores.gleu == pytest.approx(gleu)


def test_a_merged_text_step_pairs_with_one_part_and_covers_the_other():
    gold = WorkflowGraph(
        kind="text",
        steps=(
            Step(id="s0", label="open the ticket"),
            Step(id="s1", label="read the history"),
            Step(id="s2", label="send the reply"),
        ),
        edges=(("s0", "s1"), ("s1", "s2")),
    )
    pred = WorkflowGraph(
        kind="text",
        steps=(
            Step(id="p0", label="open the ticket; read the history"),
            Step(id="p1", label="send the reply"),
        ),
    )
    # p0's content words {open, ticket, read, history} vs s0's {open, ticket}: Dice 2·2/6 = 2/3 ≥ 0.5,
    # so p0 pairs with s0 and its leftover {read, history} covers s1. l = 2 → P = 1, R = 2/3 → 0.8.
    # τ: aligned s0, s1 (merged, no position), s2 → n = 3; positioned s0, s2 concordant → 1/3.
    scores = evaluate(pred, gold)
    assert scores.chain_f1 == pytest.approx(0.8)
    assert scores.kendall_tau == pytest.approx(1 / 3)


def lcs(a, b):
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, j in itertools.product(range(len(a)), range(len(b))):
        table[i + 1][j + 1] = table[i][j] + 1 if a[i] == b[j] else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


def test_chain_f1_equals_the_best_lcs_over_every_topological_order_with_repeated_tools():
    # WorkflowPerturb's idealised Chain F1: l = max over the golden DAG's topological orders of the
    # longest common subsequence. Checked by brute force on 300 small random DAGs with repeated tools.
    rng = random.Random(20240601)
    for _ in range(300):
        size = rng.randint(1, 6)
        labels = [rng.choice("abc") for _ in range(size)]
        edges = [(i, j) for i in range(size) for j in range(i + 1, size) if rng.random() < 0.35]
        gold = dag(labels, edges)
        pred = ran([rng.choice("abcd") for _ in range(rng.randint(0, 7))])
        graph = nx.DiGraph()
        graph.add_nodes_from(range(size))
        graph.add_edges_from(edges)
        best = max(
            lcs(pred.labels(), [labels[i] for i in order]) for order in nx.all_topological_sorts(graph)
        )
        expected = 0.0 if best == 0 else 2 * best / (len(pred.steps) + size)
        assert chain_f1(pred, gold) == pytest.approx(expected), (labels, edges, pred.labels())
        # A prediction that is itself a topological order of the golden DAG has τ = 1 (undefined
        # for a single step: no pair to order).
        order = next(nx.all_topological_sorts(graph))
        assert kendall_tau(ran([labels[i] for i in order]), gold) == (1.0 if size > 1 else None)
