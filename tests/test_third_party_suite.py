"""A third-party suite, installed as its own distribution, runs end to end with no change to mcp_resili;
broken third-party suites are reported in one line and break nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mcp import Client
from servers import REPO_ROOT, child_env, run_cli, stdio_parameters

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
        "run", "--suite", "invoices", "--faults", "lambda=0.3", "--trials", "4", "--json", "--db", str(db)
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
        from mcp_resili.registry.suites import Suite, get_suite
        from mcp_resili.tasks.model import TaskSet

        def suite():
            base = get_suite("reliabilitybench")
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
    assert rows["resilibench"]["status"] == "ok" and rows["toolmaze"]["status"] == "ok"
    assert rows["badtasks"]["status"] == "broken" and "invalid" in rows["badtasks"]["error"]
    for name, expected in (("brokenimport", "ModuleNotFoundError"), ("badtasks", "invalid tasks")):
        proc = cli("run", "--suite", name)
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1 and name in proc.stderr and expected in proc.stderr, proc.stderr
    ok = cli(
        "run",
        "--suite",
        "reliabilitybench",
        "--limit",
        "1",
        "--trials",
        "1",
        "--json",
        "--db",
        str(tmp_path / "r.db"),
    )
    assert ok.returncode == 0, ok.stderr
