import json
from dataclasses import dataclass

import anyio
import pytest

from mcp_resili.cli import main
from mcp_resili.client.model import ModelRequest, ModelResponse
from mcp_resili.client.runner import RunConfig, RunConfigError, execute

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class NeverAnswers:
    name: str = "scripted:oracle"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        await anyio.Event().wait()
        raise AssertionError("unreachable")


async def test_an_episode_past_its_time_limit_ends_as_time_limit_and_is_scored(tmp_path, monkeypatch):
    monkeypatch.setattr("mcp_resili.client.runner.create_model", lambda spec, **_: NeverAnswers())
    result = await execute(
        RunConfig(db=tmp_path / "r.db", models=("scripted:oracle",), trials=1, limit=2, time_limit=0.01)
    )
    assert [r.termination for r in result.rows] == ["time_limit", "time_limit"]
    assert all(r.label == "failure" for r in result.rows)


async def test_max_turns_overrides_the_tasks_limit(tmp_path):
    result = await execute(
        RunConfig(
            db=tmp_path / "r.db",
            models=("scripted:oracle",),
            trials=1,
            limit=2,
            faults=("none",),
            max_turns=1,
        )
    )
    assert {r.termination for r in result.rows} == {"max_turns"}


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("max_cost", 0, "--max-cost"),
        ("max_tokens", 0, "--max-tokens"),
        ("provider_concurrency", 0, "--provider-concurrency"),
        ("base_url", "ftp://x", "--base-url"),
        ("base_url", "http://user:pw@host/v1", "credentials"),
    ],
)
async def test_bad_limits_fail_before_anything_runs(tmp_path, field, value, flag):
    with pytest.raises(RunConfigError, match=flag):
        await execute(RunConfig(db=tmp_path / "r.db", **{field: value}))
    assert not (tmp_path / "r.db").exists()


def test_estimate_prices_a_hosted_run_without_running_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    db = tmp_path / "r.db"
    argv = ["run", "--estimate", "--json", "--limit", "5", "--trials", "2", "--db", str(db)]
    assert main([*argv, "--model", "anthropic:claude-sonnet-4-5"]) == 0
    priced = json.loads(capsys.readouterr().out)
    assert priced["episodes"] == 10 and priced["input_tokens"] > 10 * 1000 and priced["cost_usd"] > 0
    assert main([*argv, "--model", "openai:local-llama", "--base-url", "http://127.0.0.1:9/v1"]) == 0
    unpriced = json.loads(capsys.readouterr().out)
    assert unpriced["cost_usd"] is None and unpriced["unpriced_models"] == ["openai:local-llama"]
    assert unpriced["input_tokens"] == priced["input_tokens"]
    assert not db.exists()


def test_a_missing_key_is_a_clear_error_naming_the_variable(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["run", "--model", "openai:gpt-4o", "--db", str(tmp_path / "r.db")]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err
    assert not (tmp_path / "r.db").exists()
