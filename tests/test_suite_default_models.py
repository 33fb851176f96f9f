"""A run that names no model plays the suite's own default agents, or the generic pair for a suite
that declares none (a third party's, the tiny suite). What ToolMaze's defaults print is checked against
the README's example by tests/test_readme_commands.py."""

import dataclasses
import json

import pytest
from tiny_suite import suite as tiny_suite

from mcp_resili.cli import main
from mcp_resili.registry.loader import get_suite


def test_toolmaze_declares_its_own_recovering_agents():
    toolmaze = get_suite("toolmaze")
    assert toolmaze.default_models == ("scripted:retry", "scripted:switch")
    # Each one is an agent the suite itself registers: the defaults are never a typo.
    assert {m.removeprefix("scripted:") for m in toolmaze.default_models} <= set(toolmaze.agents)


@pytest.mark.parametrize("bad", ["scripted:retry", ("scripted:retry", 3), ("",), ["scripted:retry"]])
def test_a_suite_with_malformed_default_models_is_refused_when_built(bad):
    with pytest.raises(TypeError, match="default_models"):
        dataclasses.replace(tiny_suite(), default_models=bad)


def _run_json(capsys, tmp_path, *argv):
    assert main(["run", *argv, "--trials", "1", "--json", "--db", str(tmp_path / "r.db")]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_suite_without_defaults_plays_the_generic_pair_and_named_models_win(capsys, tmp_path):
    summary = _run_json(capsys, tmp_path, "--suite", "tiny", "--limit", "2")
    assert {g["model"] for g in summary["groups"]} == {"scripted:oracle", "scripted:naive"}
    named = _run_json(capsys, tmp_path, "--suite", "toolmaze", "--model", "scripted:abort", "--limit", "1")
    assert {g["model"] for g in named["groups"]} == {"scripted:abort"}
