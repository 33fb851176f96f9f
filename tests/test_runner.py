"""The runner (`execute`): scripted agents under faults, seeds and concurrency, the store, bad
configurations, dead servers and providers. Played on the tiny suite, handed down to `execute`."""

import json
from dataclasses import dataclass, replace

import pytest
from servers import start_http_server
from tiny_suite import suite as tiny_suite

from mcp_resili.agents.model import InfrastructureError, ModelRequest, ModelResponse
from mcp_resili.client.runner import RunConfig, RunConfigError, execute
from mcp_resili.report import summarize
from mcp_resili.store import Store
from mcp_resili.trace import Trace

pytestmark = pytest.mark.anyio

TINY = tiny_suite()


def tiny(**fields):
    """A run of the tiny suite (its six tasks unless ``fields`` say otherwise)."""
    return RunConfig(suite="tiny", **fields)


def ledger(rows):
    """(episode cell, seq, tool, fault) for every tool call of every episode, cell = model/task/trial."""
    out = []
    for row in rows:
        trace = Trace.from_lines(row.trace.splitlines())
        for call in trace.tool_calls:
            fault = call.fault.model_dump() if call.fault else None
            out.append((row.model, row.task_id, row.trial, call.seq, call.tool, json.dumps(fault)))
    return sorted(out)


async def test_oracle_beats_naive_under_the_suites_own_faults(tmp_path):
    result = await execute(tiny(db=tmp_path / "r.db", trials=2), suite=TINY)  # faults: its default, tiny
    assert {r.faults for r in result.rows} == {"tiny"} and len(result.rows) == 24
    by_model = {s.model: s for s in summarize(result.rows)}
    oracle, naive = by_model["scripted:oracle"], by_model["scripted:naive"]
    assert oracle.levels["full"].value > naive.levels["full"].value + 0.3
    assert oracle.infrastructure_errors == naive.infrastructure_errors == 0


async def test_without_faults_both_scripted_agents_fully_succeed(tmp_path):
    result = await execute(tiny(db=tmp_path / "r.db", trials=1, faults=("none",)), suite=TINY)
    assert len(result.rows) == 12 and {r.label for r in result.rows} == {"full"}


async def test_same_seed_gives_identical_ledger_and_scores_at_concurrency_1_and_32(tmp_path):
    base = dict(trials=2, seed=5)
    one = await execute(tiny(db=tmp_path / "a.db", concurrency=1, **base), suite=TINY)
    many = await execute(tiny(db=tmp_path / "b.db", concurrency=32, **base), suite=TINY)
    assert ledger(one.rows) == ledger(many.rows)
    assert any(fault != "null" for *_, fault in ledger(one.rows))
    scores = lambda rows: sorted((r.model, r.task_id, r.trial, r.label, json.dumps(r.score)) for r in rows)  # noqa: E731
    assert scores(one.rows) == scores(many.rows)
    other = await execute(tiny(db=tmp_path / "c.db", concurrency=8, trials=2, seed=6), suite=TINY)
    assert ledger(other.rows) != ledger(one.rows)


async def test_every_model_sees_the_same_fault_draws_for_a_task(tmp_path):
    result = await execute(tiny(db=tmp_path / "r.db", trials=1, faults=("tiny:p=0.4",)), suite=TINY)
    rolls: dict = {}
    for row in result.rows:
        for call in Trace.from_lines(row.trace.splitlines()).tool_calls:
            if call.decision is not None:
                rolls.setdefault((row.task_id, call.tool, call.decision.ordinal), set()).add(
                    call.decision.roll
                )
    assert rolls and all(len(r) == 1 for r in rolls.values())


@dataclass(frozen=True)
class BrokenProvider:
    name: str = "scripted:oracle"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        raise InfrastructureError("HTTP 503 from provider after 3 attempts")


async def test_provider_failure_is_an_infrastructure_error_not_an_agent_failure(tmp_path, monkeypatch):
    monkeypatch.setattr("mcp_resili.client.runner.create_model", lambda spec, **_: BrokenProvider())
    result = await execute(
        tiny(db=tmp_path / "r.db", trials=1, limit=3, models=("scripted:oracle",)), suite=TINY
    )
    assert {r.termination for r in result.rows} == {"infrastructure_error"}
    assert all(r.label is None and r.score is None for r in result.rows)
    (summary,) = summarize(result.rows)
    assert summary.infrastructure_errors == 3 and summary.scored == 0
    assert summary.levels["failure"].count == 0


async def test_runs_are_stored_and_readable(tmp_path):
    db = tmp_path / "r.db"
    result = await execute(tiny(db=db, trials=1, limit=2), suite=TINY)
    store = Store(db)
    try:
        assert store.latest_run() == result.run_id
        rows = store.episodes(result.run_id)
    finally:
        store.close()
    assert len(rows) == 4
    trace = Trace.from_lines(rows[0].trace.splitlines())
    assert trace.header.seed == 0 and trace.header.model == rows[0].model and trace.end is not None
    assert trace.header.suite == "tiny" and {r.task_id for r in rows} == {"tiny-1", "tiny-2"}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (tiny(trials=0), "trials"),
        (tiny(models=("gpt:nope",)), "unknown model"),
        (tiny(faults=("chaos",)), "fault spec"),
        (tiny(faults=("resilibench:base=2",)), "base_success"),  # another suite's SPEC, checked too
        (tiny(faults=("toolmaze:P1",)), "toolmaze"),  # a plan bound to another suite's tasks
        (tiny(tasks=("nope",)), "unknown task"),
        (tiny(server="mcp-resili serve", faults=("none",)), "--server"),
        (tiny(variant="nope"), "variant"),
        # Review finding: a suite's own agent on another suite crashed mid-run, after storing a part.
        (tiny(models=("scripted:oracle", "scripted:retry")), "agent of the toolmaze suite"),
    ],
)
async def test_bad_run_configs_fail_before_anything_runs(tmp_path, config, message):
    # No suite handed down: `execute` finds "tiny" by name, through its entry point.
    db = tmp_path / "r.db"
    with pytest.raises((RunConfigError, ValueError, KeyError), match=message):
        await execute(replace(config, db=db))
    assert not db.exists()


async def test_an_http_server_killed_mid_run_gives_infrastructure_errors_and_stores_every_episode(tmp_path):
    """Review finding: over Streamable HTTP the SDK client let the broken POST escape its task group,
    ending the whole run in a traceback with nothing stored. Now only the request fails, as over stdio.

    The model kills the server (SIGKILL, reaped) when it is first asked for a turn, so every call of
    the run meets a dead server: deterministic, no timing.
    """
    from mcp_resili.client.executor import LocalExecutor
    from mcp_resili.client.providers import create_model

    server = await start_http_server("--suite", "tiny", "--faults", "none", workdir=tmp_path)

    class KillsTheServer:
        def __init__(self, inner):
            self.inner = inner

        @property
        def name(self):
            return self.inner.name

        async def generate(self, request):
            if server.process.poll() is None:
                server.process.kill()
                server.process.wait()
            return await self.inner.generate(request)

    try:
        result = await execute(
            tiny(db=tmp_path / "r.db", server=server.url, models=("scripted:oracle",), trials=2, limit=2),
            suite=TINY,
            executor=LocalExecutor(
                model_factory=lambda spec, **options: KillsTheServer(create_model(spec, **options))
            ),
        )
    finally:
        server.stop()
    assert len(result.rows) == 4
    assert {(r.termination, r.label, r.score) for r in result.rows} == {("infrastructure_error", None, None)}
    end = Trace.from_lines(result.rows[0].trace.splitlines()).end
    assert end is not None and "MCP server gone during" in end.detail and "Connection closed" in end.detail


@pytest.mark.parametrize("through_proxy", [False, True], ids=["direct", "through our proxy"])
async def test_a_server_that_dies_mid_run_gives_infrastructure_errors_not_agent_failures(
    tmp_path, through_proxy
):
    """The server exits on the first tool call: every later call meets a closed connection.

    A closed connection that a ping confirms is the harness's trouble; the agent was not measured.
    Behind our proxy the calls get ``UPSTREAM_CLOSED`` error results, which mean the same.
    """
    import shlex
    import sys
    from pathlib import Path

    dying = f"{sys.executable} {Path(__file__).parent / 'fakes' / 'dying_server.py'}"
    if through_proxy:
        dying = f"{sys.executable} -m mcp_resili proxy --upstream {shlex.quote(dying)}"
    result = await execute(
        tiny(db=tmp_path / "r.db", server=dying, models=("scripted:naive",), trials=2, limit=2), suite=TINY
    )
    assert len(result.rows) == 4
    assert {(r.termination, r.label, r.score) for r in result.rows} == {("infrastructure_error", None, None)}
    end = Trace.from_lines(result.rows[0].trace.splitlines()).end
    assert end is not None and "MCP server gone during" in end.detail
    (summary,) = summarize(result.rows)
    assert (summary.scored, summary.infrastructure_errors) == (0, 4)
