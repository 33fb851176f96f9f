"""The inspect_ai integration: our suites as inspect tasks, our scripted agents as inspect models.

One in-process ``eval()`` for the whole file (inspect's first eval costs seconds of imports): a
ResiliBench task over per-sample stdio servers, one over a shared HTTP server, and one with
``-T max_turns``, 2 tasks x 2 epochs each, compared call for call with ``mcp-resili run``. The time
limit is checked with inspect's own OpenAI provider against a loopback fake model API. Everything else
is a unit test.

On ResiliBench rather than the tiny suite: inspect starts each sample's stdio server with the MCP SDK's
default environment (no PYTHONPATH), where only an installed package's suite is found, and the naive
agent's calls that inspect refuses itself (schema-invalid arguments) come from ResiliBench's tasks.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.model_server import Failure, FakeModelServer, oracle_policy, serve
from inspect_ai import eval as inspect_eval
from inspect_ai import eval_async
from inspect_ai.log import EvalLog, read_eval_log
from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    get_model,
)
from inspect_ai.scorer import SampleScore, Score
from inspect_ai.tool import ToolCall, ToolCallError
from mcp import Client
from servers import http_server

from mcp_resili.agents.model import AssistantMessage, ToolResultsMessage, UserMessage
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.faults import NoFaults, parse_fault_spec
from mcp_resili.integrations.inspect import solver
from mcp_resili.integrations.inspect.episode import Outcome, SampleEpisode, file_safe
from mcp_resili.integrations.inspect.errors import ArgumentError
from mcp_resili.integrations.inspect.metrics import numbers, pass_hat_k, suite_metrics
from mcp_resili.integrations.inspect.models import ScriptedAgentAPI, to_messages
from mcp_resili.integrations.inspect.scorer import episode_trace
from mcp_resili.integrations.inspect.tasks import SUITE_ENTRY_POINTS, SUITE_TASKS, suite_task
from mcp_resili.registry.loader import ENTRY_POINT_GROUP, get_suite, suite_names
from mcp_resili.server.app import ResiliServer
from mcp_resili.tasks.model import resolve_arguments
from mcp_resili.trace import EpisodeEndEvent, FinishEvent, ToolCallEvent

pytestmark = [
    pytest.mark.anyio,
    # inspect's model retry policy still passes tenacity a parameter tenacity deprecated.
    pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning"),
]

#: Two ResiliBench tasks whose naive trials (seed 0, default faults) include calls inspect refuses
#: itself (schema-invalid arguments), so the comparison with the runner covers the merge.
TASKS = ("task_3cea3129", "task_37568ce7")
EPOCHS = 2
#: A call budget below the tasks' own (10): the score's budget components depend on it.
MAX_TURNS = 4


# --- one eval, compared with mcp-resili run ---------------------------------------------------------


def _by_trial(log: EvalLog) -> dict[tuple[str, int], Any]:
    assert log.samples is not None
    return {(str(s.id), s.epoch - 1): s for s in log.samples}


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("inspect")
    with http_server("--suite", "resilibench", "--time-scale", "0", workdir=work) as server:
        stdio_logs, http_logs, budget_logs = inspect_eval(
            [
                SUITE_TASKS["resilibench"](time_scale=0),
                SUITE_TASKS["resilibench"](server=server.url),
                SUITE_TASKS["resilibench"](time_scale=0, max_turns=MAX_TURNS),
            ],
            model="mcp_resili/naive",
            sample_id=list(TASKS),
            epochs=EPOCHS,
            log_dir=str(work / "logs"),
            display="none",
        )
    config = RunConfig(
        models=("scripted:naive",), tasks=TASKS, trials=EPOCHS, time_scale=0, db=work / "run.db"
    )
    runner = anyio.run(execute, config)
    budget = anyio.run(execute, replace(config, max_turns=MAX_TURNS, db=work / "budget.db"))
    return {
        "stdio": read_eval_log(stdio_logs.location),
        "http": read_eval_log(http_logs.location),
        "max_turns": read_eval_log(budget_logs.location),
        "runner": {(r.task_id, r.trial): r for r in runner.rows},
        "runner_max_turns": {(r.task_id, r.trial): r for r in budget.rows},
    }


@pytest.mark.parametrize(
    ("case", "run"), [("stdio", "runner"), ("http", "runner"), ("max_turns", "runner_max_turns")]
)
def test_every_sample_scores_exactly_as_mcp_resili_run_scores_the_same_trial(evaluated, case, run):
    """``-T max_turns`` included: the budget is in the trace header, as ``run --max-turns`` puts it."""
    log = evaluated[case]
    assert log.status == "success", log.error
    samples = _by_trial(log)
    assert sorted(samples) == sorted(evaluated[run])
    for (task, trial), sample in samples.items():
        score = sample.scores["resili_scorer"]
        ours = evaluated[run][task, trial]
        if case == "max_turns":
            assert score.metadata["trace"]["header"]["max_turns"] == MAX_TURNS
            assert score.metadata["score"]["components"]["budget"] == MAX_TURNS
        assert score.metadata["fault_key"] == f"{task}/{trial}"
        assert (score.answer, score.metadata["score"]) == (ours.label, ours.score)
        assert score.value == {
            "value": ours.value,
            "full": float(ours.label == "full"),
            "partial": float(ours.label == "partial"),
        }


def test_calls_inspect_refused_itself_are_in_the_scored_trace(evaluated):
    refused = [
        (sample.id, sample.epoch)
        for sample in evaluated["stdio"].samples
        for message in sample.messages
        if isinstance(message, ChatMessageTool) and message.error and message.error.type == "parsing"
    ]
    assert refused  # the chosen tasks make inspect refuse calls: the merge is exercised
    for sample in evaluated["stdio"].samples:
        events = sample.scores["resili_scorer"].metadata["trace"]["events"]
        tool_messages = [m for m in sample.messages if isinstance(m, ChatMessageTool)]
        calls = [e for e in events if e["event"] != "episode_end"]
        assert [e["seq"] for e in calls] == list(range(1, len(tool_messages) + 1))


def test_the_eval_reports_the_suite_metrics_and_removes_its_temporary_traces(evaluated):
    log = evaluated["stdio"]
    rows = evaluated["runner"].values()
    (per_epoch,) = [s for s in log.results.scores if s.reducer is None]
    assert set(per_epoch.metrics) == {"pass^1", "pass^2"}  # ResiliBench has no suite summary
    metrics = {(s.name, name): m.value for s in log.results.scores for name, m in s.metrics.items()}
    assert metrics["value", "mean"] == pytest.approx(sum(r.value for r in rows) / len(rows))
    assert metrics["full", "mean"] == pytest.approx(sum(r.label == "full" for r in rows) / len(rows))
    passes = {task: [r.label == "full" for r in rows if r.task_id == task] for task in TASKS}
    assert metrics["resili_scorer", "pass^2"] == pytest.approx(
        sum(all(full) for full in passes.values()) / len(TASKS)
    )
    for sample in log.samples:
        episode = SampleEpisode.from_store(sample.store["mcp_resili:episode"])
        assert episode.temporary and not Path(episode.trace_dir).exists()


# --- the time limit: the runner's verdicts (mcp_resili.client.loop.play_episode) ---------------------

#: The episode's time limit in these tests (the tasks' own is minutes): what the model API does at it
#: decides the verdict, nothing waits on the clock for long.
TIME_LIMIT = 0.2


async def _eval_with_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeModelServer, **options: Any
):
    """One sample with inspect's OpenAI provider at ``fake``, the episode's time limit `TIME_LIMIT`."""
    task_episode = solver.sample_episode

    def with_short_limit(*args: Any, **kwargs: Any) -> SampleEpisode:
        return replace(task_episode(*args, **kwargs), time_limit=TIME_LIMIT)

    monkeypatch.setattr(solver, "sample_episode", with_short_limit)
    async with serve(fake.app) as url:
        (log,) = await eval_async(
            SUITE_TASKS["resilibench"](time_scale=0),
            model=get_model("openai/fake", base_url=f"{url}/v1", api_key="test-key", responses_api=False),
            sample_id=TASKS[0],
            log_dir=str(tmp_path / "logs"),
            fail_on_error=False,
            **options,
        )
    (sample,) = read_eval_log(log.location).samples
    return log, sample


@pytest.mark.parametrize(
    ("fake", "detail", "options"),
    [
        # An outage: every request is a retryable 503 (the SDK retries at once, then inspect backs off
        # and retries) until the time limit. Whether the limit meets a retried call or one still in
        # its first attempt, the verdict is the same.
        (
            lambda: FakeModelServer(
                oracle_policy(), failures=lambda n: Failure(503, headers={"retry-after-ms": "1"})
            ),
            "",
            {},
        ),
        # A hung API: it accepts the request and never answers. Even an eval that scores errored
        # samples (`--score-on-error`) gives it no score.
        (
            lambda: FakeModelServer(oracle_policy(), latency=3600),
            f"the model gave no answer within {TIME_LIMIT:g}s after the time limit",
            {"score_on_error": True},
        ),
    ],
    ids=["down-until-the-limit", "hung-score-on-error"],
)
async def test_a_model_api_failing_at_the_time_limit_is_a_sample_error_never_an_agent_failure(
    tmp_path, monkeypatch, fake, detail, options
):
    """As in ``mcp-resili run``: an infrastructure error, void, never scored (nor counted in pass^k)."""
    server = fake()
    log, sample = await _eval_with_time_limit(tmp_path, monkeypatch, server, **options)
    outcome = Outcome.from_store(sample.store["mcp_resili:outcome"])
    assert outcome is not None and outcome.termination == "infrastructure_error"
    assert detail in outcome.detail
    assert sample.error is not None
    assert "infrastructure_error" in sample.error.message and outcome.detail in sample.error.message
    assert not sample.scores  # neither a failure nor a time_limit: no score at all
    assert not (log.results and any(s.metrics for s in log.results.scores))  # no mean, no pass^k
    assert server.answered == 0 and set(server.statuses) <= {503}
    episode = SampleEpisode.from_store(sample.store["mcp_resili:episode"])
    assert episode.temporary and not Path(episode.trace_dir).exists()


# --- registration ----------------------------------------------------------------------------------


def test_inspect_loads_our_entry_point_which_registers_every_suite_and_imports_no_framework_module(tmp_path):
    probe = """
import importlib.metadata, json, sys
import inspect_ai
from inspect_ai._util.registry import registry_lookup
(point,) = [p for p in importlib.metadata.entry_points(group="inspect_ai") if p.name == "mcp_resili"]
point.load()
print(json.dumps({
    "tasks": sorted(n for n in sys.argv[1:] if registry_lookup("task", "mcp_resili/" + n) is not None),
    "modules": sorted(m for m in sys.modules if m.startswith("mcp_resili")),
}))
"""
    # Run where inspect users do: outside the checkout (whose mcp_resili.egg-info, first on the path
    # from its root, hides the editable install's metadata, and with it the mcp_resili/ prefix), with
    # the tiny suite installed as in this process (its dist-info's directory on the path): a third
    # party's suite is registered too.
    tiny_site = Path(str(importlib.metadata.distribution("tiny-suite").locate_file("")))
    proc = subprocess.run(
        [sys.executable, "-c", probe, *suite_names()],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", os.defpath), "HOME": str(tmp_path), "PYTHONPATH": str(tiny_site)},
        timeout=120,
        check=True,
    )
    found = json.loads(proc.stdout)
    assert found["tasks"] == suite_names() and "tiny" in found["tasks"]
    face = ("mcp_resili", "mcp_resili.constants", "mcp_resili.lazy")  # the face loads its names on first use
    assert all(m in face or m.startswith("mcp_resili.integrations") for m in found["modules"])
    assert SUITE_ENTRY_POINTS == ENTRY_POINT_GROUP


def test_mcp_resili_models_are_our_scripted_agents_and_an_unknown_one_names_the_others():
    assert isinstance(get_model("mcp_resili/oracle").api, ScriptedAgentAPI)
    with pytest.raises(ValueError, match=r"unknown scripted agent 'nosuch'; one of: .*mcp_resili/oracle"):
        ScriptedAgentAPI("nosuch")


async def test_a_scripted_model_outside_an_mcp_resili_sample_says_where_it_works():
    api = ScriptedAgentAPI("oracle")
    with pytest.raises(RuntimeError, match="only work in mcp_resili's tasks"):
        await api.generate([ChatMessageUser(content="hi")], [], "auto", GenerateConfig())


# --- task arguments --------------------------------------------------------------------------------


def test_a_fault_spec_inspect_split_at_its_commas_is_joined_back():
    spec = "resilibench:base=0.7,window=all"
    task = SUITE_TASKS["resilibench"](faults=spec.split(","), seed="3", all_tasks="false")
    assert task.metadata == {"suite": "resilibench", "faults": spec, "variant": "baseline", "seed": 3}
    assert [s.id for s in task.dataset] == [t.id for t in get_suite("resilibench").default_tasks]


@pytest.mark.parametrize(
    ("arguments", "names"),
    [
        ({"faults": "bogus"}, "bogus"),
        ({"variant": "nope"}, "nope"),
        ({"server": "ftp://127.0.0.1/mcp"}, "-T server"),
        ({"server": "http://127.0.0.1:9/mcp", "faults": "none"}, "-T faults"),
        ({"seed": "three"}, "-T seed"),
        ({"max_turns": 0}, "-T max_turns"),
        ({"time_scale": -1}, "-T time_scale"),
        ({"all_tasks": "maybe"}, "-T all_tasks"),
    ],
)
def test_a_bad_task_argument_fails_in_one_line_naming_it_before_any_server_starts(arguments, names):
    with pytest.raises(ValueError) as err:
        suite_task("resilibench", **arguments)
    assert names in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("where", ["under_a_file", "/proc/nosuch/traces"])
def test_a_trace_dir_no_trace_can_be_written_to_fails_in_one_line_naming_it(tmp_path, where):
    if where == "under_a_file":
        (tmp_path / "file").write_text("", encoding="utf-8")
        where = str(tmp_path / "file" / "traces")
    with pytest.raises(ArgumentError) as err:
        suite_task("resilibench", trace_dir=where)
    message = str(err.value)
    assert f"-T trace_dir: cannot write traces to {where!r}" in message and "\n" not in message


def test_a_trace_dir_is_created_when_missing(tmp_path):
    suite_task("resilibench", trace_dir=str(tmp_path / "new" / "traces"))
    assert (tmp_path / "new" / "traces").is_dir()
    assert list((tmp_path / "new" / "traces").iterdir()) == []  # the write probe left nothing


def test_a_shared_server_nothing_listens_at_is_refused_in_one_line_before_any_sample_runs():
    with socket.socket() as probe:  # a loopback port that was free a moment ago and is closed now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ValueError) as err:
        suite_task("resilibench", server=f"http://127.0.0.1:{port}/mcp")
    message = str(err.value)
    assert f"nothing answers at http://127.0.0.1:{port}/mcp" in message and "\n" not in message


# --- the message adapter ---------------------------------------------------------------------------


def test_an_inspect_conversation_reads_as_the_messages_our_agents_play_from():
    calls = [
        ToolCall(id="c1", function="reader", arguments={"source": "a.csv"}),
        ToolCall(id="c2", function="parser", arguments={}),
        ToolCall(id="c3", function="echo", arguments={}),
    ]
    system, messages = to_messages(
        [
            ChatMessageSystem(content="be careful"),
            ChatMessageUser(content="do the task"),
            ChatMessageAssistant(content="calling", tool_calls=calls),
            ChatMessageTool(content='{"rows": 3}', tool_call_id="c1", function="reader"),
            ChatMessageTool(
                content="",
                tool_call_id="c2",
                function="parser",
                error=ToolCallError("unknown", "Error TIMEOUT: too slow"),
            ),
            ChatMessageTool(content="plain text", tool_call_id="c3", function="echo"),
            ChatMessageUser(content="go on"),
        ]
    )
    assert system == "be careful"
    user, assistant, results, again = messages
    assert user == UserMessage("do the task") and again == UserMessage("go on")
    assert isinstance(assistant, AssistantMessage)
    assert [(c.id, c.name, c.arguments) for c in assistant.tool_calls] == [
        ("c1", "reader", {"source": "a.csv"}),
        ("c2", "parser", {}),
        ("c3", "echo", {}),
    ]
    assert isinstance(results, ToolResultsMessage)
    ok, failed, text = results.results
    assert (ok.is_error, ok.structured, ok.text) == (False, {"rows": 3}, '{"rows": 3}')
    assert (failed.is_error, failed.text, failed.structured) == (True, "Error TIMEOUT: too slow", None)
    assert (text.is_error, text.structured) == (False, None)


# --- the scorer on a trace our server wrote --------------------------------------------------------


def _episode(tmp_path: Path, task: str, **fields: Any) -> SampleEpisode:
    values: dict[str, Any] = {
        "suite": "resilibench",
        "task": task,
        "trial": 1,
        "id": file_safe(f"{task}-t1-abc:def"),
        "seed": 0,
        "faults": "none",
        "variant": "baseline",
        "max_turns": 20,
        "time_limit": 300.0,
        "trace_dir": str(tmp_path),
        "temporary": False,
    }
    return SampleEpisode(**{**values, **fields})


async def test_calls_inspect_refused_are_put_back_where_the_agent_made_them(tmp_path):
    suite = get_suite("resilibench")
    task = suite.default_tasks[0]
    first = task.workflow.steps[0]
    episode = _episode(tmp_path, task.id)
    server = ResiliServer(
        suite, NoFaults(), task=task.id, episode=episode.id, trial=episode.trial, trace_dir=tmp_path
    )
    arguments = resolve_arguments(first, task.inputs, {})
    async with Client(server.mcp) as client:
        assert not (await client.call_tool(first.tool, arguments)).is_error
        assert not (await client.call_tool("finish", {"status": "completed", "summary": "ok"})).is_error
    bad = {**arguments, "extra": 42}
    turns = [
        (ToolCall(id="1", function=first.tool, arguments=arguments), None),
        (
            ToolCall(id="2", function=first.tool, arguments=bad),
            ToolCallError("parsing", "42 is not a string"),
        ),
        (
            ToolCall(id="3", function="nosuch", arguments={}),
            ToolCallError("parsing", "Tool nosuch not found"),
        ),
        (ToolCall(id="4", function="search_tools", arguments={"query": "x"}), None),
        (ToolCall(id="5", function="finish", arguments={"status": "completed", "summary": "ok"}), None),
    ]
    messages: list[Any] = [ChatMessageUser(content="go")]
    for call, error in turns:
        messages.append(ChatMessageAssistant(content="", tool_calls=[call]))
        messages.append(
            ChatMessageTool(
                content="" if error else "{}", tool_call_id=call.id, function=call.function, error=error
            )
        )
    outcome = Outcome("completed", 5, stop_rules="resilibench")
    trace = episode_trace(episode, messages, outcome, "mcp_resili/test")
    events = trace.events
    assert [type(e) for e in events] == [
        ToolCallEvent,
        ToolCallEvent,
        ToolCallEvent,
        FinishEvent,
        EpisodeEndEvent,
    ]
    assert [e.seq for e in events[:4]] == [1, 2, 3, 4]
    assert (events[0].tool, events[0].is_error) == (first.tool, False)
    assert (events[1].tool, events[1].arguments, events[1].error_code) == (first.tool, bad, "INVALID_INPUT")
    assert (events[2].tool, events[2].error_code) == ("nosuch", "UNKNOWN_TOOL")
    assert events[4].termination == "completed"
    assert (trace.header.fault_key, trace.header.model) == (f"{task.id}/1", "mcp_resili/test")
    assert suite.score(task, trace).components["tool_calls"] == 3


def test_an_episode_that_made_no_call_is_scored_from_a_header_the_scorer_builds(tmp_path):
    suite = get_suite("resilibench")
    task = suite.default_tasks[1]
    episode = _episode(tmp_path, task.id, faults="lambda=0.2")
    trace = episode_trace(episode, [ChatMessageUser(content="go")], None, "mcp_resili/naive")
    assert trace.events == ()
    assert trace.header.fault_key == f"{task.id}/1"
    assert trace.header.fault_plan == parse_fault_spec("lambda=0.2", suite.spec_scope).to_dict()
    assert suite.score(task, trace).label == "failure"


# --- metrics -----------------------------------------------------------------------------------------


def _sample(task: str, full: bool, metadata: dict[str, Any] | None = None) -> SampleScore:
    value = {"value": float(full), "full": float(full), "partial": 0.0}
    return SampleScore(score=Score(value=value, metadata=metadata), sample_id=task)


def test_pass_hat_k_over_epochs_is_the_runners_unbiased_estimator():
    scores = [_sample("a", f) for f in (True, True, False)] + [_sample("b", True) for _ in range(3)]
    assert pass_hat_k()(scores) == pytest.approx(
        {"pass^1": (2 / 3 + 1) / 2, "pass^2": (1 / 3 + 1) / 2, "pass^3": 0.5}
    )
    assert pass_hat_k()([]) == {}


def test_suite_metrics_hand_every_epoch_to_the_suites_own_summary():
    suite = get_suite("reliabilitybench")
    tasks = [t.id for t in suite.default_tasks[:2]]
    components = {"faults": 1, "recovered_faults": 1, "tool_calls": 3, "gold_steps": 2, "domain": "d"}

    def metadata(task: str, trial: int, full: bool) -> dict[str, Any]:
        label = "full" if full else "failure"
        score = {
            "suite": suite.name,
            "task": task,
            "label": label,
            "value": float(full),
            "components": components,
        }
        return {
            "suite": suite.name,
            "task": task,
            "trial": trial,
            "episode": f"{task}-{trial}",
            "faults": "lambda=0.2",
            "variant": "baseline",
            "termination": "completed",
            "score": score,
        }

    scores = [_sample(t, n != 1, metadata(t, n, n != 1)) for t in tasks for n in range(3)]
    found = suite_metrics()(scores)
    assert found["cells.tasks"] == 2 and found["cells.episodes"] == 6
    assert found["cells.lambda"] == 0.2
    assert found["cells.recovery.faults_met"] == 6 and found["cells.recovery.recovery_rate"] == 1.0
    assert found["cells.recovery.episodes_with_faults_passed"] == 4
    assert suite_metrics()([]) == {}


def test_summary_numbers_are_named_by_path_and_pooled_records_stand_for_their_list():
    summary = {
        "marginals": [
            {"mode": "NP", "level": "C1", "tsr": 0.5, "ok": True},
            {"mode": "NP", "level": "all", "tsr": 0.25, "note": "text"},
            {"mode": "all", "level": "C1", "tsr": 0.75},
            {"mode": "all", "level": "all", "tsr": 0.6},  # overall: named by the list alone
        ],
        "pooled": [{"mode": "NP", "rc": 0.5}, {"mode": "all", "rc": 0.1}],
        "curve": [{"k": 1, "value": 0.9, "ci95": [0.1, 0.9]}, {"k": 2, "value": None}],
        "one": [{"name": "x", "n": 3}],
        "deep": {"a": {"b": {"c": 1}}},
    }
    assert numbers(summary) == {
        "marginals.NP.tsr": 0.25,
        "marginals.C1.tsr": 0.75,
        "marginals.tsr": 0.6,
        "pooled.rc": 0.1,
        "curve.k=1.value": 0.9,
        "one.n": 3.0,
    }
