"""What `run` says on stderr before and after: a heads-up when its faults wait in real time, and
whole lines (never cut at 80 columns) when stderr is a pipe or a log."""

import os
import subprocess
import sys

import pytest

from mcp_resili.faults import parse_fault_spec
from mcp_resili.faults.waits import waits_in_real_time
from mcp_resili.registry.loader import get_suite


@pytest.mark.parametrize(
    ("spec", "waits"),
    [
        ("none", False),
        ("resilibench", False),
        ("lambda=0.0", False),  # a zero rate draws nothing
        ("lambda=0.1", True),  # TransientTimeout waits 2 s before its 504
        ("protocol:medium", True),  # dropped and stalled answers are held until the client gives up
        ("protocol:modern", False),  # stale listings, expired handles...: nothing waits
        ("protocol:medium+resilibench", True),  # a composite: either part
    ],
)
def test_which_fault_plans_wait_in_real_time(spec, waits):
    plan = parse_fault_spec(spec, get_suite("resilibench").spec_scope)
    assert waits_in_real_time(plan.model_dump(mode="json")) is waits


def _run(tmp_path, *argv):
    return subprocess.run(
        [sys.executable, "-m", "mcp_resili", "run", "--suite", "tiny", "--trials", "1", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"},  # stderr is a pipe: rich's 80
    )


def test_a_run_whose_faults_wait_says_so_first_and_names_time_scale(tmp_path):
    # A rule with a 10 ms delay: a real wait, cheap to play.
    rules = tmp_path / "slow.toml"
    rules.write_text(
        'kind = "rules"\n[[rules]]\ntool = "*"\n'
        'fault = { type = "error", code = "TIMEOUT", transient = true, delay_seconds = 0.01 }\n'
    )
    slow = _run(tmp_path, "--faults", str(rules), "--limit", "1")
    assert slow.returncode == 0, slow.stderr
    first = slow.stderr.splitlines()[0]
    assert (
        first.startswith(f"note: {rules} delays or holds answers in real time") and "--time-scale 0" in first
    )
    instant = _run(tmp_path, "--faults", str(rules), "--limit", "1", "--time-scale", "0")
    assert instant.returncode == 0 and "note:" not in instant.stderr


def test_no_note_without_waits_and_the_stored_line_is_whole_on_a_pipe(tmp_path):
    db = tmp_path / ("a-directory-name-long-enough-to-push-the-line-past-eighty-columns" * 2) / "runs.db"
    db.parent.mkdir()
    proc = _run(tmp_path, "--limit", "1", "--db", str(db))
    assert proc.returncode == 0 and "note:" not in proc.stderr, proc.stderr
    (stored,) = [line for line in proc.stderr.splitlines() if line.startswith("stored ")]
    assert stored.endswith(f" in {db}") and len(stored) > 160
