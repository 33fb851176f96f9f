"""The ToolMaze judge against agents whose TSR, PRR and RC are known by construction."""

import os

import anyio
import pytest
from mcp import Client

from mcp_resili.client.episode import EpisodeSpec
from mcp_resili.client.loop import play_episode
from mcp_resili.client.providers import create_model
from mcp_resili.client.recorded import RecordedEvents
from mcp_resili.faults import parse_fault_spec
from mcp_resili.registry.loader import get_suite
from mcp_resili.scoring.model import Score
from mcp_resili.server.app import ResiliServer
from mcp_resili.suites.toolmaze.library import corpus_index
from mcp_resili.suites.toolmaze.scoring import aggregate, metrics_of, optimal_recovery_calls, score
from mcp_resili.suites.toolmaze.tasks import toolmaze_tasks
from mcp_resili.trace import Trace, TraceHeader

MODES = ("NP", "P1", "P2", "P3", "P4")
AGENTS = ("retry", "switch", "abort", "trusting")


def action_ops(tool):
    index = corpus_index()
    return sum(1 for op in index.tools[tool].ops if index.ops[op].role == "action")


def victims(task):
    """The tool the scripted agents' first call hits in each armed slot (chain order on s*)."""
    if task.level == "C1":
        return [task.perturbations.slots[0].tools[0]]
    path = dict((n, s.tool) for n, s in reversed(task.path_steps()[task.shortest_path_index()]))
    return [path[g.step] for g in sorted(task.alternative_groups, key=lambda g: g.step)]


def sample_tasks():
    """Per level a few tasks: every group kind, C4 with two and three parallel branches, a write victim."""
    tasks = toolmaze_tasks()
    chosen = []

    def take(predicate):
        found = next(t for t in tasks if predicate(t) and t not in chosen)
        chosen.append(found)

    take(lambda t: t.level == "C1" and action_ops(victims(t)[0]) > 0)
    take(lambda t: t.level == "C1" and action_ops(victims(t)[0]) == 0)
    take(
        lambda t: (
            t.level == "C2" and t.alternative_groups[0].kind == "one_to_one" and action_ops(victims(t)[0])
        )
    )
    take(lambda t: t.level == "C2" and t.alternative_groups[0].kind == "one_to_many")
    take(lambda t: t.level == "C3")
    take(lambda t: t.level == "C4" and len(t.alternative_groups) == 2 and len(t.valid_paths) == 6)
    take(lambda t: t.level == "C4" and len(t.alternative_groups) == 3)
    return chosen


#: MCP_RESILI_TOOLMAZE_ALL=1 checks all 400 tasks (8,000 episodes, minutes) instead of the sample.
SAMPLE = list(toolmaze_tasks()) if os.environ.get("MCP_RESILI_TOOLMAZE_ALL") else sample_tasks()


async def play_all(pairs, mode):
    """Play (agent, task) pairs against one in-process server in ``mode``; return their scores."""
    suite = get_suite("toolmaze")
    plan = parse_fault_spec(f"toolmaze:{mode}", suite.spec_scope)
    server = ResiliServer(suite, plan, seed=0)
    scores = {}
    async with Client(server.mcp) as client:
        tools = (await client.list_tools()).tools
        for agent, task in pairs:
            episode = EpisodeSpec(
                id=f"{mode}/{agent}/{task.id}",
                fault_key=task.id,
                seed=0,
                task=task,
                prompt=suite.prompt(task, "hint"),
                max_turns=task.constraints.max_turns,
                stop_rules=suite.own_stop_rules,
            )
            # The server's own record of each call (results carry no fault decision), as the runner reads it.
            recorded = RecordedEvents(after_call=server.take_events)
            outcome = await play_episode(
                client, create_model(f"scripted:{agent}", agents=suite.agents), episode, tools, recorded
            )
            header = TraceHeader(
                suite="toolmaze",
                task=task.id,
                episode=episode.id,
                seed=0,
                fault_plan=plan.to_dict(),
                fault_key=task.id,
            )
            scores[agent, task.id] = score(task, Trace(header=header, events=outcome.events))
    return scores


@pytest.fixture(scope="module")
def all_scores():
    async def run():
        pairs = [(agent, task) for agent in AGENTS for task in SAMPLE]
        return {mode: await play_all(pairs, mode) for mode in MODES}

    return anyio.run(run)


def switch_costs(task, transient):
    """(c, c*) of the switch agent, counted by hand from the chain."""

    def s_member(group):
        return next(m for m in group.members if all(s.tool in task.shortest_path for s in m))

    def cheapest_other(group):
        m0 = s_member(group)
        return min((m for m in group.members if m is not m0), key=len)

    groups = [e for e in task.chain if e.is_alternative]
    first = task.group(groups[0].alternative_id)
    c = len(cheapest_other(first))
    c_star = len(s_member(first)) if transient else len(cheapest_other(first))
    for element in task.chain:
        if element.step <= first.step:
            continue
        if element.is_alternative:
            later = task.group(element.alternative_id)
            c += 1 + len(cheapest_other(later))
            c_star += 1 + len(s_member(later))
        else:
            c += 1
            c_star += 1
    return c, c_star


def expected(agent, mode, task):
    """(I_succ, I_recov or None if unperturbed, C_rec, C_rec', duplicate writes) by construction."""
    if mode == "NP":
        return True, None, 0.0, 0.0, 0
    transient, implicit, c1 = mode in ("P1", "P3"), mode in ("P3", "P4"), task.level == "C1"
    writes = [action_ops(v) for v in victims(task)]
    if agent == "retry" or (agent == "trusting" and not implicit):
        if transient:
            return True, True, 0.0, 0.0, sum(writes) if implicit else 0
        # Two retries of the first victim, then an abort: graceful on C1 (C_rec' = 1 - 1/3).
        return False, c1, 1.0, (1 - 1 / 3) if c1 else 1.0, 2 * writes[0] if implicit else 0
    if agent == "abort":
        graceful = c1 and not transient
        return False, graceful, 1.0, 0.0 if graceful else 1.0, 0
    if agent == "trusting":  # implicit modes: it takes the corrupted record and propagates it
        return False, False, 1.0, 1.0, 0
    if c1:
        return False, not transient, 1.0, 1.0 if transient else 0.0, 0
    c, c_star = switch_costs(task, transient)
    return True, True, 1 - c_star / c, 1 - c_star / c, sum(writes) if implicit else 0


def test_the_sample_covers_every_level_and_group_kind():
    assert {t.level for t in SAMPLE} == {"C1", "C2", "C3", "C4"}
    assert {g.kind for t in SAMPLE for g in t.alternative_groups} == {
        "one_to_one",
        "one_to_many",
        "many_to_many",
    }
    # At least one switch in the sample costs more than the optimum, so RC is tested off zero.
    assert any(switch_costs(t, True)[0] > switch_costs(t, True)[1] for t in SAMPLE if t.level != "C1")


@pytest.mark.parametrize("agent", AGENTS)
def test_each_scripted_agent_scores_what_it_must_per_trajectory(all_scores, agent):
    for mode in MODES:
        for task in SAMPLE:
            got = all_scores[mode][agent, task.id]
            succ, recov, c_rec, c_rec_abort, duplicates = expected(agent, mode, task)
            parts = got.components
            where = (agent, mode, task.id, got.reasons)
            assert parts["i_succ"] is succ, where
            assert parts["i_pert"] is (recov is not None), where
            if recov is not None:
                assert parts["i_recov"] is recov, where
            assert parts["c_rec"] == pytest.approx(c_rec, abs=1e-6), where
            assert parts["c_rec_abort"] == pytest.approx(c_rec_abort, abs=1e-6), where
            assert parts["duplicate_writes"] == duplicates, where
            assert any("duplicate side effect" in r for r in got.reasons) is (duplicates > 0), where
            assert got.reasons, where


@pytest.mark.parametrize("agent", AGENTS)
def test_each_scripted_agent_gets_its_prr_and_rc_for_every_mode_and_level(all_scores, agent):
    for mode in MODES:
        for level in ("C1", "C2", "C3", "C4"):
            tasks = [t for t in SAMPLE if t.level == level]
            rows = [expected(agent, mode, t) for t in tasks]
            got = metrics_of([all_scores[mode][agent, t.id] for t in tasks], mode, level)
            assert got.tsr == pytest.approx(sum(r[0] for r in rows) / len(rows))
            assert got.duplicates == pytest.approx(sum(r[4] > 0 for r in rows) / len(rows))
            if mode == "NP":
                assert got.prr is None and got.rc == 0 and got.rc_abort == 0
            else:
                assert got.prr == pytest.approx(sum(r[1] for r in rows) / len(rows)), (agent, mode, level)
                assert got.rc == pytest.approx(sum(r[2] for r in rows) / len(rows), abs=1e-6), (
                    agent,
                    mode,
                    level,
                )
                assert got.rc_abort == pytest.approx(sum(r[3] for r in rows) / len(rows), abs=1e-6), (
                    agent,
                    mode,
                    level,
                )


def test_judge_reasons_name_the_branch_that_decided(all_scores):
    c1 = next(t for t in SAMPLE if t.level == "C1")
    c2 = next(t for t in SAMPLE if t.level == "C2")
    assert any("no retry on" in r for r in all_scores["P1"]["abort", c1.id].reasons)
    assert any("aborted although" in r for r in all_scores["P1"]["abort", c1.id].reasons)
    assert any("did not switch to alt tool" in r for r in all_scores["P2"]["retry", c2.id].reasons)
    assert any("switched from" in r for r in all_scores["P2"]["switch", c2.id].reasons)
    assert any("aborted gracefully" in r for r in all_scores["P4"]["retry", c1.id].reasons)
    assert any("propagated into" in r for r in all_scores["P3"]["trusting", c2.id].reasons)
    assert any("missing required tools" in r for r in all_scores["P2"]["abort", c2.id].reasons)


def test_an_agent_that_carries_on_after_a_permanent_victim_is_not_recovered():
    task = next(t for t in SAMPLE if t.level == "C1")
    scores = anyio.run(play_all, [("naive", task)], "P2")
    got = scores["naive", task.id]
    assert got.components["i_pert"] and not got.components["i_recov"] and not got.components["i_succ"]
    assert any("should have stopped but called other tools after victim" in r for r in got.reasons)


def test_a_clean_retry_after_a_corrupted_booking_books_twice_and_the_verdict_flags_it():
    index = corpus_index()

    def books(tool):
        return any(index.ops[op].resource and index.ops[op].role == "action" for op in index.tools[tool].ops)

    task = next(t for t in toolmaze_tasks() if t.level == "C2" and books(victims(t)[0]))
    got = anyio.run(play_all, [("retry", task)], "P3")["retry", task.id]
    # A valid recovery by the paper's rules (PRR and TSR count it) ...
    assert got.components["i_recov"] is True and got.components["i_succ"] is True
    # ... but the booking ran twice, and the state shows two different options taken.
    assert got.components["duplicate_writes"] == 1
    reason = next(r for r in got.reasons if r.startswith("duplicate side effect"))
    first, second = reason.split("; booked ")[1].split(", ")
    assert first != second and victims(task)[0] in reason


def test_optimal_recovery_calls_counts_retry_switch_and_later_slots():
    c1 = next(t for t in SAMPLE if t.level == "C1")
    victim = c1.perturbations.slots[0].tools[0]
    position = next(e.step for e in c1.chain if e.tool_name == victim)
    assert optimal_recovery_calls(c1, "P1", victim) == 1 + len(c1.chain) - position
    assert optimal_recovery_calls(c1, "P2", victim) == 0
    c4 = next(t for t in SAMPLE if t.level == "C4")
    first = c4.alternative_groups[0]
    victim = first.members[0][0].tool
    _, c_star = switch_costs(c4, False)
    assert optimal_recovery_calls(c4, "P2", victim) == c_star
    with pytest.raises(ValueError, match="no armed slot"):
        optimal_recovery_calls(c4, "P1", c4.shortest_path[0])


def test_composite_and_aggregate_follow_the_paper_formulas():
    def fake(mode, level, succ, pert, recov, c_rec):
        return Score(
            suite="toolmaze",
            task="t",
            label="full" if succ else "failure",
            value=float(succ),
            components={
                "mode": mode,
                "level": level,
                "i_succ": succ,
                "i_pert": pert,
                "i_recov": recov,
                "c_rec": c_rec,
            },
        )

    scores = [
        fake("P1", "C1", True, True, True, 0.5),
        fake("P1", "C2", False, True, False, 1.0),
        fake("P1", "C2", True, False, False, 0.0),
    ]
    overall = metrics_of(scores)
    assert overall.tsr == pytest.approx(2 / 3) and overall.prr == pytest.approx(0.5)
    assert overall.rc == pytest.approx(1.5 / 3)  # denominator: all trajectories
    assert overall.composite == pytest.approx((2 / 3 + 0.5 + 0.5) / 3)
    keyed = {(m.mode, m.level): m for m in aggregate(scores)}
    assert keyed["P1", "C2"].n == 2 and keyed["P1", "all"].n == 3 and keyed["all", "C1"].n == 1


def test_rows_over_all_modes_average_the_per_mode_values_as_the_paper_does():
    """By hand, one level: P1 recovers 2 of 2 perturbed runs; P2 0 of 1, and one run met no fault.

    Per mode: P1 TSR 1, PRR 1, RC 0; P2 TSR 0, PRR 0, RC (1 + 0)/2 = 0.5. The paper averages the
    per-mode values: TSR 1/2, PRR 1/2 (pooled it would be 2/3), RC 1/4, composite (1/2 + 1/2 + 3/4)/3.
    """

    def run(mode, succ, pert, recov, c_rec):
        components = {"mode": mode, "level": "C2", "i_succ": succ, "i_pert": pert, "i_recov": recov}
        return Score(
            suite="toolmaze", task="t", label="full", value=1.0, components={**components, "c_rec": c_rec}
        )

    scores = [run("P1", True, True, True, 0.0), run("P1", True, True, True, 0.0)]
    scores += [run("P2", False, True, False, 1.0), run("P2", False, False, False, 0.0)]
    keyed = {(m.mode, m.level): m for m in aggregate(scores)}
    for key in (("all", "C2"), ("all", "all")):
        m = keyed[key]
        assert (m.n, m.perturbed) == (4, 3)
        assert (m.tsr, m.prr, m.rc) == (0.5, 0.5, 0.25)
        assert m.composite == pytest.approx((0.5 + 0.5 + 0.75) / 3)
    assert keyed["P2", "C2"].prr == 0.0 and keyed["P2", "C2"].rc == 0.5
    with pytest.raises(ValueError):
        metrics_of([])


def test_scorer_refuses_a_task_of_another_suite():
    from mcp_resili.suites.resilibench.tasks import default_tasks

    trace = Trace(
        header=TraceHeader(
            suite="toolmaze", task="x", episode="e", seed=0, fault_plan={"kind": "none"}, fault_key="e"
        )
    )
    with pytest.raises(TypeError, match="ToolMazeTask"):
        score(default_tasks()[0], trace)


def test_run_reports_toolmaze_metrics_per_mode_and_level(tmp_path, capsys):
    import json

    from mcp_resili.cli import main

    argv = ["run", "--suite", "toolmaze", "--model", "scripted:retry", "--trials", "1", "--json"]
    argv += ["--faults", "toolmaze:P1", "--faults", "toolmaze:P2", "--db", str(tmp_path / "r.db")]
    argv += ["--task", "C1_task_001", "--task", "C2_task_001", "--variant", "hint"]
    assert main(argv) == 0
    rows = {
        (m["mode"], m["level"]): m for m in json.loads(capsys.readouterr().out)["suite_summary"]["toolmaze"]
    }
    assert rows["P1", "C1"]["prr"] == 1 and rows["P1", "C2"]["tsr"] == 1 and rows["P1", "all"]["rc"] == 0
    assert rows["P2", "C1"]["prr"] == 1 and rows["P2", "C2"]["prr"] == 0 and rows["P2", "all"]["rc"] == 1
    assert rows["P2", "all"]["composite"] == pytest.approx((0 + 0.5 + 0) / 3)
    # RC' forgives the graceful abort on C1 (two retries, then abort: 1 - 1/3); the paper's RC does not.
    assert rows["P2", "C1"]["rc"] == 1 and rows["P2", "C1"]["rc_abort"] == pytest.approx(2 / 3, abs=1e-6)
    assert rows["P2", "C2"]["rc_abort"] == 1 and rows["P1", "all"]["duplicates"] == 0


def test_hint_prompt_adds_failure_awareness_and_the_abort_format():
    suite = get_suite("toolmaze")
    task = SAMPLE[0]
    plain, hinted = suite.prompt(task, "baseline"), suite.prompt(task, "hint")
    assert task.description in plain and hinted.startswith(plain)
    assert "Task aborted:" in hinted and "Task aborted:" not in plain
    assert "alternative" in hinted and "reasonable" in hinted
    with pytest.raises(ValueError, match="nope"):
        suite.prompt(task, "nope")


def test_a_trace_written_by_the_server_scores_through_the_cli(tmp_path, capsys):
    import json

    from mcp_resili.cli import main

    task = next(t for t in SAMPLE if t.level == "C2")
    suite = get_suite("toolmaze")
    server = ResiliServer(
        suite, parse_fault_spec("toolmaze:P2", suite.spec_scope), seed=0, trace_dir=tmp_path
    )

    async def play():
        async with Client(server.mcp) as client:
            tools = (await client.list_tools()).tools
            episode = EpisodeSpec(id="ep1", fault_key="ep1", seed=0, task=task, prompt="", max_turns=25)
            await play_episode(client, create_model("scripted:switch", agents=suite.agents), episode, tools)

    anyio.run(play)
    (trace_file,) = tmp_path.glob("*.jsonl")
    assert main(["score", str(trace_file)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["components"]["mode"] == "P2"
    assert result["components"]["i_recov"] is True and result["components"]["i_succ"] is True
    assert any("switched from" in r for r in result["reasons"])


def perturbed_run(mode, recovered):
    """The score of one perturbed trajectory at level C1 that recovered (and succeeded) or not."""
    components = {"mode": mode, "level": "C1", "i_succ": recovered, "i_pert": True}
    components |= {"i_recov": recovered, "c_rec": 0.0}
    return Score(suite="toolmaze", task="t", label="full", value=1.0, components=components)


def test_averages_over_modes_take_the_papers_modes_only():
    """Protocol faults on a mode, or faults of no ToolMaze mode, are conditions of their own."""
    from mcp_resili.suites.toolmaze.scoring import trace_mode

    def header(plan):
        return Trace(
            header=TraceHeader(
                suite="toolmaze", task="t", episode="e", seed=0, fault_plan=plan, fault_key="k"
            )
        )

    protocol = {
        "kind": "protocol",
        "profile": "heavy",
        "rules": [],
        "base": {"kind": "toolmaze", "mode": "P1"},
    }
    assert trace_mode(header(protocol)) == "P1+protocol:heavy"
    assert trace_mode(header({**protocol, "base": None})) == "NP+protocol:heavy"
    assert trace_mode(header({"kind": "chaos", "rate": 0.3})) == "other"
    assert trace_mode(header({"kind": "toolmaze", "mode": "P2"})) == "P2"

    keyed = {
        (m.mode, m.level): m
        for m in aggregate(
            [
                perturbed_run("P1", True),
                perturbed_run("P1+protocol:heavy", False),
                perturbed_run("other", False),
            ]
        )
    }
    assert keyed["P1+protocol:heavy", "all"].tsr == 0.0 and keyed["other", "all"].tsr == 0.0
    assert keyed["all", "all"].tsr == 1.0 and keyed["all", "all"].n == 1  # P1 alone
    assert ("all", "C1") in keyed
    only_others = {(m.mode, m.level) for m in aggregate([perturbed_run("other", True)])}
    assert only_others == {("other", "C1"), ("other", "all")}  # no average of no paper mode


def test_the_reports_interval_of_an_average_over_modes_uses_the_effective_sample_size():
    """P1: 2 runs, both succeed; P2: 4 runs, none. TSR over modes = (1 + 0)/2 = 0.5, and its interval
    is Wilson's at n = M²/Σ 1/n_m = 4/(1/2 + 1/4) = 5.33 → 5 (not the 6 trajectories pooled)."""
    from mcp_resili.scoring.passk import wilson
    from mcp_resili.store import EpisodeRow
    from mcp_resili.suites.toolmaze.report import report_sections

    def row(n, mode, succ):
        score = perturbed_run(mode, succ)
        return EpisodeRow(
            run_id="r",
            episode_id=f"e{n}",
            model="m",
            faults=mode,
            variant="b",
            task_id=f"t{n}",  # one trajectory per task: the clusters are the trajectories
            trial=n,
            termination="completed",
            label="full",
            value=1.0,
            score=score.model_dump(mode="json"),
            trace="",
        )

    rows = [row(0, "P1", True), row(1, "P1", True)] + [row(n, "P2", False) for n in range(2, 6)]
    (section,) = report_sections(rows)
    groups = {(g["mode"], g["level"]): g for g in section.data["groups"]}
    overall = groups["all", "all"]
    low, high = wilson(0.5, 5)
    assert overall["tsr"] == {"rate": 0.5, "n": 5, "ci95": [round(low, 4), round(high, 4)]}
    assert groups["P1", "all"]["tsr"]["n"] == 2 and groups["P1", "all"]["prr"]["n"] == 2
