"""Agents on the older MCP SDK (mcp<2) as outside peers, from a venv of their own: smolagents through its
MCP adapter (mcpadapt imports names mcp 2 removed, so it cannot run beside our mcp 2.3) and LangGraph
through langchain-mcp-adapters. Both speak the handshake era: over HTTP, one session is one episode.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from framework_policy import GroundTruthPolicy
from frameworks import RELIABILITYBENCH, RESILIBENCH, Episode, assert_scores_as_the_runner, stdio_argv
from outside_peers import outside_python, policy_endpoint, run_outside
from servers import child_env, running_http_server

from mcp_resili.registry.loader import get_suite

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    outside_python()


def policy(episode: Episode) -> GroundTruthPolicy:
    task = get_suite(episode.suite).task(episode.task)
    return GroundTruthPolicy(task, start_arguments=episode.start_arguments)


@pytest.mark.parametrize("framework", ["smolagents", "langgraph"])
async def test_an_outside_agent_completes_a_resilibench_task_over_stdio_and_scores_as_the_runner(
    tmp_path: Path, framework: str
) -> None:
    argv = stdio_argv(RESILIBENCH, tmp_path / "traces")
    async with policy_endpoint(policy(RESILIBENCH)) as url:
        result = await run_outside(framework, url, "--stdio", json.dumps(argv), env=child_env())
    assert result["answer"] == "done" and result["calls"][-1] == "finish", result
    await assert_scores_as_the_runner(RESILIBENCH, tmp_path / "traces", tmp_path / "r.db")


@pytest.mark.parametrize("framework", ["smolagents", "langgraph"])
async def test_an_outside_agent_over_http_plays_a_handshake_session_and_copes_with_protocol_faults(
    tmp_path: Path, framework: str
) -> None:
    args = RELIABILITYBENCH.serve_args(tmp_path / "traces", pinned=True)
    async with (
        running_http_server(*args, workdir=tmp_path) as server,
        policy_endpoint(policy(RELIABILITYBENCH)) as url,
    ):
        result = await run_outside(framework, url, "--url", server.url, env=child_env())
    assert result["answer"] == "done"
    score = await assert_scores_as_the_runner(RELIABILITYBENCH, tmp_path / "traces", tmp_path / "r.db")
    assert score.components["coping_elicitation_request_met"] == 1
