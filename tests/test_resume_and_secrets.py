"""Runs as a user starts them (``python -m mcp_resili run`` subprocesses) against a loopback fake model:
killed, stopped and resumed, with no API key written anywhere. They play the tiny suite (tests/tiny_suite),
found by name through the entry point the conftest installed."""

import json
import os
import shlex
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from fakes.model_server import Failure, FakeModelServer, oracle_policy, serve
from servers import signal_mid_run, stored_episodes

from mcp_resili.cli import main
from mcp_resili.client.runner import RunConfig, RunConfigError, execute
from mcp_resili.store import Store
from mcp_resili.trace import Trace

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[1]


def comparable(rows, run_id):
    """Everything about an episode except the run id it was stored under."""
    out = {}
    for row in rows:
        trace = Trace.from_lines(row.trace.replace(run_id, "RUN").splitlines())
        out[row.episode_id.removeprefix(run_id)] = (
            row.termination,
            row.label,
            json.dumps(row.score, sort_keys=True),
            row.input_tokens,
            row.output_tokens,
            [e.model_dump_json() for e in trace.events],
        )
    return out


async def cli(*args, env=None):
    return await anyio.run_process(
        [sys.executable, "-m", "mcp_resili", *args], check=False, env=env, cwd=ROOT
    )


async def test_a_run_killed_with_sigkill_and_resumed_equals_an_uninterrupted_run(tmp_path):
    # The fake answers until 3 episodes have been told to finish, then holds every other request:
    # the run is then certainly mid-way, with episodes in flight, when it is killed.
    fake = FakeModelServer(oracle_policy(), hold_after_finishes=3)
    db = tmp_path / "killed.db"
    async with serve(fake.app) as url:
        matrix = ["--suite", "tiny", "--model", "openai:fake", "--base-url", f"{url}/v1", "--limit", "4"]
        matrix += ["--trials", "2"]
        run_args = [*matrix, "--seed", "7", "--concurrency", "3", "--json"]
        returncode, _ = await signal_mid_run(run_args, db, signal.SIGKILL)
        assert returncode == -signal.SIGKILL
        before = stored_episodes(db)
        assert 3 <= before < 8
        store = Store(db)
        (run_id,) = store.run_ids()
        store.close()

        fake.hold_after_finishes = None
        fake.release.set()
        resumed = await cli("run", "--resume", run_id, "--db", str(db), "--json")
        assert resumed.returncode == 0, resumed.stderr.decode()
        summary = json.loads(resumed.stdout)
        assert summary["run_id"] == run_id and summary["resumed"] == before and summary["episodes"] == 8

        clean = await execute(
            RunConfig(
                suite="tiny",
                db=tmp_path / "clean.db",
                models=("openai:fake",),
                base_url=f"{url}/v1",
                limit=4,
                stratified=True,  # what the command line's --limit draws
                trials=2,
                seed=7,
                concurrency=3,
            )
        )
    store = Store(db)
    rows = store.episodes(run_id)
    store.close()
    assert len(rows) == 8 and len({r.episode_id for r in rows}) == 8
    assert comparable(rows, run_id) == comparable(clean.rows, clean.run_id)


@pytest.mark.parametrize(
    ("signum", "status", "how"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "stopped by SIGTERM")],
    ids=["ctrl-c", "sigterm"],
)
async def test_a_run_stopped_by_a_signal_says_so_in_one_line_with_the_command_that_resumes_only_the_rest(
    tmp_path, signum, status, how
):
    # Ctrl-C, and what a CI job's timeout or a scheduler sends: the run stops the same way.
    fake = FakeModelServer(oracle_policy(), hold_after_finishes=3)
    db = tmp_path / "stopped.db"
    async with serve(fake.app) as url:
        matrix = ["--suite", "tiny", "--model", "openai:fake", "--base-url", f"{url}/v1", "--limit", "4"]
        matrix += ["--trials", "2"]
        returncode, stderr = await signal_mid_run([*matrix, "--concurrency", "3"], db, signum)
        assert returncode == status
        store = Store(db)
        (run_id,) = store.run_ids()
        # The episodes cut short were not stored (as infrastructure errors or otherwise).
        rows = store.episodes(run_id)
        store.close()
        assert 3 <= len(rows) < 8 and all(r.label is not None for r in rows)
        resume = f"mcp-resili run --resume {run_id} --db {db}"
        last = stderr.splitlines()[-1]
        assert last == f"mcp-resili: {how}; finished episodes are stored (resume: {resume})"
        assert "Traceback" not in stderr

        fake.hold_after_finishes = None
        fake.release.set()
        # The command the line gives, as a user would paste it.
        command = shlex.split(last.partition("(resume: ")[2].removesuffix(")"))
        assert command[:2] == ["mcp-resili", "run"]
        resumed = await cli(*command[1:], "--json")
    assert resumed.returncode == 0, resumed.stderr.decode()
    summary = json.loads(resumed.stdout)
    assert summary["resumed"] == len(rows) and summary["episodes"] == 8


def test_resume_refuses_matrix_options_and_unknown_runs(tmp_path, capsys):
    anyio.run(_resume_refusals, tmp_path, capsys)


async def _resume_refusals(tmp_path, capsys):
    db = tmp_path / "r.db"
    await execute(RunConfig(suite="tiny", db=db, trials=1, limit=1, models=("scripted:oracle",)))
    store = Store(db)
    (run_id,) = store.run_ids()
    store.close()
    assert main(["run", "--resume", run_id, "--db", str(db), "--trials", "5"]) == 2
    assert "--trials" in capsys.readouterr().err
    # Review finding: --time-scale was silently ignored on resume (the stored one was used).
    assert main(["run", "--resume", run_id, "--db", str(db), "--time-scale", "1"]) == 2
    assert "drop --time-scale" in capsys.readouterr().err
    assert main(["run", "--resume", "nope", "--db", str(db)]) == 2
    assert run_id in capsys.readouterr().err
    with pytest.raises(RunConfigError, match="trials"):
        await execute(
            RunConfig(suite="tiny", db=db, trials=2, limit=1, models=("scripted:oracle",)), resume=run_id
        )
    again = await execute(
        RunConfig(suite="tiny", db=db, trials=1, limit=1, models=("scripted:oracle",)), resume=run_id
    )
    assert again.resumed == 1 and len(again.rows) == 1
    assert stored_episodes(db) == 1


@dataclass(frozen=True)
class Keys:
    anthropic: str = "sk-ant-api03-SECRET-anthropic-0123456789abcdef"
    openai: str = "sk-proj-SECRET-openai-fedcba9876543210"


async def test_no_api_key_reaches_the_database_traces_logs_or_reports(tmp_path):
    keys = Keys()
    # Some requests fail (401, 429, 500), so error paths write their messages too.
    statuses = {2: 429, 5: 500, 9: 401}
    fake = FakeModelServer(
        oracle_policy(), failures=lambda n: Failure(statuses[n]) if n in statuses else None
    )
    work = tmp_path / "work"
    work.mkdir()
    async with serve(fake.app) as url:
        env = {
            **os.environ,
            "ANTHROPIC_API_KEY": keys.anthropic,
            "OPENAI_API_KEY": keys.openai,
            # The SDKs' own variables: each provider at its endpoint, no --base-url needed.
            "ANTHROPIC_BASE_URL": url,
            "OPENAI_BASE_URL": f"{url}/v1",
        }
        common = ["--suite", "tiny", "--model", "anthropic:fake", "--model", "openai:fake", "--limit", "2"]
        common += ["--trials", "1"]
        runs = [
            await cli("run", *common, "--db", str(work / "r.db"), env=env),
        ]
    assert all(r.returncode == 0 for r in runs), [r.stderr.decode() for r in runs]
    assert fake.credentials == {keys.anthropic, keys.openai}  # the keys were really used
    written = [p for p in work.rglob("*") if p.is_file()]
    assert any(p.name == "r.db" for p in written)
    for blob in [p.read_bytes() for p in written] + [r.stdout + r.stderr for r in runs]:
        for key in (keys.anthropic, keys.openai, "SECRET"):
            assert key.encode() not in blob


def stored_comparable(db, run_id):
    store = Store(db)
    try:
        return comparable(store.episodes(run_id), run_id)
    finally:
        store.close()


def test_a_resume_plays_the_fault_plan_the_run_started_with_not_the_file_as_it_is_now(
    tmp_path, monkeypatch, capsys
):
    """The fault file is edited, then deleted, between the start and the resume, run from elsewhere."""
    import sqlite3

    start, elsewhere = tmp_path / "start", tmp_path / "elsewhere"
    start.mkdir(), elsewhere.mkdir()
    rules = {"kind": "rules", "rules": [{"tool": "*", "calls": [1], "fault": {"type": "connection_reset"}}]}
    (start / "faults.json").write_text(json.dumps(rules))
    db = tmp_path / "r.db"
    monkeypatch.chdir(start)  # the spec is a relative path, as users type it
    argv = [
        "run",
        "--suite",
        "tiny",
        "--db",
        str(db),
        "--faults",
        "faults.json",
        "--limit",
        "4",
        "--trials",
        "2",
    ]
    argv.append("--json")
    assert main(argv) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    whole = stored_comparable(db, run_id)
    assert len(whole) == 16  # 2 models × 4 tasks × 2 trials
    # Interrupted: half the episodes never got stored. Then the file changes, then it goes.
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM episodes WHERE rowid % 2 = 0")
    rules["rules"][0]["calls"] = [2]  # another plan: the second call of each tool fails instead
    (start / "faults.json").write_text(json.dumps(rules))
    monkeypatch.chdir(elsewhere)
    assert main(["run", "--resume", run_id, "--db", str(db), "--json"]) == 0
    capsys.readouterr()
    assert stored_comparable(db, run_id) == whole
    (start / "faults.json").unlink()
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM episodes WHERE rowid % 3 = 0")
    assert main(["run", "--resume", run_id, "--db", str(db), "--json"]) == 0
    assert stored_comparable(db, run_id) == whole


def test_a_run_stored_before_runs_kept_their_plans_resumes_with_the_plan_its_traces_recorded(
    tmp_path, monkeypatch, capsys
):
    import sqlite3

    monkeypatch.chdir(tmp_path)
    rules = {"kind": "rules", "rules": [{"tool": "*", "calls": [1], "fault": {"type": "connection_reset"}}]}
    (tmp_path / "faults.json").write_text(json.dumps(rules))
    db = tmp_path / "r.db"
    argv = [
        "run",
        "--suite",
        "tiny",
        "--db",
        str(db),
        "--faults",
        "faults.json",
        "--limit",
        "3",
        "--trials",
        "2",
    ]
    argv.append("--json")
    assert main(argv) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    whole = stored_comparable(db, run_id)
    with sqlite3.connect(db) as conn:  # what an older revision stored: no plans in the config
        conn.execute("UPDATE runs SET config = json_remove(config, '$.fault_plans')")
        conn.execute("DELETE FROM episodes WHERE rowid % 2 = 0")
    rules["rules"][0]["calls"] = [2]  # the file changed since
    (tmp_path / "faults.json").write_text(json.dumps(rules))
    assert main(["run", "--resume", run_id, "--db", str(db), "--json"]) == 0
    assert stored_comparable(db, run_id) == whole
