"""The README's snippets are the tested files they claim to be."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_python_example_is_examples_quickstart():
    (block,) = re.findall(r"```python\n(.*?)```", README, re.S)
    quickstart = (ROOT / "examples" / "quickstart.py").read_text(encoding="utf-8")
    assert block.strip() in quickstart


def test_quickstart_runs_and_reports_both_agents():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "scripted:oracle" in proc.stdout and "scripted:naive" in proc.stdout


def test_ci_runs_the_readme_test_command():
    (test_command,) = [line for line in README.splitlines() if line.endswith("python -m pytest")]
    assert test_command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_example_fault_file_parses():
    from mcp_resili.faults import RuleFaults, parse_fault_spec

    plan = parse_fault_spec(str(ROOT / "examples" / "faults.toml"))
    assert isinstance(plan, RuleFaults) and len(plan.rules) == 2


def test_manual_episode_example_scores_its_own_trace():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "manual_episode.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Task: ")
    assert '"label"' in proc.stdout and '"faults_injected"' in proc.stdout
