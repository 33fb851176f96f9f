"""Model-API coping, verdicts, usage and the joined ledger, on cases worked out by hand (pure functions)."""

from __future__ import annotations

import json
from typing import Any

from mcp_resili.faults.model_api import ModelFaultDecision
from mcp_resili.harness.agent import verdict
from mcp_resili.harness.builtin import TurnCalls, join_ledger, loop_gave_up_on_injected, routed_spec
from mcp_resili.harness.contract import REDACTED, redact, secrets_in
from mcp_resili.harness.model_api import model_name, upstream_key, usage_of
from mcp_resili.harness.process import ProgramExit
from mcp_resili.report.model_coping import model_coping_section
from mcp_resili.scoring.model import Score
from mcp_resili.scoring.model_coping import ended_by_upstream, model_coping, with_model_coping
from mcp_resili.store import EpisodeRow
from mcp_resili.trace import (
    EpisodeEndEvent,
    FinishEvent,
    ModelFaultEvent,
    ModelTurnEvent,
    ReflectionEvent,
    ToolCallEvent,
    Trace,
    TraceHeader,
)

EP = "e1"


def call(
    ordinal: int, status: int | None, fault: dict[str, Any] | None = None, **extra: Any
) -> ModelFaultEvent:
    decision = ModelFaultDecision.model_validate(
        {
            "plan": "rules",
            "ordinal": ordinal,
            "roll": 0.0 if fault else None,
            "rule": 0 if fault else None,
            "fault": fault,
        }
    )
    return ModelFaultEvent(
        episode=EP, ordinal=ordinal, api="openai", stream=False, decision=decision, status=status, **extra
    )


def end(termination: str) -> EpisodeEndEvent:
    return EpisodeEndEvent(episode=EP, termination=termination, turns=3)  # type: ignore[arg-type]


def trace(*events: Any) -> Trace:
    header = TraceHeader(suite="s", task="t", episode=EP, seed=0, fault_plan={}, fault_key="t/0")
    return Trace(header=header, events=events)


def finish() -> FinishEvent:
    return FinishEvent(episode=EP, seq=9, status="completed")


def test_a_fault_is_survived_when_a_later_call_is_answered_cleanly_or_the_agent_finishes():
    rate_limited = {"type": "rate_limit", "retry_after": 1.0}
    empty = {"type": "empty_completion"}
    stopped = model_coping(
        trace(call(0, 429, rate_limited), call(1, 200), call(2, 200, empty), end("agent_stopped"))
    )
    # The 429 was followed by a clean answer; the empty answer by nothing: the agent stopped on it.
    assert stopped["llm_faults"] == 2 and stopped["llm_survived"] == 1 and stopped["llm_survival_rate"] == 0.5
    assert stopped["llm_rate_limit_survived"] == 1 and stopped["llm_empty_completion_survived"] == 0
    assert stopped["llm_failed_after"] == "empty_completion" and stopped["llm_harness_failure"] is False
    finished = model_coping(trace(call(0, 200), call(1, 200, empty), finish(), end("completed")))
    assert finished["llm_survived"] == 1 and finished["llm_failed_after"] is None
    crashed = model_coping(
        trace(call(0, 500, {"type": "server_error", "status": 500}), end("harness_failure"))
    )
    assert crashed["llm_harness_failure"] is True and crashed["llm_failed_after"] == "server_error"


def test_only_an_uninjected_failure_of_the_last_call_ends_an_episode_as_the_upstreams():
    unreachable = call(1, 502, detail="the upstream is unreachable (not injected): ClientConnectorError")
    assert ended_by_upstream([call(0, 200), unreachable]) == unreachable
    assert ended_by_upstream([unreachable.model_copy(update={"ordinal": 0}), call(1, 200)]) is None
    assert ended_by_upstream([call(0, 429, upstream_status=429)]) is not None  # a real API's own 429
    assert ended_by_upstream([call(0, 400, upstream_status=400)]) is None  # the agent's bad request
    injected = call(0, 503, {"type": "server_error", "status": 503})
    assert ended_by_upstream([injected]) is None
    counted = model_coping(trace(call(0, 200), unreachable, end("infrastructure_error")))
    assert counted["llm_uninjected_failures"] == 1 and counted["llm_faults"] == 0


def test_scores_of_episodes_without_a_gateway_keep_their_components():
    score = Score(suite="s", task="t", label="full", value=1.0, components={"x": 1})
    assert with_model_coping(score, trace(end("completed"))) == score
    assert "llm_calls" in with_model_coping(score, trace(call(0, 200), end("completed"))).components


def exit_(
    status: int | None = 0, ended_by: str | None = None, stderr: str = "", stdout: str = ""
) -> ProgramExit:
    return ProgramExit(status, ended_by, stdout, stderr, 1.0)


def test_verdicts_of_how_an_agent_program_ended():
    kw = {"time_limit": 5.0, "tokens": 10, "max_tokens": None}
    assert verdict(exit_(1, stderr="boom\nValueError: x\n"), [], **kw).termination == "harness_failure"
    assert "ValueError: x" in verdict(exit_(1, stderr="boom\nValueError: x\n"), [], **kw).detail
    assert "signal 9" in verdict(exit_(-9), [], **kw).detail
    assert verdict(exit_(0), [], **kw).termination == "agent_stopped"
    assert verdict(exit_(0, stdout="All done: task completed."), [], **kw).termination == "completed"
    # finish decides, whatever happened after it
    assert verdict(exit_(1), [finish()], **kw).termination == "completed"
    assert verdict(exit_(None, "time_limit"), [finish()], **kw).termination == "completed"
    assert verdict(exit_(None, "time_limit"), [], **kw).termination == "time_limit"
    assert verdict(exit_(None, "max_tokens"), [call(0, 200)], **kw).termination == "max_tokens"
    # a model API that hung with nobody injecting it, at the time limit: not the agent's
    hung = call(3, None, detail="the client went away mid-answer")
    assert verdict(exit_(None, "time_limit"), [hung], **kw).termination == "infrastructure_error"
    injected_hang = call(3, None, {"type": "hang", "seconds": None})
    assert verdict(exit_(None, "time_limit"), [injected_hang], **kw).termination == "time_limit"
    upstream = call(2, 502, detail="the upstream is unreachable (not injected): X")
    assert verdict(exit_(1), [call(0, 200), upstream], **kw).termination == "infrastructure_error"
    crashed_tool = ToolCallEvent(
        episode=EP, seq=1, tool="t", arguments={}, is_error=True, error_code="TOOL_CRASHED"
    )
    assert verdict(exit_(0), [crashed_tool], **kw).termination == "infrastructure_error"


def test_usage_is_read_from_either_api_whole_or_streamed():
    whole = json.dumps({"usage": {"prompt_tokens": 120, "completion_tokens": 7}}).encode()
    assert getattr(usage_of(False, whole, b"", contiguous=True), "input_tokens", None) == 120
    openai_stream = (
        b'data: {"choices":[]}\n\ndata: {"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":3}}\n\n'
    )
    assert (
        usage_of(True, openai_stream, b"", contiguous=True).input_tokens,
        usage_of(True, openai_stream, b"", contiguous=True).output_tokens,
    ) == (50, 3)
    anthropic = (
        b'event: message_start\ndata: {"type":"message_start","message":'
        b'{"usage":{"input_tokens":80,"output_tokens":1}}}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":12}}\n\n'
    )
    found = usage_of(True, anthropic[:70], anthropic[70:], contiguous=True)  # head and tail meet
    assert found is not None and (found.input_tokens, found.output_tokens) == (80, 12)
    # A long stream's middle was dropped: the head's message_start and the tail's message_delta count.
    apart = usage_of(True, anthropic[:112] + b"\n\n", b'x"}}\n\n' + anthropic[112:], contiguous=False)
    assert apart is not None and (apart.input_tokens, apart.output_tokens) == (80, 12)
    assert usage_of(True, b"data: {}\n\n", b"", contiguous=True) is None
    assert usage_of(False, b"<html>", b"", contiguous=True) is None


def test_models_find_their_upstream_and_names():
    assert upstream_key("scripted:oracle", None) == "model-server"
    assert upstream_key("openai:gpt-4.1", None) == "https://api.openai.com/v1"
    assert upstream_key("anthropic:claude-x", "http://h/v1") == "http://h/v1"
    assert model_name("openai:gpt-4.1") == "gpt-4.1" and model_name("scripted:oracle") == "scripted:oracle"
    assert routed_spec("scripted:naive") == "openai:scripted:naive"
    assert routed_spec("text:scripted:oracle") == "text:openai:scripted:oracle"
    assert routed_spec("anthropic:claude-x") == "anthropic:claude-x"


def test_secrets_are_redacted_and_placeholders_are_not_secrets():
    found = secrets_in({"OPENAI_API_KEY": "sk-abcdefgh1234", "ANTHROPIC_API_KEY": "mcp-resili-offline"})
    assert found == ("sk-abcdefgh1234",)
    assert redact("key sk-abcdefgh1234 leaked", found) == f"key {REDACTED} leaked"


def test_each_turns_ledger_goes_before_what_the_turn_produced():
    ledger = [call(0, 429, {"type": "rate_limit"}), call(1, 200), call(2, 200), call(3, 500), call(4, 200)]
    turn1 = ModelTurnEvent(episode=EP, turn=1)
    tool = ToolCallEvent(episode=EP, seq=1, tool="t", arguments={}, is_error=False)
    written = ReflectionEvent(episode=EP, role="written", from_trial=0, text="r")
    events = [turn1, tool, end("infrastructure_error"), written]
    turns = [TurnCalls("act", 0, 2, False), TurnCalls("act", 2, 4, True), TurnCalls("reflect", 4, 5, False)]
    joined = join_ledger(events, ledger, turns)
    kinds = [(e.event, getattr(e, "ordinal", None)) for e in joined]
    assert kinds == [
        ("model_fault", 0),
        ("model_fault", 1),
        ("model_turn", None),
        ("tool_call", None),
        ("model_fault", 2),
        ("model_fault", 3),
        ("episode_end", None),
        ("model_fault", 4),
        ("reflection", None),
    ]
    assert loop_gave_up_on_injected(turns, ledger) is None  # call 3 failed, but nobody injected it
    injected = [*ledger[:3], call(3, 400, {"type": "content_filter"}), ledger[4]]
    gave_up = loop_gave_up_on_injected(turns, injected)
    assert gave_up is not None and gave_up.ordinal == 3


def row(
    components: dict[str, Any] | None, label: str | None = "full", termination: str = "completed"
) -> EpisodeRow:
    score = None if components is None else {"label": label, "value": 1.0, "components": components}
    return EpisodeRow(
        run_id="r",
        episode_id="e",
        model="scripted:oracle",
        faults="resilibench",
        variant="baseline",
        task_id="t",
        trial=0,
        termination=termination,
        label=label,
        value=None if label is None else 1.0,
        score=score,
        trace="",
        architecture="agent-cmd",
    )


def test_the_report_section_counts_faults_met_and_survived_and_void_episodes_apart():
    one = model_coping(trace(call(0, 429, {"type": "rate_limit"}), call(1, 200), end("completed")))
    two = model_coping(trace(call(0, 200, {"type": "empty_completion"}), end("harness_failure")))
    section = model_coping_section(
        [row(one), row(two, "failure", "harness_failure"), row(None, None, "infrastructure_error")]
    )
    assert section is not None
    cell = next(iter(section.data["cells"].values()))
    assert cell["episodes"] == 2 and cell["infrastructure_errors"] == 1 and cell["harness_failures"] == 1
    assert cell["types"]["all"]["met"] == 2 and cell["types"]["all"]["survived"] == 1
    assert cell["types"]["empty_completion"] == {
        "met": 1,
        "survived": 0,
        "survival": cell["types"]["empty_completion"]["survival"],
    }
    assert model_coping_section([row({"x": 1})]) is None
