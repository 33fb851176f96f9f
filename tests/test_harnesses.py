"""The example harnesses (examples/harnesses) played by ``run --agent-cmd``, offline, on the real SDKs.

Each plays ResiliBench tasks under tool faults (``--faults resilibench``) and model-API faults
(``--llm-faults llm:medium``); the model server's oracle behind them scores what the built-in oracle
scores on the same tasks and seeds; and the issue's command, at a smaller scale, prints the model-API
coping table and replays the same scores with the same seed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from harness_support import REPO_ROOT, decisions, harness, run_agent

from mcp_resili.client.plan import RunConfig
from mcp_resili.client.runner import execute
from mcp_resili.store import Store

pytestmark = pytest.mark.anyio

#: Harness file -> the package it needs beyond the base install (the frameworks extra), if any.
HARNESSES = {
    "openai_loop.py": None,
    "anthropic_loop.py": None,
    "openai_agents_agent.py": "agents",
    "pydantic_ai_agent.py": "pydantic_ai",
}
#: A task whose trial 0 the oracle completes and whose trial 1 the tool faults defeat (seed 0).
PARITY_TASKS = ("task_b6958850",)
#: A short task whose trial 0 meets a 429 at its second model call under llm:medium (seed 0), on
#: either API.
RATE_LIMITED_TASK = ("task_9af2daab",)


def needs(name: str) -> None:
    package = HARNESSES[name]
    if package is not None and importlib.util.find_spec(package) is None:
        pytest.skip(f"{name} needs {package}, which is not installed (pip install 'mcp-resili[frameworks]')")


def comparable(rows: Any) -> dict[tuple[str, int], tuple[Any, ...]]:
    """Per (task, trial): label, value and the suite's components (the model-API ones left out)."""
    return {
        (r.task_id, r.trial): (
            r.label,
            r.value,
            {k: v for k, v in (r.score or {}).get("components", {}).items() if not k.startswith("llm_")},
        )
        for r in rows
    }


@pytest.mark.parametrize("name", list(HARNESSES))
async def test_each_example_harness_gets_past_a_rate_limit_under_tool_and_model_api_faults(name, tmp_path):
    needs(name)
    result = await run_agent(
        tmp_path, harness(name), llm_faults="llm:medium", tasks=RATE_LIMITED_TASK, seed=0
    )
    (row,) = result.rows
    components = row.score["components"]
    assert components["llm_calls"] == len(decisions(row)) > 2
    assert components["llm_rate_limit_met"] == 1 and components["llm_rate_limit_survived"] == 1
    assert decisions(row)[1][1:] == ("rate_limit", 429) and decisions(row)[2][2] == 200  # the SDK's retry
    assert row.label == "full" and row.termination == "completed"


@pytest.mark.parametrize("name", list(HARNESSES))
async def test_the_model_servers_oracle_through_each_harness_scores_what_the_built_in_oracle_scores(
    name, tmp_path
):
    needs(name)
    through = await run_agent(tmp_path, harness(name), tasks=PARITY_TASKS, trials=2, db=tmp_path / "h.db")
    built_in = await execute(
        RunConfig(
            suite="resilibench",
            models=("scripted:oracle",),
            faults=("resilibench",),
            tasks=PARITY_TASKS,
            trials=2,
            time_scale=0.0,
            db=tmp_path / "b.db",
        )
    )
    assert comparable(through.rows) == comparable(built_in.rows)
    assert {r.label for r in built_in.rows} == {"full", "failure"}  # both outcomes are compared


def _issue_command(db: Path) -> list[str]:
    """The issue's command, smaller (1 task, 2 trials), without waiting on injected delays."""
    return [
        sys.executable,
        "-m",
        "mcp_resili",
        "run",
        "--agent-cmd",
        "python examples/harnesses/openai_loop.py",
        *("--suite", "resilibench", "--limit", "1", "--trials", "2", "--faults", "resilibench"),
        *("--llm-faults", "llm:medium", "--time-scale", "0", "--db", str(db)),
    ]


def _stored(db: Path) -> dict[tuple[str, int], tuple[Any, ...]]:
    """Per (task, trial): label, value, score, termination and the model-API ledger's decisions."""
    store = Store(db, read_only=True)
    try:
        (run_id,) = store.run_ids(limit=2)
        return {
            (r.task_id, r.trial): (r.label, r.value, r.score, r.termination, decisions(r))
            for r in store.iter_episodes(run_id)
        }
    finally:
        store.close()


async def test_the_issue_command_prints_model_api_coping_and_replays_the_same_scores_with_the_same_seed(
    tmp_path,
):
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}

    async def play(name: str) -> None:
        outputs[name] = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                _issue_command(tmp_path / f"{name}.db"),
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=600,
                stdin=subprocess.DEVNULL,
            )
        )

    async with anyio.create_task_group() as group:  # the two runs side by side
        group.start_soon(play, "first")
        group.start_soon(play, "again")
    for proc in outputs.values():
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "Coping with model-API faults" in proc.stdout and "all model-API faults" in proc.stdout
        assert "Traceback" not in proc.stderr
    first, again = _stored(tmp_path / "first.db"), _stored(tmp_path / "again.db")
    assert len(first) == 2 and first == again
    assert sum(score["components"]["llm_faults"] for _, _, score, _, _ in first.values()) >= 1
