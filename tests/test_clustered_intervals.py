"""Intervals and paired tests that cluster by task, checked against simulations with known correlation."""

import math
import random

import pytest

from mcp_resili.report.clustered import (
    Components,
    clustered_mean,
    clustered_mean_interval,
    clustered_rate,
    format_p,
    json_p,
    paired_difference,
    t_cdf,
    t_quantile,
    tasks_needed,
    variance_components,
)
from mcp_resili.report.stats import mcnemar_exact
from mcp_resili.scoring.passk import wilson


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.975, 1, 12.7062),
        (0.975, 2, 4.3027),
        (0.975, 10, 2.2281),
        (0.975, 29, 2.0452),
        (0.8, 10, 0.8791),
        (0.975, 1000, 1.9623),
        (0.025, 5, -2.5706),
    ],
)
def test_t_quantiles_match_the_tables(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-4)
    if df <= 300:
        assert t_cdf(expected, df) == pytest.approx(p, abs=3e-5)  # the table's four decimals


def test_the_clustered_variance_is_that_of_the_task_means_and_reduces_to_wilson_with_one_trial():
    # Three tasks, two trials each: task means 1, 0.5, 0 → variance of the mean = s²(means)/G = 0.25/3.
    obs = [("a", 1), ("a", 1), ("b", 1), ("b", 0), ("c", 0), ("c", 0)]
    estimate = clustered_mean(obs)
    assert estimate.mean == 0.5 and estimate.clusters == 3
    assert estimate.variance == pytest.approx(0.25 / 3)
    # Independent: s²/N = (6·0.25/5)/6 = 0.05 → deff = (0.25/3)/0.05 = 5/3.
    assert estimate.deff == pytest.approx(5 / 3)
    # One trial per task: the clusters are the episodes, and the interval is Wilson's.
    single = [(f"t{i}", i % 3 == 0) for i in range(30)]
    _, n, low, high, clusters = clustered_rate(single)
    assert (n, clusters) == (30, 30)
    assert (low, high) == pytest.approx(wilson(10 / 30, 30))
    # All equal: no correlation to estimate; never a point.
    mean, low, high, _ = clustered_mean_interval([("a", 0.0)] * 3 + [("b", 0.0)] * 3)
    assert mean == 0.0 and low == pytest.approx(0.0, abs=1e-12) and high > 0.3


def simulated_rates(rng, tasks, trials, mean, icc):
    """(task, success) with per-task success probabilities ~ Beta(mean, icc): within-task correlation icc."""
    if icc == 0:
        return [(t, rng.random() < mean) for t in range(tasks) for _ in range(trials)]
    size = 1 / icc - 1
    out = []
    for t in range(tasks):
        p = rng.betavariate(mean * size, (1 - mean) * size)
        out.extend((t, rng.random() < p) for _ in range(trials))
    return out


def coverage(icc, reps=400, tasks=40, trials=3, mean=0.7, seed=7):
    rng = random.Random(seed)
    naive = clustered = 0
    widths = []
    for _ in range(reps):
        obs = simulated_rates(rng, tasks, trials, mean, icc)
        k, n = sum(ok for _, ok in obs), len(obs)
        low, high = wilson(k / n, n)
        naive += low <= mean <= high
        _, _, c_low, c_high, _ = clustered_rate(obs)
        clustered += c_low <= mean <= c_high
        widths.append((c_high - c_low) / (high - low))
    return naive / reps, clustered / reps, sum(widths) / len(widths)


def test_with_correlated_trials_wilson_under_covers_and_the_clustered_interval_does_not():
    # Within-task correlation 0.3, 40 tasks × 3 trials: the design effect is 1 + 2·0.3 = 1.6.
    naive, clustered, widening = coverage(icc=0.3)
    assert naive < 0.9  # per-episode Wilson: about 87%
    assert 0.93 <= clustered <= 0.975
    assert widening == pytest.approx(math.sqrt(1.6), abs=0.12)


def test_without_correlation_the_clustered_interval_keeps_wilsons_coverage_and_width():
    naive, clustered, widening = coverage(icc=0.0)
    assert naive >= 0.92 and clustered >= naive
    assert 1.0 <= widening < 1.08  # deff is never below 1; the t correction for 40 tasks is small


def test_the_clustered_paired_test_holds_its_level_where_mcnemar_per_episode_does_not():
    rng = random.Random(11)
    reps, tasks, trials = 600, 40, 3
    covered = rejected = rejected_mcnemar = 0
    for _ in range(reps):
        pairs, outcomes = [], []
        for t in range(tasks):
            base = rng.betavariate(1.5, 1.0)  # the task's difficulty, shared
            # Each model is better on some tasks than the other (no difference on average).
            pa = min(1.0, max(0.0, base + rng.gauss(0, 0.25)))
            pb = min(1.0, max(0.0, base + rng.gauss(0, 0.25)))
            for _ in range(trials):
                u = rng.random()  # one fault draw, met by both models
                a, b = u < pa, u < pb
                pairs.append((t, float(a), float(b)))
                outcomes.append((a, b))
        d = paired_difference(pairs)
        covered += d.low <= 0 <= d.high
        rejected += d.p_value < 0.05
        rejected_mcnemar += mcnemar_exact(outcomes).p_value < 0.05
    assert 0.93 <= covered / reps <= 0.97
    assert rejected / reps <= 0.07
    assert rejected_mcnemar / reps > 0.09  # trials treated as independent: about twice the level


def test_variance_components_recover_known_task_fault_and_trial_parts():
    rng = random.Random(3)
    pairs = []
    for t in range(400):
        task = rng.gauss(0, 1.0)  # variance 1, shared by both sides
        for _ in range(4):
            draw = rng.gauss(0, math.sqrt(0.5))  # the fault draw both sides meet
            a = task + draw + rng.gauss(0, math.sqrt(0.25))
            b = task + draw + rng.gauss(0, math.sqrt(0.25)) + 0.1
            pairs.append((t, a, b))
    c = variance_components(pairs)
    assert c.task == pytest.approx(1.0, rel=0.15)
    assert c.fault_draw == pytest.approx(0.5, rel=0.1)
    assert c.trial == pytest.approx(0.25, rel=0.15)
    # The difference carries neither the task nor the fault draw: only 2 × the trial part, within tasks.
    assert c.difference_task == pytest.approx(0.0, abs=0.03)
    assert c.difference_within == pytest.approx(0.5, rel=0.1)
    d = paired_difference(pairs)
    assert d.low < 0.1 < d.high and d.verdict == "beyond the noise"


def test_a_difference_every_task_shows_identically_is_a_sign_test_not_a_zero_p():
    pairs = [(t, 0.0, 1.0) for t in range(12) for _ in range(2)]
    d = paired_difference(pairs)
    assert d.delta == 1.0 and d.p_value == pytest.approx(2 * 0.5**12)
    same = paired_difference([(t, 1.0, 1.0) for t in range(5)])
    assert same.p_value == 1.0 and same.verdict.startswith("no difference")


def test_p_values_below_the_printed_precision_read_as_less_than():
    assert format_p(1e-30) == "< 0.001" and format_p(0.0009) == "< 0.001"
    assert format_p(0.001) == "0.001" and format_p(0.0312) == "0.031"
    assert json_p(1.234567e-30) == 1.235e-30  # never rounded to 0 in JSON
    assert mcnemar_exact([(True, False)] * 40).to_dict()["p_value"] > 0


def test_tasks_needed_follows_the_variance_of_the_paired_difference():
    # Difference: task part 0.08, within-task 0.42; with 3 trials per task the per-task variance is
    # 0.08 + 0.42/3 = 0.22; z-sum (0.05, 0.8) = 2.8016 → G = 2.8016² · 0.22 / 0.05² = 690.7 → 691+.
    parts = Components(0.1, 0.0, 0.4, 0.08, 0.42, 3)
    needed = tasks_needed(0.05, parts, 3)
    assert needed in range(691, 695)  # t quantiles of ~690 tasks add a task or two
    assert tasks_needed(0.05, parts, 1) > needed > tasks_needed(0.05, parts, 10)
    assert tasks_needed(0.1, parts, 3) == pytest.approx(needed / 4, rel=0.02)


def test_toolmazes_intervals_take_its_tasks_as_the_units():
    """Twelve tasks whose four trajectories always agree carry the information of twelve, not 48."""
    from mcp_resili.scoring.model import Score
    from mcp_resili.store import EpisodeRow
    from mcp_resili.suites.toolmaze.report import report_sections

    def row(task, trial, success):
        components = {"mode": "P1", "level": "C1", "i_succ": success, "i_pert": True}
        components |= {"i_recov": success, "c_rec": 0.0}
        score = Score(suite="toolmaze", task=task, label="full", value=1.0, components=components)
        return EpisodeRow(
            run_id="r",
            episode_id=f"{task}-{trial}",
            model="m",
            faults="toolmaze:P1",
            variant="b",
            task_id=task,
            trial=trial,
            termination="completed",
            label="full",
            value=1.0,
            score=score.model_dump(mode="json"),
            trace="",
        )

    agreeing = [row(f"t{t}", k, t < 6) for t in range(12) for k in range(4)]
    mixed = [row(f"t{t}", k, k % 2 == 0) for t in range(12) for k in range(4)]  # every task: 2 of 4
    widths = {}
    for name, rows in (("agreeing", agreeing), ("mixed", mixed)):
        (section,) = report_sections(rows)
        tsr = next(g for g in section.data["groups"] if (g["mode"], g["level"]) == ("P1", "C1"))["tsr"]
        assert tsr["n"] == 48
        widths[name] = tsr["ci95"][1] - tsr["ci95"][0]
    plain = wilson(0.5, 48)
    # Trials that always agree within a task (design effect 4): far wider than Wilson over 48.
    assert widths["agreeing"] > 1.4 * (plain[1] - plain[0])
    # Tasks that do not differ carry no design effect (deff 1; t with 11 rather than 47 df: +10%).
    assert widths["mixed"] == pytest.approx(plain[1] - plain[0], rel=0.15)
