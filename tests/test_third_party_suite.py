"""A third-party suite, installed as its own distribution, runs end to end with no change to mcp_resili,
importing from the public face alone and inheriting no stop rules; broken third-party suites (fakes
built on the tiny suite, tests/tiny_suite) are reported in one line and break nothing else."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mcp import Client
from servers import REPO_ROOT, child_env, run_cli, stdio_parameters

import mcp_resili

EXAMPLE = REPO_ROOT / "examples" / "third_party_suite"
pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def invoices_installed(tmp_path_factory):
    """``pip install examples/third_party_suite`` into this environment, uninstalled afterwards.

    It is built from a copy, so the build leaves nothing behind in the checkout.
    """
    source = tmp_path_factory.mktemp("invoices") / "third_party_suite"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    install = subprocess.run(
        [*pip, "install", "--no-deps", "--no-build-isolation", str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    yield
    subprocess.run([*pip, "uninstall", "-y", "resili-invoices"], capture_output=True, timeout=120)


def test_an_installed_third_party_suite_is_listed_with_its_package(invoices_installed):
    proc = run_cli("suites", "--json")
    assert proc.returncode == 0, proc.stderr
    listed = {row["name"]: row for row in json.loads(proc.stdout)}
    assert listed["invoices"]["package"] == "resili-invoices"
    assert listed["invoices"]["status"] == "ok" and listed["invoices"]["tools"] == 3
    assert listed["resilibench"]["package"] == "mcp-resili"


def test_a_third_party_suite_runs_with_faults_scores_and_reports(invoices_installed, tmp_path):
    db = tmp_path / "r.db"
    proc = run_cli(
        "run",
        "--suite",
        "invoices",
        "--faults",
        "lambda=0.3",
        "--trials",
        "4",
        "--time-scale",
        "0",
        "--json",
        "--db",
        str(db),
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    full = {g["model"]: g["levels"]["full"]["count"] for g in summary["groups"]}
    episodes = {g["model"]: g["episodes"] for g in summary["groups"]}
    assert episodes == {"scripted:naive": 20, "scripted:oracle": 20}
    # Faults really fire (the naive agent never retries) and the oracle recovers from them.
    assert full["scripted:naive"] < full["scripted:oracle"]
    html = tmp_path / "report.html"
    report = run_cli("report", "--db", str(db), "--html", str(html))
    assert report.returncode == 0, report.stderr
    page = html.read_text(encoding="utf-8")
    assert "invoices" in page and "scripted:oracle" in page


async def test_a_third_party_suite_is_served_to_a_real_mcp_client_and_its_trace_scores(
    invoices_installed, tmp_path
):
    traces = tmp_path / "traces"
    params = stdio_parameters("--suite", "invoices", "--faults", "none", "--trace-dir", str(traces))
    async with Client(params, read_timeout_seconds=30) as client:
        assert {t.name for t in (await client.list_tools()).tools} >= {
            "lookup_order",
            "send_invoice",
            "finish",
        }
        prompt = await client.get_prompt("invoices-1")  # binds this session's episode to the task
        assert "ORD-1001" in prompt.messages[0].content.text
        order = await client.call_tool("lookup_order", {"order_id": "ORD-1001"})
        converted = await client.call_tool(
            "convert_currency",
            {"amount": order.structured_content["amount"], "source": "EUR", "target": "USD"},
        )
        await client.call_tool(
            "send_invoice",
            {"email": "ana@example.com", "amount": converted.structured_content["amount"], "currency": "USD"},
        )
        await client.call_tool("finish", {"status": "completed", "summary": "sent"})
    (trace,) = traces.glob("*.jsonl")
    scored = run_cli("score", str(trace))
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout)["label"] == "full"


def test_the_example_imports_from_the_public_face_alone():
    package = EXAMPLE / "resili_invoices"
    files = sorted(package.glob("*.py"))
    assert files
    from_face: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] in sys.stdlib_module_names, (path.name, alias.name)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module is not None
                if node.module.split(".")[0] == "mcp_resili":
                    assert node.module == "mcp_resili", (path.name, node.module)  # no internal path
                    from_face |= {alias.name for alias in node.names}
                else:
                    assert node.module.split(".")[0] in sys.stdlib_module_names, (path.name, node.module)
    assert from_face and from_face <= set(mcp_resili.__all__)


def test_the_example_names_no_stop_rules_and_its_episodes_end_under_none(invoices_installed, tmp_path):
    # Every lookup fails: the oracle retries it, failed call after failed call, until the budget is spent.
    faults = tmp_path / "lookups-fail.json"
    rule = {"tool": "lookup_order", "fault": {"type": "error", "code": "TIMEOUT"}}
    faults.write_text(json.dumps({"kind": "rules", "rules": [rule]}), encoding="utf-8")
    db = tmp_path / "r.db"
    argv = ["run", "--suite", "invoices", "--faults", str(faults), "--model", "scripted:oracle"]
    proc = run_cli(*argv, "--trials", "1", "--json", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT termination, stop_rule, trace FROM episodes").fetchall()
    assert len(rows) == 5
    for termination, stop_rule, trace in rows:
        events = [json.loads(line) for line in trace.splitlines()]
        calls = [e for e in events if e["event"] == "tool_call"]
        (end,) = [e for e in events if e["event"] == "episode_end"]
        assert len(calls) >= 5 and all(c["tool"] == "lookup_order" and c["is_error"] for c in calls)
        assert (end["stop_rules"], end["stop_rule"], stop_rule) == ("none", None, None)
        assert termination == "max_turns"


def _fake_distribution(root: Path, name: str, entry: str, module: str, source: str) -> None:
    """A dist-info with one ``mcp_resili.suites`` entry point, and the module it names, under ``root``."""
    dist = root / f"{name.replace('-', '_')}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(f"[mcp_resili.suites]\n{entry}\n", encoding="utf-8")
    (root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")


def test_broken_third_party_suites_get_one_line_each_and_break_nothing_else(tmp_path):
    plugins = tmp_path / "plugins"
    _fake_distribution(
        plugins,
        "broken-import",
        "brokenimport = broken_import:suite",
        "broken_import",
        "import no_such_module_anywhere\n",
    )
    _fake_distribution(
        plugins,
        "bad-tasks",
        "badtasks = bad_tasks:suite",
        "bad_tasks",
        """
        from mcp_resili import Suite, TaskSet
        from tiny_suite import suite as tiny_suite

        def suite():
            base = tiny_suite()
            return Suite(
                name="badtasks", description="tasks that do not validate", library=base.library,
                load_tasks=lambda: TaskSet.model_validate({"suite": "bad", "tasks": [{"id": "x"}]}).tasks,
                render_prompt=base.render_prompt, score=base.score,
            )
        """,
    )
    env = child_env(PYTHONPATH=os.pathsep.join([str(plugins), child_env()["PYTHONPATH"]]))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "mcp_resili", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)

    listing = cli("suites", "--json")
    assert listing.returncode == 0, listing.stderr
    rows = {row["name"]: row for row in json.loads(listing.stdout)}
    assert rows["brokenimport"]["status"] == "broken"
    assert "no_such_module_anywhere" in rows["brokenimport"]["error"]
    assert rows["resilibench"]["status"] == "ok" and rows["tiny"]["status"] == "ok"
    assert rows["badtasks"]["status"] == "broken" and "invalid" in rows["badtasks"]["error"]
    for name, expected in (("brokenimport", "ModuleNotFoundError"), ("badtasks", "invalid tasks")):
        proc = cli("run", "--suite", name)
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1 and name in proc.stderr and expected in proc.stderr, proc.stderr
    ok = cli(
        "run",
        "--suite",
        "tiny",
        "--limit",
        "1",
        "--trials",
        "1",
        "--json",
        "--db",
        str(tmp_path / "r.db"),
    )
    assert ok.returncode == 0, ok.stderr


_BASE = """
from dataclasses import replace
from tiny_suite import suite as tiny_suite

def base(name, **fields):
    return replace(tiny_suite(), name=name, **fields)
"""


@pytest.fixture(scope="module")
def misbehaving_suites(tmp_path_factory):
    """``mcp-resili ARGS`` run with fake distributions installed whose suites misbehave (exit, raise
    KeyError, None fields, dict tasks, invalid tasks, a built-in's name), first on the path."""
    root = tmp_path_factory.mktemp("misbehaving")
    plugins = root / "plugins"
    suites = {
        "exits": "import sys\n\ndef suite():\n    sys.exit('the factory called sys.exit')\n",
        "keyerror": _BASE + "\ndef suite():\n    return base('keyerror', load_tasks=lambda: {}['taskz'])\n",
        "noagents": _BASE + "\ndef suite():\n    return base('noagents', agents=None, fault_specs=None)\n",
        "dicttasks": _BASE
        + "\ndef suite():\n"
        + "    tasks = [t.model_dump(mode='json') for t in tiny_suite().tasks]\n"
        + "    return base('dicttasks', load_tasks=lambda: tasks)\n",
        "invalidtasks": _BASE
        + "from mcp_resili.tasks.model import TaskSet\n\ndef suite():\n"
        + "    load = lambda: TaskSet.model_validate({'suite': 'x', 'tasks': [{'id': 'x'}]}).tasks\n"
        + "    return base('invalidtasks', load_tasks=load)\n",
    }
    for name, source in suites.items():
        _fake_distribution(plugins, f"{name}-suite", f"{name} = {name}_suite:suite", f"{name}_suite", source)
    impostor = "from dataclasses import replace\nfrom mcp_resili.suites import toolmaze\n\n"
    impostor += (
        "def suite():\n    return replace(toolmaze.suite(), name='resilibench', description='IMPOSTOR')\n"
    )
    _fake_distribution(plugins, "impostor", "resilibench = impostor_suite:suite", "impostor_suite", impostor)
    for twin in ("twin-a", "twin-b"):
        module = twin.replace("-", "_")
        source = _BASE + "\ndef suite():\n    return base('twin')\n"
        _fake_distribution(plugins, twin, f"twin = {module}:suite", module, source)
    env = child_env(PYTHONPATH=os.pathsep.join([str(plugins), child_env()["PYTHONPATH"]]))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "mcp_resili", *args]
        return subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, cwd=root, timeout=120
        )

    return cli


def _one_line_error(proc: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert all(text in proc.stderr for text in expected), proc.stderr


def test_a_suite_that_exits_raises_or_has_none_fields_is_listed_broken_and_breaks_nothing_else(
    misbehaving_suites,
):
    listing = misbehaving_suites("suites", "--json")
    assert listing.returncode == 0, listing.stderr
    rows = {row["name"]: row for row in json.loads(listing.stdout)}
    expected = {
        "exits": "SystemExit: the factory called sys.exit",
        "keyerror": "KeyError: 'taskz'",
        "noagents": "TypeError: Suite",
        "dicttasks": "must be Task objects",
    }
    for name, error in expected.items():
        assert rows[name]["status"] == "broken" and error in rows[name]["error"], rows[name]
    assert rows["resilibench"]["status"] == "ok" and rows["toolmaze"]["status"] == "ok"
    # Commands that read every suite (scripted agents, fault SPEC names) skip the broken ones.
    _one_line_error(
        misbehaving_suites("run", "--suite", "resilibench", "--model", "scripted:nosuch", "--db", "x.db"),
        "unknown scripted agent 'nosuch'",
    )
    _one_line_error(
        misbehaving_suites("proxy", "--faults", "bogus", "--upstream", "true"), "unknown fault spec 'bogus'"
    )
    # A command that uses a broken suite says why in one line.
    _one_line_error(misbehaving_suites("run", "--suite", "exits", "--db", "x.db"), "exits", "SystemExit")
    _one_line_error(misbehaving_suites("tasks", "list", "--suite", "dicttasks"), "dicttasks", "Task objects")


def test_serve_refuses_a_suite_whose_tasks_do_not_load_in_one_line(misbehaving_suites):
    for name, expected in (("invalidtasks", "invalid tasks"), ("dicttasks", "must be Task objects")):
        _one_line_error(misbehaving_suites("serve", "--suite", name), name, expected)


def test_no_package_takes_over_a_built_in_suite_name_and_a_shared_name_is_reported(misbehaving_suites):
    listing = misbehaving_suites("suites", "--json")
    assert listing.returncode == 0, listing.stderr
    rows = {row["name"]: row for row in json.loads(listing.stdout)}
    builtin = rows["resilibench"]
    assert builtin["package"] == "mcp-resili" and builtin["status"] == "ok"
    assert "IMPOSTOR" not in builtin["description"]
    clash = rows["resilibench (impostor)"]
    assert clash["status"] == "broken" and "impostor 1.0" in clash["error"] and "mcp-resili" in clash["error"]
    assert rows["twin"]["status"] == "broken"
    assert "twin-a 1.0" in rows["twin"]["error"] and "twin-b 1.0" in rows["twin"]["error"]
    # The built-in's tasks are played and stored under its name; the shared name plays neither.
    tasks = misbehaving_suites("tasks", "list", "--suite", "resilibench", "--json")
    assert tasks.returncode == 0, tasks.stderr
    assert {task["suite"] for task in json.loads(tasks.stdout)} == {"resilibench"}
    _one_line_error(misbehaving_suites("run", "--suite", "twin", "--db", "x.db"), "twin-a", "twin-b")


def test_a_scorer_that_fails_mid_run_stops_it_in_one_line_and_resume_finishes_it(tmp_path):
    # The third episode's scoring raises (a bug in the suite): no traceback, the two scored episodes
    # stay stored, and --resume plays only the rest once the scorer works.
    plugins = tmp_path / "plugins"
    _fake_distribution(
        plugins,
        "flaky-scorer",
        "flakyscorer = flaky_scorer:suite",
        "flaky_scorer",
        """
        import os
        from mcp_resili import Suite
        from tiny_suite import suite as tiny_suite

        base = tiny_suite()
        scored = []

        def score(task, trace):
            scored.append(task.id)
            if len(scored) == 3 and os.environ.get("SCORER_BUG") == "raise":
                raise RuntimeError("scorer bug")
            result = base.score(task, trace)
            if len(scored) == 3 and os.environ.get("SCORER_BUG") == "label":
                return result.model_copy(update={"label": "full\\ud800"})  # no store can hold it
            return result

        def suite():
            return Suite(
                name="flakyscorer", description="a scorer with a bug", library=base.library,
                load_tasks=base.load_tasks, render_prompt=base.render_prompt, score=score,
            )
        """,
    )
    pythonpath = os.pathsep.join([str(plugins), child_env()["PYTHONPATH"]])

    def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "mcp_resili", *args]
        environment = child_env(PYTHONPATH=pythonpath, **env)
        return subprocess.run(
            command, capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=120
        )

    def stored(db: Path) -> list[tuple[str, str]]:
        with sqlite3.connect(db) as connection:
            return sorted(connection.execute("SELECT task_id, label FROM episodes").fetchall())

    plan = ["--suite", "flakyscorer", "--limit", "5", "--trials", "1", "--concurrency", "1"]
    # What each bug's line says around the task id.
    expected = {
        "raise": ("suite 'flakyscorer' failed to score task '", "' (RuntimeError: scorer bug);"),
        "label": (
            "suite 'flakyscorer' scored task '",
            "' with the label 'full\\ud800', which is not UTF-8 text;",
        ),
    }
    clean = cli("run", *plan, "--db", str(tmp_path / "clean.db"))
    assert clean.returncode == 0, clean.stderr
    for bug, (before, after) in expected.items():
        db = tmp_path / f"{bug}.db"
        failed = cli("run", *plan, "--db", str(db), SCORER_BUG=bug)
        assert failed.returncode == 2
        assert failed.stderr.count("\n") == 1 and "Traceback" not in failed.stderr, failed.stderr
        found = re.search(
            r"; 2 finished episodes are stored \(resume: mcp-resili run --resume (\S+) --db ", failed.stderr
        )
        assert found is not None, failed.stderr
        assert len(stored(db)) == 2  # the two episodes scored before the bug
        assert re.search(re.escape(before) + r"[\w-]+" + re.escape(after), failed.stderr), failed.stderr
        resumed = cli("run", "--resume", found.group(1), "--db", str(db))
        assert resumed.returncode == 0, resumed.stderr
        assert stored(db) == stored(tmp_path / "clean.db")  # every episode once, as a clean run


def test_a_suite_whose_prompt_fails_for_one_task_is_one_line_naming_it_and_stores_nothing_wrong(tmp_path):
    plugins = tmp_path / "plugins"
    _fake_distribution(
        plugins,
        "bad-prompt",
        "badprompt = bad_prompt:suite",
        "bad_prompt",
        """
        from mcp_resili import Suite
        from tiny_suite import suite as tiny_suite

        base = tiny_suite()
        broken = base.tasks[1].id

        def render(task, variant):
            if task.id == broken:
                raise KeyError("no template for this task")
            return base.render_prompt(task, variant)

        def suite():
            return Suite(
                name="badprompt", description="a prompt with a bug", library=base.library,
                load_tasks=base.load_tasks, render_prompt=render, score=base.score,
            )
        """,
    )
    env = child_env(PYTHONPATH=os.pathsep.join([str(plugins), child_env()["PYTHONPATH"]]))
    db = tmp_path / "r.db"
    command = [sys.executable, "-m", "mcp_resili", "run", "--suite", "badprompt", "--trials", "1"]
    tasks = ["--task", "tiny-1", "--task", "tiny-2", "--task", "tiny-3"]
    proc = subprocess.run(
        [*command, *tasks, "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "suite 'badprompt' failed to write the prompt of task 'tiny-2'" in proc.stderr
    assert "(KeyError: 'no template for this task'); the suite is at fault" in proc.stderr
    # The run started: what it stored before the bug was met (how much depends on scheduling) is
    # complete episodes of the other tasks, each scored.
    with sqlite3.connect(db) as connection:
        labels = connection.execute("SELECT task_id, label FROM episodes").fetchall()
    assert all(task != "tiny-2" and label is not None for task, label in labels)
