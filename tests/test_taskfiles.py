"""Task files: the format and its one-line problems, pure verdicts, step faults, and (with the real
servers, built once per machine in a cached directory) `tasks check`, runs, replays and isolation."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from conftest import REPO_ROOT, exclusive

from mcp_resili.cli.run import usable_cpus
from mcp_resili.client.runner import load_run_config
from mcp_resili.faults.base import CallContext, ToolOutcome
from mcp_resili.store import Store
from mcp_resili.suites.realmcp import task_directory
from mcp_resili.taskfiles.faults import CorruptResult, StepFaultPlan, corrupt_text
from mcp_resili.taskfiles.load import load_directory
from mcp_resili.taskfiles.model import FileTask
from mcp_resili.taskfiles.verify import score
from mcp_resili.tools import ToolSpec
from mcp_resili.trace import EndStateEvent, FinishEvent, ToolCallEvent, Trace, TraceHeader

EXAMPLES = REPO_ROOT / "examples" / "tasks"
REALMCP_SUITE = task_directory() / "suite.toml"
CLI = [sys.executable, "-m", "mcp_resili"]


# --- the format, offline ----------------------------------------------------------------------------


def test_the_shipped_task_files_load_with_the_coverage_the_suite_promises():
    examples = load_directory(EXAMPLES)
    assert sorted(t.id for t in examples.tasks) == [
        "count_shipped",
        "load_customers",
        "prune_discontinued",
        "stock_report",
        "summary_keep_archive",
    ]
    assert set(examples.servers) == {"fs", "db"}
    realmcp = load_directory(task_directory())
    tasks = realmcp.tasks
    assert len(tasks) >= 150
    used = {name for t in tasks for name in t.servers}
    assert len(used) >= 8, used
    assert {t.metadata["level"] for t in tasks} == {"C1", "C2", "C3", "C4"}
    assert sum(len(t.servers) > 1 for t in tasks) >= 50
    assert sum("trap" in t.metadata["tags"] for t in tasks) >= 20
    # ToolMaze-style alternative paths across two servers.
    assert any(
        {c.tool.split(".")[0] for calls in t.alternatives.values() for c in calls}
        - {s.tool.split(".")[0] for s in t.workflow.steps}
        for t in tasks
    )
    for task in tasks:  # pinned servers only
        for server in task.servers.values():
            assert server.npm or server.pypi, task.id


def _suite_dir(tmp_path: Path, tasks: dict[str, str], suite: str = "") -> Path:
    root = tmp_path / "tasks"
    root.mkdir()
    (root / "suite.toml").write_text(suite or _FS_SUITE, encoding="utf-8")
    for name, text in tasks.items():
        (root / f"{name}.toml").write_text(text, encoding="utf-8")
    return root


_FS_SUITE = f"""
npm_lock = "{(REPO_ROOT / "mcp_resili/suites/realmcp/lock/npm").as_posix()}"
[servers.fs]
npm = "@modelcontextprotocol/server-filesystem@2026.8.31"
command = "mcp-server-filesystem"
args = ["{{workspace}}"]
"""

_GOOD = """
uses = ["fs"]
prompt = "Write hello.txt saying hi."
[[gold.steps]]
id = "write"
tool = "fs.write_file"
arguments = { path = "hello.txt", content = "hi" }
[[verify]]
kind = "file"
path = "hello.txt"
equals = "hi"
"""


def test_bad_task_files_get_one_line_per_problem_and_nothing_runs(tmp_path):
    root = _suite_dir(
        tmp_path,
        {
            "not_toml": "uses = [",
            "unknown_key": _GOOD + "\nsurprise = 1\n",
            "undefined_server": _GOOD.replace('uses = ["fs"]', 'uses = ["fs", "ghost"]'),
            "bare_tool": _GOOD.replace('tool = "fs.write_file"', 'tool = "write_file"'),
            "unknown_step": _GOOD.replace('content = "hi"', 'content = { source = "step", step = "nope" }'),
            "escaping_path": _GOOD.replace('path = "hello.txt"\nequals', 'path = "../../etc/passwd"\nequals'),
            "no_verifier": _GOOD.split("[[verify]]")[0],
            "bad_regex": _GOOD.replace('equals = "hi"', 'matches = "(unclosed"'),
        },
        _FS_SUITE + '\n[servers.loose]\nnpm = "some-server@^1.2"\ncommand = "x"\n',
    )
    proc = subprocess.run([*CLI, "tasks", "check", str(root)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert all(line.startswith("mcp-resili: error: ") for line in lines), lines
    assert "Traceback" not in proc.stderr
    expected = {
        "suite.toml": "servers.loose.npm",
        "not_toml.toml": "not valid TOML",
        "unknown_key.toml": "surprise",
        "undefined_server.toml": "server 'ghost' is defined neither here nor in suite.toml",
        "bare_tool.toml": "is not namespaced",
        "unknown_step.toml": "binds step 'nope', which is not an earlier step",
        "escaping_path.toml": "may not leave the workspace",
        "no_verifier.toml": "verify",
        "bad_regex.toml": "not a regular expression",
    }
    for file, words in expected.items():
        assert any(file in line and words in line for line in lines), (file, words, lines)


def _trace(task: FileTask, events: list) -> Trace:
    header = TraceHeader(
        suite="s", task=task.id, episode="e", seed=0, fault_plan={"kind": "none"}, fault_key="k"
    )
    return Trace(header=header, events=tuple(events))


def _call(seq: int, tool: str, arguments: dict, error: bool = False) -> ToolCallEvent:
    return ToolCallEvent(episode="e", seq=seq, tool=tool, arguments=arguments, is_error=error, result={})


def test_a_prepare_command_runs_before_the_server_starts_and_a_failing_one_is_one_line(tmp_path):
    from mcp_resili.taskfiles.install import InstallError, server_argv
    from mcp_resili.taskfiles.model import ServerDef

    marker = tmp_path / "prepared"
    writes = f"import sys; open({str(marker)!r}, 'w').write(sys.executable); print('npm noise')"
    server = ServerDef(command="my-server", args=("--x",), prepare=("{python}", "-c", writes))
    assert server_argv("mine", server) == ["my-server", "--x"]
    assert marker.read_text() == sys.executable  # `{python}` is the server's Python: ours here
    failing = ServerDef(command="my-server", prepare=("{python}", "-c", "raise SystemExit('ERROR no node')"))
    with pytest.raises(InstallError) as refused:
        server_argv("mine", failing)
    assert "\n" not in str(refused.value) and "server 'mine'" in str(refused.value), refused.value
    assert "ERROR no node" in str(refused.value)
    with pytest.raises(ValueError, match="takes no prepare"):
        ServerDef(url="http://127.0.0.1:1/mcp", prepare=("true",))


def test_a_servers_error_names_the_agents_relative_paths_whichever_slot_the_episode_ran_in(tmp_path):
    from mcp_resili.taskfiles.environment import Slot, _relative_to_slot

    said = []
    for index in (3, 7):
        slot = Slot(index, tmp_path / f"run{index}" / f"slot{index}", site=None)  # type: ignore[arg-type]
        message = (
            f"ENOENT: no such file or directory, open '{slot.workspace}/exports/wonka.csv'; "
            f"allowed: {slot.workspace}; memory at {slot.state}/graph.json"
        )
        said.append(_relative_to_slot(message, slot))
    expected = (
        "ENOENT: no such file or directory, open 'exports/wonka.csv'; allowed: .; memory at state/graph.json"
    )
    assert said == [expected, expected]


def test_verdicts_are_pure_and_need_an_observed_end_state_and_the_reads():
    task = next(t for t in load_directory(EXAMPLES).tasks if t.id == "summary_keep_archive")
    archive = next(f.content for f in task.fixture.files if f.path == "notes/2025.txt")
    good_state = EndStateEvent(
        episode="e",
        seq=9,
        observations={
            "0": {"exists": True, "content": "total: 750\n"},
            "1": {"exists": True, "content": archive},
        },
    )
    read = _call(1, "fs.read_text_file", {"path": "notes/2026-q1.txt"})
    write = _call(2, "fs.write_file", {"path": "notes/summary.txt", "content": "total: 750\n"})
    assert score(task, _trace(task, [read, write, good_state])).label == "full"
    # The blind writer: the same end state without the read (or the read after the write) fails.
    blind = score(task, _trace(task, [write, good_state]))
    assert blind.label == "partial" and blind.components["read_the_quarter"] is False
    assert score(task, _trace(task, [write, read, good_state])).components["read_the_quarter"] is False
    # A read that failed does not count.
    failed = _call(1, "fs.read_text_file", {"path": "notes/2026-q1.txt"}, error=True)
    assert score(task, _trace(task, [failed, write, good_state])).components["read_the_quarter"] is False
    # The trap: an archive changed by a single character fails.
    touched = EndStateEvent(
        episode="e",
        seq=9,
        observations={**good_state.observations, "1": {"exists": True, "content": archive + " "}},
    )
    assert score(task, _trace(task, [read, write, touched])).components["archive_untouched"] is False
    # Nothing observed (an episode whose end state nobody saw) proves nothing.
    nothing = score(task, _trace(task, [read, write]))
    assert nothing.label == "partial" and "the end state was not observed" in " ".join(nothing.reasons)
    # Answers come from finish, else the last words.
    count = next(t for t in load_directory(EXAMPLES).tasks if t.id == "count_shipped")
    finish = FinishEvent(episode="e", seq=2, status="completed", summary="There are 4.")
    assert (
        score(
            count, _trace(count, [_call(1, "fs.read_text_file", {"path": "data/orders.csv"}), finish])
        ).label
        == "full"
    )
    assert score(count, _trace(count, [finish])).components["read_the_orders"] is False


def _context(task: FileTask, tool: str, ordinal: int, state: dict) -> CallContext:
    spec = ToolSpec.model_construct(
        name=tool, description="", input_schema={"type": "object"}, errors=(), dependencies=()
    )
    return CallContext("k/0", spec, ordinal, (), task=task, state=state)


def test_step_faults_pick_the_first_tool_of_a_step_as_victim_and_never_draw():
    task = next(t for t in load_directory(task_directory()).tasks if t.id == "alt_read-01")
    assert task.tools_of_step("read") == ("fetch.fetch", "fs.read_text_file")
    for mode, hits in (
        ("P1", [True, False, False]),
        ("P2", [True, True, True]),
        ("P3", [True, False, False]),
    ):
        state: dict = {}
        plan = StepFaultPlan(mode=mode)
        decisions = [plan.decide(_context(task, "fs.read_text_file", n, state), None) for n in range(3)]  # type: ignore[arg-type]
        assert [d.fault is not None for d in decisions] == hits, mode
        # The slot is disarmed for the alternative once a victim is chosen: switching works.
        assert plan.decide(_context(task, "fetch.fetch", 0, state), None).fault is None  # type: ignore[arg-type]
    assert StepFaultPlan(mode="NP").decide(_context(task, "fetch.fetch", 0, {}), None).fault is None  # type: ignore[arg-type]
    assert isinstance(
        StepFaultPlan(mode="P4").decide(_context(task, "fetch.fetch", 0, {}), None).fault, CorruptResult
    )  # type: ignore[arg-type]


def test_an_implicit_corruption_is_shaped_from_the_real_result():
    task = next(t for t in load_directory(task_directory()).tasks if t.id == "time_convert-01")
    context = _context(task, "time.convert_time", 0, {})
    structured = {
        "source": {"datetime": "2026-11-28T14:30:00+09:00", "is_dst": False},
        "time_difference": "-3.5h",
    }
    text = json.dumps(structured, indent=2)
    out = CorruptResult().apply(ToolOutcome(structured=structured, text=text), context, None)  # type: ignore[arg-type]
    assert out.structured is not None and out.structured.keys() == structured.keys()
    assert (
        out.structured["source"]["is_dst"] is False
        and out.structured["source"]["datetime"] != structured["source"]["datetime"]
    )
    assert json.loads(out.text or "") == out.structured  # the text says what the structured content says
    assert out.text and out.text.count("\n") == text.count("\n")
    plain = CorruptResult().apply(
        ToolOutcome(structured={"text": "order 1001 shipped, 34 units"}, text="order 1001 shipped, 34 units"),
        context,
        None,
    )  # type: ignore[arg-type]
    assert (
        plain.structured == {"text": "order 1002 shipped, 35 units"}
        and plain.text == "order 1002 shipped, 35 units"
    )
    assert corrupt_text("no digits here\nsecond line") == "no digits here"
    error = ToolOutcome(structured=None, error_code="X", message="m")
    assert CorruptResult().apply(error, context, None) is error  # type: ignore[arg-type]


# --- real servers, built once per machine ---------------------------------------------------------------


@pytest.fixture(scope="session")
def server_cache() -> dict[str, str]:
    """The environment of processes that start real servers: a cache installed once, across sessions."""
    from mcp_resili.taskfiles.install import CACHE_ENV, InstallError, server_argv
    from mcp_resili.taskfiles.suite import locks_of

    cache = Path(os.environ.get("TMPDIR", "/tmp")) / "mcp-resili-tests-servers"
    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(cache)
    try:
        if shutil.which("npm") is None or shutil.which("git") is None:
            pytest.skip("the real-server tests need npm and git on PATH")
        realmcp = load_directory(task_directory())
        examples = load_directory(EXAMPLES)
        with exclusive("realmcp-servers"):
            for directory in (realmcp, examples):
                locks = locks_of(directory)
                for name, server in directory.servers.items():
                    if server.venv == "shared" and server.pypi:
                        continue  # ours: the [realmcp] extra
                    try:
                        server_argv(name, server, locks)
                    except InstallError as exc:
                        pytest.skip(
                            f"a real MCP server could not be installed (is the registry reachable?): {exc}"
                        )
    finally:
        if previous is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = previous
    return {**os.environ, CACHE_ENV: str(cache)}


def test_tasks_check_refuses_each_kind_of_broken_task_naming_why(tmp_path, server_cache):
    root = _suite_dir(
        tmp_path,
        {
            "good": _GOOD,
            "gold_fails": _GOOD.replace('equals = "hi"', 'equals = "hello"'),
            "nothing_passes": _GOOD.replace('equals = "hi"', 'absent = true\nname = "no_stray_file"').replace(
                'hello.txt"\nabsent', 'stray.txt"\nabsent'
            ),
            "blind_passes": """
uses = ["fs"]
prompt = "Copy in.txt to out.txt."
[[fixture.files]]
path = "in.txt"
content = "secret 42"
[[gold.steps]]
id = "read"
tool = "fs.read_text_file"
arguments = { path = "in.txt" }
[[gold.steps]]
id = "write"
tool = "fs.write_file"
arguments = { path = "out.txt", content = "secret 42" }
[gold]
reads = ["read"]
[[verify]]
kind = "file"
path = "out.txt"
equals = "secret 42"
""",
            "no_such_tool": _GOOD.replace('tool = "fs.write_file"', 'tool = "fs.write_everything"'),
        },
    )
    proc = subprocess.run(
        [*CLI, "tasks", "check", str(root)], capture_output=True, text=True, timeout=300, env=server_cache
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "ok      good" in out
    assert "REFUSED gold_fails: its ground truth fails verifier 'file:hello.txt#0'" in out
    assert "REFUSED nothing_passes: an agent that does nothing passes every verifier" in out
    assert "REFUSED blind_passes: an agent that skips reading (read)" in out
    assert "REFUSED no_such_tool:" in out and "fs.write_everything" in out
    assert "1 of 5 tasks pass their checks" in proc.stderr


def _rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT model, faults, task_id, trial, label, value, score FROM episodes "
            "ORDER BY model, faults, task_id, trial"
        ).fetchall()
    return [(m, f, t, n, label, v, json.loads(s)["components"]) for m, f, t, n, label, v, s in rows]


def test_the_example_suite_runs_on_its_real_servers_oracle_beats_naive_and_replays(tmp_path, server_cache):
    faults = tmp_path / "first_call_fails.toml"
    faults.write_text(
        'kind = "rules"\n[[rules]]\ntool = "*"\ncalls = [1]\n'
        'fault = { type = "error", code = "UNAVAILABLE", message = "try again" }\n'
    )
    rows = []
    for attempt in range(2):
        db = tmp_path / f"r{attempt}.db"
        proc = subprocess.run(
            [
                *CLI,
                "run",
                "--suite",
                str(EXAMPLES),
                "--model",
                "scripted:oracle",
                "--model",
                "scripted:naive",
                "--faults",
                "none",
                "--faults",
                str(faults),
                "--trials",
                "1",
                "--seed",
                "7",
                "--db",
                str(db),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=server_cache,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        rows.append(_rows(db))
        # Scripted agents on real servers: a slot per CPU, not the default 8 (`with_default_concurrency`).
        assert _stored_concurrency(db)[1] == min(8, usable_cpus())
    assert rows[0] == rows[1]  # same seed: identical labels, values and components
    by = {(m, f): [r[4] for r in rows[0] if (r[0], r[1]) == (m, f)] for m, f, *_ in rows[0]}
    assert by[("scripted:oracle", "none")] == ["full"] * 5
    assert by[("scripted:naive", "none")] == ["full"] * 5
    assert by[("scripted:oracle", str(faults))] == ["full"] * 5
    assert "full" not in by[("scripted:naive", str(faults))]  # every first call fails and naive never retries


def _stored_concurrency(db: Path) -> tuple[str, int]:
    """The one run in ``db``: its id and the concurrency it stored."""
    store = Store(db, read_only=True)
    try:
        (run_id,) = store.run_ids()
    finally:
        store.close()
    return run_id, load_run_config(db, run_id).concurrency


def test_a_run_that_names_no_concurrency_gets_a_slot_per_cpu_only_for_scripted_agents_on_real_servers(
    monkeypatch,
):
    from mcp_resili.cli import run as run_cli
    from mcp_resili.client.plan import RunConfig
    from mcp_resili.registry.loader import get_suite

    assert run_cli.usable_cpus() == len(os.sched_getaffinity(0))  # the CPUs this process may use
    examples, in_process = get_suite(str(EXAMPLES)), get_suite("resilibench")
    scripted = RunConfig(suite=str(EXAMPLES), models=("scripted:oracle", "scripted:naive"))
    hosted = RunConfig(suite=str(EXAMPLES), models=("scripted:oracle", "anthropic:claude-x"))
    remote = RunConfig(suite=str(EXAMPLES), models=scripted.models, server="http://127.0.0.1:1/mcp")
    # An agent program driven by the scripted model server's oracle is CPU-bound too; by a hosted one not.
    program = RunConfig(suite=str(EXAMPLES), models=("scripted:oracle",), agent_cmd="python agent.py")
    hosted_program = RunConfig(suite=str(EXAMPLES), models=("openai:gpt-x",), agent_cmd="python agent.py")
    for cpus, slots in ((1, 1), (2, 2), (64, 8)):
        monkeypatch.setattr(run_cli, "usable_cpus", lambda cpus=cpus: cpus)
        assert run_cli.with_default_concurrency(scripted, examples).concurrency == slots
        assert run_cli.with_default_concurrency(program, examples).concurrency == slots
        assert run_cli.with_default_concurrency(hosted, examples).concurrency == 8  # a model waits
        assert run_cli.with_default_concurrency(hosted_program, examples).concurrency == 8
        assert run_cli.with_default_concurrency(scripted, in_process).concurrency == 8  # no servers
        assert run_cli.with_default_concurrency(remote, examples).concurrency == 8  # not ours to start
        assert run_cli.with_default_concurrency(scripted, examples, "ray").concurrency == 8  # a cluster


def test_the_cli_gives_the_default_slots_only_to_a_new_run_that_names_no_concurrency(tmp_path, monkeypatch):
    """``--concurrency`` is the user's and a resume keeps the run's own: neither is replaced."""
    from dataclasses import replace

    from mcp_resili.cli import main
    from mcp_resili.cli import run as run_cli

    asked: list[str] = []

    def five_slots(config, suite, executor="local"):  # as a suite with real servers would get on 5 CPUs
        asked.append(config.suite)
        return replace(config, concurrency=5)

    monkeypatch.setattr(run_cli, "with_default_concurrency", five_slots)

    common = ["run", "--suite", "tiny", "--limit", "2", "--trials", "1", "--json"]
    assert main([*common, "--db", str(tmp_path / "default.db")]) == 0
    run_id, slots = _stored_concurrency(tmp_path / "default.db")
    assert (asked, slots) == (["tiny"], 5)
    assert main([*common, "--concurrency", "3", "--db", str(tmp_path / "named.db")]) == 0
    assert (asked, _stored_concurrency(tmp_path / "named.db")[1]) == (["tiny"], 3)
    assert main(["run", "--resume", run_id, "--db", str(tmp_path / "default.db"), "--json"]) == 0
    assert (asked, _stored_concurrency(tmp_path / "default.db")) == (["tiny"], (run_id, 5))


def test_a_pypi_servers_environment_is_shared_by_every_virtual_environment_of_one_python(
    tmp_path, monkeypatch
):
    from mcp_resili.taskfiles.install import CACHE_ENV, venv_dir

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    base = tmp_path / "python3.11"
    base.write_text("")
    monkeypatch.setattr(sys, "_base_executable", str(base), raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "clone-a" / ".venv" / "bin" / "python"))
    first = venv_dir("mcp-server-sqlite==2025.4.25")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "clone-b" / ".venv" / "bin" / "python"))
    assert venv_dir("mcp-server-sqlite==2025.4.25") == first  # another venv of the same Python
    assert venv_dir("mcp-server-sqlite==2025.4.26") != first  # other pins
    (tmp_path / "link").symlink_to(base)
    monkeypatch.setattr(sys, "_base_executable", str(tmp_path / "link"))
    assert venv_dir("mcp-server-sqlite==2025.4.25") == first  # the same Python by another path
    monkeypatch.setattr(sys, "_base_executable", str(tmp_path / "python3.12"))
    assert venv_dir("mcp-server-sqlite==2025.4.25") != first  # another Python
    assert first.parent == tmp_path / "servers" / "venv"


def test_reused_servers_never_carry_an_episode_into_the_next(server_cache, monkeypatch):
    from mcp_resili.server.episode import Episode
    from mcp_resili.taskfiles.environment import BINDING_KEY, TaskEnvironment
    from mcp_resili.taskfiles.suite import locks_of

    monkeypatch.setenv("MCP_RESILI_CACHE_DIR", server_cache["MCP_RESILI_CACHE_DIR"])
    directory = load_directory(task_directory())
    tasks = [t for t in directory.tasks if t.id in ("memory_add-01", "think_plan-01")]
    servers = {n: directory.servers[n] for n in ("memory", "think")}

    async def episode(env: TaskEnvironment, task: FileTask, name: str) -> tuple[Episode, dict]:
        ep = Episode(id=name, task=task, fault_key=f"{task.id}/0", seed=0)
        await env.open_episode(ep)
        specs = {s.name: s for s in env.specs}
        graph = (
            await env.run(specs["memory.read_graph"], {}, ep.tool_state) if "memory" in task.servers else None
        )
        return ep, {"graph": graph}

    async def main() -> None:
        async with TaskEnvironment(tasks, servers, locks=locks_of(directory)) as env:
            specs = {s.name: s for s in env.specs}
            memory_task, think_task = tasks
            first, _ = await episode(env, memory_task, "a")
            slot = first.tool_state[BINDING_KEY].slot
            memory_process = slot.processes["memory"]
            await env.run(
                specs["memory.create_entities"],
                {"entities": [{"name": "Leak", "entityType": "x", "observations": []}]},
                first.tool_state,
            )
            await env.run(specs["memory.delete_entities"], {"entityNames": ["Ada"]}, first.tool_state)
            await env.end_episode(first)
            second, seen = await episode(env, memory_task, "b")
            assert (
                second.tool_state[BINDING_KEY].slot is slot and slot.processes["memory"] is memory_process
            )  # reused
            names = {e["name"] for e in json.loads(seen["graph"].text)["entities"]}
            assert "Leak" not in names and "Ada" in names  # but laid afresh
            await env.end_episode(second)
            for name in ("c", "d"):  # the thought history lives in the process: a fresh one each time
                ep = Episode(id=name, task=think_task, fault_key="t/0", seed=0)
                await env.open_episode(ep)
                args = {"thought": "x", "nextThoughtNeeded": False, "thoughtNumber": 1, "totalThoughts": 1}
                result = await env.run(specs["think.sequentialthinking"], args, ep.tool_state)
                assert json.loads(result.text or "")["thoughtHistoryLength"] == 1
                await env.end_episode(ep)

    anyio.run(main)
