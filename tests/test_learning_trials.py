"""Trials that learn (Reflexion) are not exchangeable: pass^k per trial index does not move with --trials."""

import pytest

from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.scoring.passk import TaskTrials, pass_k_curve, per_trial_rates, surface
from mcp_resili.suites.reliabilitybench.report import summarize

pytestmark = pytest.mark.anyio


def learning_task(task_id, outcomes):
    return TaskTrials(task_id, sum(outcomes), len(outcomes), ordered=tuple(outcomes))


def test_per_trial_index_pass_k_ignores_the_trials_that_follow_while_the_unbiased_one_moves():
    # Four tasks that fail their first trial and pass every later one (a learner), one that always passes.
    histories = [[False] + [True] * 5] * 4 + [[True] * 6]
    for trials in (2, 4, 6):
        tasks = [learning_task(f"t{i}", h[:trials]) for i, h in enumerate(histories)]
        sequential = [p.value for p in pass_k_curve(tasks, 2, sequential=True)]
        # By hand: pass^1 = trial 0 passed = 1/5; pass^2 = trials 0 and 1 passed = 1/5.
        assert sequential == [pytest.approx(0.2), pytest.approx(0.2)]
        unbiased = pass_k_curve(tasks, 2)[0].value
        # The unbiased pass^1 is the mean success over all trials: (4·(trials-1)/trials + 1)/5.
        assert unbiased == pytest.approx((4 * (trials - 1) / trials + 1) / 5)
    rates = per_trial_rates([learning_task(f"t{i}", h[:3]) for i, h in enumerate(histories)])
    assert [r.value for r in rates] == [pytest.approx(0.2), 1.0, 1.0]  # the learning curve


def test_a_task_missing_an_early_trial_is_left_out_per_trial_index():
    tasks = [
        TaskTrials("a", 1, 2, 1, ordered=(None, True, True)),  # trial 0 was an infrastructure error
        learning_task("b", [True, True, False]),
    ]
    (one, two, three) = pass_k_curve(tasks, sequential=True)
    assert one.excluded == ("a",) and one.value == two.value == 1.0 and three.value == 0.0
    points = surface({(0.0, 0.0): tasks}, sequential=True)
    assert points.tasks == ("b",) and points.to_dict()["estimator"].startswith("per trial index")


async def test_reflexion_surface_volume_is_the_same_at_2_and_4_trials(tmp_path):
    volumes = {}
    unbiased = {}
    for trials in (2, 4):
        config = RunConfig(
            suite="reliabilitybench",
            db=tmp_path / f"{trials}.db",
            time_scale=0,
            models=("scripted:learner",),
            architecture="reflexion",
            faults=("lambda=0.3",),
            trials=trials,
            limit=12,
        )
        result = await execute(config)
        summary = summarize(result.rows)
        (shape,) = summary["surfaces"]
        assert shape["estimator"].startswith("per trial index")
        volumes[trials] = shape["volume"]
        (cell,) = summary["cells"]
        assert [p["k"] for p in cell["by_trial"]] == list(range(1, trials + 1))
        by_task: dict[str, list[bool]] = {}
        for row in sorted(result.rows, key=lambda r: r.trial):
            by_task.setdefault(row.task_id, []).append(row.label == "full")
        tasks = [TaskTrials(t, sum(o), len(o)) for t, o in by_task.items()]
        unbiased[trials] = sum(p.value for p in pass_k_curve(tasks)[:2]) / 2
    # Trials 0 and 1 are the same episodes in both runs: per trial index, the same volume exactly.
    assert volumes[2] == volumes[4]
    # The unbiased estimator, which assumes exchangeable trials, also draws on trials 2 and 3 (played
    # with memory): its value moves with --trials.
    assert unbiased[4] != unbiased[2]
