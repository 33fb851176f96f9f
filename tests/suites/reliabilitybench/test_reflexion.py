"""Reflexion (Shinn et al., 2023): a failed trial ends with the model's own reflection, kept for the
next trials of the same task; the scripted learner proves the memory changes what the agent does."""

import json
import sqlite3
from dataclasses import dataclass, replace

import pytest
from fakes.model_server import FakeModelServer, Reply, finish_call, serve

from mcp_resili.agents.model import MEMORY_SIZE, REFLECTION_CHARS, ModelRequest, ModelResponse
from mcp_resili.agents.scripted import NaiveAgent
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.registry.loader import get_suite
from mcp_resili.suites.reliabilitybench.agents import RETRY_LESSON
from mcp_resili.trace import EpisodeEndEvent, ReflectionEvent, Trace

pytestmark = pytest.mark.anyio
SUITE = get_suite("reliabilitybench")


def config(tmp_path, name="r.db", **kw):
    base = dict(
        suite="reliabilitybench",
        db=tmp_path / name,
        time_scale=0,
        concurrency=8,
        models=("scripted:learner",),
    )
    return RunConfig(**{**base, **kw})


def first_calls_fail(tmp_path):
    """A fault file: the first call of every tool in every episode meets a connection reset."""
    path = tmp_path / "first-calls.json"
    path.write_text(
        json.dumps(
            {"kind": "rules", "rules": [{"tool": "*", "calls": [1], "fault": {"type": "connection_reset"}}]}
        )
    )
    return str(path)


def reflections(row):
    return [e for e in Trace.from_lines(row.trace.splitlines()).events if isinstance(e, ReflectionEvent)]


def by_trial(rows):
    out = {}
    for row in rows:
        out.setdefault(row.trial, []).append(row.label == "full")
    return {trial: sum(passed) for trial, passed in sorted(out.items())}


async def test_a_failed_trial_ends_with_a_reflection_that_the_next_trial_starts_with(tmp_path):
    faults = (first_calls_fail(tmp_path),)
    react = await execute(config(tmp_path, "a.db", faults=faults, trials=3, limit=2))
    reflexion = await execute(
        config(tmp_path, "b.db", faults=faults, trials=3, limit=2, architecture="reflexion")
    )
    # Trial 1 is the same naive attempt under both; it fails (no retry after the reset).
    assert by_trial(react.rows) == {0: 0, 1: 0, 2: 0}
    assert by_trial(reflexion.rows) == {0: 0, 1: 2, 2: 2}
    assert all(not reflections(r) for r in react.rows)
    for row in reflexion.rows:
        events = reflections(row)
        memory = [e for e in events if e.role == "memory"]
        written = [e for e in events if e.role == "written"]
        if row.trial == 0:
            # The learner's own words: what failed, and the lesson it acts on next time.
            assert memory == [] and len(written) == 1 and written[0].from_trial == 0
            assert RETRY_LESSON in written[0].text and "CONNECTION_RESET" in written[0].text
        else:
            # A passing trial writes nothing; the memory it started with is in its trace.
            assert [m.from_trial for m in memory] == [0] and written == []
            assert RETRY_LESSON in memory[0].text
        assert row.architecture == "reflexion"
        assert Trace.from_lines(row.trace.splitlines()).header.architecture == "reflexion"


async def test_reflexion_changes_the_learners_pass_rate_on_trial_2_under_chaos(tmp_path):
    runs = {
        arch: await execute(
            config(tmp_path, f"{arch}.db", faults=("lambda=0.3",), trials=2, limit=40, architecture=arch)
        )
        for arch in ("react", "reflexion")
    }
    react, reflexion = (by_trial(runs[a].rows) for a in ("react", "reflexion"))
    # Same seed, same fault draws: the first trials are identical; only memory differs afterwards.
    assert react[0] == reflexion[0] < 40
    assert reflexion[1] > react[1]
    first = {r.task_id: r.label for r in runs["react"].rows if r.trial == 0}
    for arch, run in runs.items():
        for row in run.rows:
            if row.trial == 1 and first[row.task_id] == "full":  # no failure, no reflection
                twin = next(r for r in runs["react"].rows if (r.task_id, r.trial) == (row.task_id, 1))
                assert row.label == twin.label, arch


async def test_a_resumed_reflexion_run_rebuilds_the_memory_and_equals_an_uninterrupted_run(tmp_path):
    cfg = config(tmp_path, faults=(first_calls_fail(tmp_path),), trials=3, limit=3, architecture="reflexion")
    full = await execute(cfg)
    # As if the run had been killed after every task's first trial.
    with sqlite3.connect(cfg.db) as db:
        db.execute("DELETE FROM episodes WHERE trial > 0")
    resumed = await execute(replace(cfg, concurrency=1), resume=full.run_id)
    assert resumed.resumed == 3 and len(resumed.rows) == 9

    def comparable(rows):
        return {(r.task_id, r.trial): (r.label, r.trace) for r in rows}

    assert comparable(resumed.rows) == comparable(full.rows)
    assert by_trial(resumed.rows) == {0: 0, 1: 3, 2: 3}


@dataclass
class Unteachable:
    """Plays naive whatever it remembers, and writes a very long reflection after every failure."""

    name: str = "scripted:learner"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "reflect":
            return ModelResponse(text=f"{len(request.memory)} earlier reflections. " + "x" * 5000)
        return await NaiveAgent().generate(request)


async def test_reflexion_runs_a_tasks_trials_in_order_with_a_bounded_memory(tmp_path, monkeypatch):
    monkeypatch.setattr("mcp_resili.client.runner.create_model", lambda spec, **_options: Unteachable())
    result = await execute(
        config(tmp_path, faults=(first_calls_fail(tmp_path),), trials=5, limit=1, architecture="reflexion")
    )
    assert by_trial(result.rows) == {0: 0, 1: 0, 2: 0, 3: 0, 4: 0}
    # With 8 episodes allowed in flight, each trial still started from the reflections stored before
    # it: the newest MEMORY_SIZE of them, each cut to REFLECTION_CHARS.
    memories = [[m.from_trial for m in reflections(r) if m.role == "memory"] for r in result.rows]
    assert memories == [[], [0], [0, 1], [0, 1, 2], [1, 2, 3]] and MEMORY_SIZE == 3
    written = [next(e for e in reflections(r) if e.role == "written") for r in result.rows]
    assert [w.text.split(" ")[0] for w in written] == ["0", "1", "2", "3", "3"]
    assert {len(w.text) for w in written} == {REFLECTION_CHARS}


async def test_the_reflection_is_a_real_model_turn_through_the_providers_sdk(tmp_path):
    """A hosted model sends empty arguments until the stop rule ends the trial, then reflects."""
    lesson = "I called book_meeting with no arguments ten times; next time I will fill them in."

    def policy(exchange):
        if lesson in exchange.prompt:
            return Reply(calls=(finish_call("giving up", "aborted"),))
        if len(exchange.history) >= 10:  # the trial is over: this is the request to reflect
            assert exchange.tools  # still defined: providers reject tool results without them
            return Reply(text=lesson)
        return Reply(calls=(("book_meeting", {}),))

    fake = FakeModelServer(policy)
    async with serve(fake.app) as url:
        result = await execute(
            config(
                tmp_path,
                models=("openai:fake-1",),
                base_url=f"{url}/v1",
                trials=2,
                limit=1,
                faults=("lambda=0.0",),
                architecture="reflexion",
            )
        )
    first, second = sorted(result.rows, key=lambda r: r.trial)
    end = Trace.from_lines(first.trace.splitlines()).end
    assert isinstance(end, EpisodeEndEvent) and end.stop_rule == "too_many_tool_errors"
    (written,) = reflections(first)
    assert written.role == "written" and written.text == lesson and written.output_tokens > 0
    assert [(m.role, m.text) for m in reflections(second)[:1]] == [("memory", lesson)]
    # What the model read at the start of trial 2: the task, then its own reflection.
    assert any(lesson in e.prompt and "You have attempted this same task" in e.prompt for e in fake.exchanges)
    assert first.input_tokens > sum(
        e.input_tokens for e in Trace.from_lines(first.trace.splitlines()).events if hasattr(e, "turn")
    )  # the reflection's tokens are counted in the episode's
