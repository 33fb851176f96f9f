"""``run --agent-cmd``: the contract, and agent programs that crash, hang, print garbage or leak a key.

The agent program here is tests/fakes/stdlib_agent.py (standard library only: it starts in ~50 ms),
driving the model server through the fault gateway over plain HTTP and MCP through the stdio bridge.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from fakes.model_server import serve
from harness_support import (
    FlakyUpstream,
    decisions,
    end_of,
    first_tasks,
    ledger,
    run_agent,
    stdlib_agent,
    trace_of,
)
from llm_support import serving
from servers import child_env, cli_command, free_port

from mcp_resili.client.runner import execute, load_run_config, local_executor
from mcp_resili.harness import contract, session_factory
from mcp_resili.modelserver import ModelServer
from mcp_resili.registry.loader import get_suite

pytestmark = pytest.mark.anyio
SECRET = "sk-test-0123456789abcdef-never-stored"


async def test_the_program_gets_the_prompt_and_every_contract_name_and_plays_over_the_stdio_bridge(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # offline: the program gets a placeholder instead
    dump = tmp_path / "env.json"
    result = await run_agent(tmp_path, stdlib_agent("--env-dump", str(dump)))
    env = json.loads(dump.read_text())
    (row,) = result.rows
    suite = get_suite("resilibench")
    prompt = suite.prompt(suite.task(row.task_id))
    assert env["stdin"] == prompt == env[contract.TASK_PROMPT]
    assert set(contract.CONTRACT) <= set(env) and all(env[name] for name in contract.CONTRACT)
    assert env[contract.OPENAI_API_KEY] == env[contract.ANTHROPIC_API_KEY] == contract.PLACEHOLDER_KEY
    assert env[contract.MODEL] == "scripted:oracle" and env[contract.EPISODE] == row.episode_id
    assert env[contract.OPENAI_BASE_URL] == env[contract.ANTHROPIC_BASE_URL] + "/v1"
    assert env[contract.MCP_URL] in env[contract.MCP_COMMAND] and "/episodes/" in env[contract.MCP_URL]
    # The program played the task through the bridge: the oracle behind the gateway completed it.
    assert (row.termination, row.label) == ("completed", "full")
    trace = trace_of(row)
    assert trace.header.architecture == "agent-cmd" and trace.finish is not None
    assert [e.ordinal for e in ledger(row)] == list(range(len(ledger(row))))
    assert row.score is not None and row.score["components"]["llm_calls"] == len(ledger(row)) > 1
    # The episode's URLs end with it (the run is over: nothing listens there any more).
    async with httpx2.AsyncClient() as client:
        for url in (env[contract.MCP_URL], env[contract.OPENAI_BASE_URL] + "/chat/completions"):
            with pytest.raises(httpx2.ConnectError):
                await client.post(url, json={})


async def test_a_crashing_program_is_a_scored_harness_failure_and_every_episode_is_stored(tmp_path):
    result = await run_agent(tmp_path, stdlib_agent("--crash-after", "2"), tasks=first_tasks(2))
    assert len(result.rows) == 2
    for row in result.rows:
        end = end_of(row)
        assert row.termination == "harness_failure" and row.label is not None  # scored: the agent's
        assert "exited with status 3" in end.detail and "RuntimeError: crashed on purpose" in end.detail
        assert len(ledger(row)) == 2 and row.score["components"]["llm_harness_failure"] is True


async def test_a_hanging_program_ends_at_the_time_limit_with_everything_it_started(tmp_path):
    pidfile = tmp_path / "child.pid"
    result = await run_agent(tmp_path, stdlib_agent("--hang", str(pidfile)), time_limit=1.0)
    (row,) = result.rows
    assert row.termination == "time_limit" and row.label is not None
    child = int(pidfile.read_text())
    status = Path(f"/proc/{child}/status")
    # The child the program started went with its process group (gone, or a zombie nobody reaps).
    assert not status.exists() or "\nState:\tZ" in status.read_text()


async def test_a_program_that_prints_garbage_is_the_agents_episode_with_a_short_detail(tmp_path):
    result = await run_agent(tmp_path, stdlib_agent("--garbage"))
    (row,) = result.rows
    end = end_of(row)
    assert row.termination == "agent_stopped" and row.label == "failure"
    assert "\n" not in end.detail and len(end.detail) < 500
    assert ledger(row) == []


async def test_a_program_that_cannot_start_is_a_scored_harness_failure(tmp_path):
    script = tmp_path / "agent.sh"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    result = await run_agent(tmp_path, str(script))
    (row,) = result.rows
    assert row.termination == "harness_failure" and "could not be started" in end_of(row).detail


async def test_an_injected_fault_the_program_does_not_survive_is_its_failure_and_one_it_retries_is_not(
    tmp_path,
):
    rules = tmp_path / "faults.toml"
    rules.write_text('[[rules]]\ncalls = [2]\nfault = { type = "server_error", status = 500 }\n')
    fragile = await run_agent(tmp_path, stdlib_agent(), llm_faults=str(rules), db=tmp_path / "a.db")
    sturdy = await run_agent(
        tmp_path, stdlib_agent("--retries", "1"), llm_faults=str(rules), db=tmp_path / "b.db"
    )
    (failed,), (survived,) = fragile.rows, sturdy.rows
    assert failed.termination == "harness_failure" and failed.label is not None
    components = failed.score["components"]
    assert components["llm_server_error_met"] == 1 and components["llm_server_error_survived"] == 0
    assert components["llm_failed_after"] == "server_error"
    assert decisions(failed) == [(0, None, 200), (1, "server_error", 500)]
    assert (survived.termination, survived.label) == ("completed", "full")
    assert survived.score["components"]["llm_server_error_survived"] == 1
    assert trace_of(survived).header.model_fault_plan["rules"][0]["fault"]["status"] == 500


async def test_a_model_api_failure_nobody_injected_is_an_infrastructure_error_never_scored(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    suite = get_suite("resilibench")
    upstream = FlakyUpstream(ModelServer({suite.name: suite}).app, {2: 503, 5: 400})
    async with serve(upstream) as url:
        broken = await run_agent(
            tmp_path, stdlib_agent(), models=("openai:scripted:oracle",), base_url=f"{url}/v1"
        )
    (row,) = broken.rows
    assert row.termination == "infrastructure_error" and row.label is None and row.score is None
    assert "nobody injecting it" in end_of(row).detail
    # With a real upstream the program was given the runner's own key (sent upstream, never stored).
    assert upstream.keys[0] == f"Bearer {SECRET}"
    assert SECRET not in Path(tmp_path / "runs.db").read_bytes().decode("latin-1")


async def test_the_programs_own_bad_request_is_its_failure(tmp_path):
    suite = get_suite("resilibench")
    upstream = FlakyUpstream(ModelServer({suite.name: suite}).app, {2: 400})
    async with serve(upstream) as url:
        result = await run_agent(
            tmp_path, stdlib_agent(), models=("openai:scripted:oracle",), base_url=f"{url}/v1"
        )
    (row,) = result.rows
    assert row.termination == "harness_failure" and row.label is not None


async def test_a_key_the_program_prints_is_redacted_and_never_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    suite = get_suite("resilibench")
    async with serve(ModelServer({suite.name: suite}).app) as url:
        result = await run_agent(
            tmp_path,
            stdlib_agent("--secret-stderr"),
            models=("openai:scripted:oracle",),
            base_url=f"{url}/v1",
        )
    (row,) = result.rows
    assert contract.REDACTED in end_of(row).detail and SECRET not in row.trace
    stored = sqlite3.connect(tmp_path / "runs.db").execute("select * from runs").fetchall()
    assert SECRET not in repr(stored)


async def test_the_token_budget_ends_the_program_after_the_call_that_crosses_it(tmp_path):
    result = await run_agent(tmp_path, stdlib_agent(), max_tokens=1000)
    (row,) = result.rows
    assert row.termination == "max_tokens" and row.label is not None
    assert len(ledger(row)) == 1 and row.input_tokens + row.output_tokens >= 1000


async def test_a_resume_plays_only_the_missing_episode_and_plays_it_the_same(tmp_path):
    first = await run_agent(tmp_path, stdlib_agent(), tasks=first_tasks(2), llm_faults="llm:heavy", seed=3)
    gone = first.rows[0]
    db = sqlite3.connect(tmp_path / "runs.db")
    with db:
        db.execute("delete from episodes where episode_id = ?", (gone.episode_id,))
    db.close()
    config = load_run_config(tmp_path / "runs.db", first.run_id)
    resumed = await execute(
        config, resume=first.run_id, executor=local_executor(session_factory=session_factory)
    )
    assert resumed.resumed == 1 and len(resumed.rows) == 2
    replayed = next(r for r in resumed.rows if r.episode_id == gone.episode_id)
    assert (replayed.label, replayed.value, replayed.termination) == (
        gone.label,
        gone.value,
        gone.termination,
    )
    assert decisions(replayed) == decisions(gone)


def test_the_bridge_refuses_a_url_it_cannot_relay_in_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "mcp_resili.harness.bridge", "ftp://x/mcp"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "http://" in proc.stderr


async def test_the_bridge_answers_every_request_when_the_server_is_gone():
    with anyio.fail_after(60):
        process = await anyio.open_process(
            [sys.executable, "-m", "mcp_resili.harness.bridge", "http://127.0.0.1:9/episodes/x/mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        async with process:
            assert process.stdin is not None and process.stdout is not None
            await process.stdin.send(b'{"jsonrpc":"2.0","id":7,"method":"tools/list"}\nnot json\n')
            await process.stdin.aclose()
            out = b""
            async for chunk in process.stdout:
                out += chunk
    answers = [json.loads(line) for line in out.decode().splitlines()]
    by_id = {a["id"]: a["error"] for a in answers}
    assert set(by_id) == {7, None} and "could not be reached" in by_id[7]["message"]
    assert by_id[None]["code"] == -32700
    assert os.environ.get("MCP_RESILI_MCP_URL") is None  # the test process never had the contract


async def test_a_bad_upstream_is_one_line_and_exit_2_before_any_agent_program_starts(tmp_path):
    async def html(scope, receive, send):
        if scope["type"] != "http":
            return
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]}
        )
        await send({"type": "http.response.body", "body": b"<html>not a model API</html>"})

    suite = get_suite("resilibench")
    locked = ModelServer({suite.name: suite}, token="k" * 20)
    marker = tmp_path / "started"
    agent = stdlib_agent("--env-dump", str(marker))
    results: dict[str, tuple[int, str]] = {}
    async with serving(html) as page, serving(locked.app) as keyed:

        async def attempt(name: str, base_url: str) -> None:
            args = ("run", "--agent-cmd", agent, "--model", "openai:scripted:oracle", "--base-url", base_url)
            args += ("--limit", "1", "--trials", "1", "--db", str(tmp_path / f"{name}.db"))
            with anyio.fail_after(120):
                done = await anyio.run_process(
                    cli_command(*args), env=child_env(OPENAI_API_KEY="sk-wrong-key-123456"), check=False
                )
            results[name] = (done.returncode, done.stderr.decode())

        async with anyio.create_task_group() as group:
            group.start_soon(attempt, "unreachable", f"http://127.0.0.1:{free_port()}/v1")
            group.start_soon(attempt, "wrong format", f"{page}/v1")
            group.start_soon(attempt, "refused", f"{keyed}/v1")
    for name, (status, stderr) in results.items():
        assert status == 2 and stderr.count("\n") == 1 and stderr.startswith("mcp-resili: error: "), (
            name,
            stderr,
        )
    assert "is unreachable" in results["unreachable"][1]
    assert "does not look like" in results["wrong format"][1]
    assert "(HTTP 401)" in results["refused"][1] and "sk-wrong-key" not in results["refused"][1]
    assert not marker.exists()  # no agent program was started


def test_reports_and_exports_carry_an_agent_programs_episodes(tmp_path):
    async def play() -> None:
        await run_agent(tmp_path, stdlib_agent("--crash-after", "1"), llm_faults="llm:light")

    anyio.run(play)
    db = str(tmp_path / "runs.db")
    report = subprocess.run(
        cli_command("report", "--db", db, "--json"),
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    sections = json.loads(report.stdout)["sections"]
    (cell,) = sections["model_coping"]["cells"].values()
    assert cell["harness_failures"] == 1 and cell["architecture"] == "agent-cmd"
    out = tmp_path / "episodes.csv"
    exported = subprocess.run(
        cli_command("export", "--db", db, "--format", "csv", "--out", str(out)),
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    header, row = out.read_text().splitlines()[:2]
    assert "score_llm_harness_failure" in header and "harness_failure" in row


async def test_sigterm_stops_a_run_in_one_line_and_ends_the_agent_programs_it_started(tmp_path):
    pidfile = tmp_path / "child.pid"
    become_run = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.executable, [sys.executable, '-m', 'mcp_resili', *sys.argv[1:]])"
    )
    args = ["run", "--agent-cmd", stdlib_agent("--hang", str(pidfile)), "--task", first_tasks(1)[0]]
    args += ["--trials", "1", "--db", str(tmp_path / "runs.db")]
    async with await anyio.open_process([sys.executable, "-c", become_run, *args], env=child_env()) as run:
        with anyio.fail_after(120):
            while not pidfile.exists() or not pidfile.read_text():
                await anyio.sleep(0.02)  # polling another process's file; nothing is timed
        run.send_signal(signal.SIGTERM)
        assert run.stderr is not None
        with anyio.fail_after(120):
            stderr = b"".join([chunk async for chunk in run.stderr]).decode()
            status = await run.wait()
    assert status == 143 and stderr.count("\n") == 1 and "stopped by SIGTERM" in stderr, stderr
    child = Path(f"/proc/{int(pidfile.read_text())}/status")
    assert not child.exists() or "\nState:\tZ" in child.read_text()
