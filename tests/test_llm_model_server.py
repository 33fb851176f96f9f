"""`mcp-resili model-server`: the scripted agents behind the real openai and anthropic SDKs, over loopback."""

import json
from dataclasses import replace

import anthropic
import httpx2
import openai
import pytest
from llm_support import anthropic_client, model_server, openai_client, play_over_mcp, serving
from mcp import Client
from test_providers_e2e import outcomes

from mcp_resili.agents.model import Reflection
from mcp_resili.client.providers.names import ToolNameMap
from mcp_resili.client.reflexion import reflection_prompt, with_memory
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.constants import EPISODE_HEADER
from mcp_resili.faults.rules import NoFaults
from mcp_resili.modelserver import TASK_HEADER, ModelServer, TaskNotRecognisedError
from mcp_resili.modelserver.conversation import NameBridge, read_memory
from mcp_resili.registry.loader import get_suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.suites.reliabilitybench.agents import RETRY_LESSON
from mcp_resili.trace import Trace, TraceHeader

pytestmark = pytest.mark.anyio
COMBINATIONS = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]


def resilibench_tools():
    suite = get_suite("resilibench")
    return [
        {"type": "function", "function": {"name": t.name, "parameters": t.input_schema}}
        for t in suite.library
    ]


@pytest.mark.parametrize(("api", "stream"), COMBINATIONS)
async def test_the_oracle_behind_each_api_plays_a_task_to_full_through_the_real_sdk(api, stream):
    suite = get_suite("resilibench")
    task = suite.default_tasks[5]
    server = ResiliServer(suite, NoFaults(), seed=3)
    episode = {"id": f"e-{api}-{stream}", "task": task.id, "trial": 0}
    async with serving(model_server().app) as url, Client(server.mcp) as mcp:
        turns = await play_over_mcp(api, stream, url, mcp, suite.prompt(task), episode)
    events = server.take_events(episode["id"])
    header = TraceHeader(
        suite=suite.name,
        task=task.id,
        episode=episode["id"],
        seed=3,
        fault_plan={"kind": "none"},
        fault_key="k",
    )
    score = suite.score(task, Trace(header=header, events=tuple(events)))
    assert score.label == "full", score.reasons
    # One call per workflow step, then finish: the oracle's whole plan went over the wire and back.
    assert turns == len(task.workflow.steps) + 1


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_the_oracle_behind_the_api_scores_what_the_in_process_oracle_scores_under_tool_faults(
    tmp_path, provider
):
    config = RunConfig(db=tmp_path / "r.db", trials=1, limit=4, seed=11, faults=("resilibench",))
    async with serving(model_server().app) as url:
        base = f"{url}/v1" if provider == "openai" else url
        hosted = await execute(replace(config, models=(f"{provider}:scripted:oracle",), base_url=base))
    scripted = await execute(replace(config, models=("scripted:oracle",), db=tmp_path / "s.db"))
    # Errors reached the model as text (Chat Completions has no error flag) and as flagged blocks
    # (Anthropic), and the oracle retried them as it does in process: same calls, same scores.
    assert outcomes(hosted.rows) == outcomes(scripted.rows)
    assert any(err for *_, ledger in outcomes(hosted.rows).values() for _, _, err, _ in ledger)
    assert all(row.input_tokens > 0 and row.output_tokens > 0 for row in hosted.rows)


async def test_each_suites_own_agents_answer_by_name_and_an_unknown_model_is_the_apis_404():
    reliability = get_suite("reliabilitybench")
    task = reliability.default_tasks[0]
    async with serving(model_server().app) as url, openai_client(url) as client:
        for model in ("scripted:naive", "learner", "scripted:learner"):
            reply = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": reliability.prompt(task)}]
            )
            assert reply.choices[0].finish_reason == "tool_calls"
            assert reply.model == model
        with pytest.raises(openai.NotFoundError) as missing:
            await client.chat.completions.create(
                model="scripted:nobody", messages=[{"role": "user", "content": "x"}]
            )
        assert missing.value.code == "model_not_found" and "scripted:nobody" in missing.value.message
        listed = {m.id async for m in client.models.list()}
        assert {"scripted:oracle", "scripted:naive", "scripted:learner", "scripted:plan-follower"} <= listed


async def test_a_tool_maze_agent_asked_to_play_another_suites_task_is_a_clear_400():
    suite = get_suite("resilibench")
    async with serving(model_server().app) as url, anthropic_client(url) as client:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await client.messages.create(
                model="scripted:retry",
                max_tokens=100,
                messages=[{"role": "user", "content": suite.prompt(suite.default_tasks[0])}],
            )
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert "ToolMaze tasks only" in refused.value.body["error"]["message"]


async def test_requests_the_real_apis_refuse_get_their_exact_error_shapes():
    prompt = get_suite("resilibench").prompt(get_suite("resilibench").default_tasks[0])
    async with (
        serving(model_server().app) as url,
        openai_client(url) as client,
        anthropic_client(url) as claude,
    ):
        # A function name with a dot: OpenAI refuses it (harnesses must map MCP names).
        with pytest.raises(openai.BadRequestError) as dotted:
            await client.chat.completions.create(
                model="scripted:oracle",
                messages=[{"role": "user", "content": prompt}],
                tools=[{"type": "function", "function": {"name": "files.read", "parameters": {}}}],
            )
        assert dotted.value.param == "tools[0].function.name" and "pattern" in dotted.value.message
        # A tool result that answers no call, and a call left unanswered.
        with pytest.raises(openai.BadRequestError) as orphan:
            await client.chat.completions.create(
                model="oracle",
                messages=[
                    {"role": "user", "content": prompt},
                    {"role": "tool", "tool_call_id": "c9", "content": "{}"},
                ],
            )
        assert "must be a response to a preceding message with 'tool_calls'" in orphan.value.message
        call = {"id": "c1", "type": "function", "function": {"name": "network_fetcher", "arguments": "{}"}}
        with pytest.raises(openai.BadRequestError) as unanswered:
            await client.chat.completions.create(
                model="oracle",
                messages=[
                    {"role": "user", "content": prompt},
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "user", "content": "go on"},
                ],
            )
        assert "did not have response messages: c1" in unanswered.value.message
        # Anthropic: max_tokens is required; an unknown task is refused, saying how to name one.
        with pytest.raises(anthropic.BadRequestError) as no_budget:
            await claude.messages.create(
                model="oracle", messages=[{"role": "user", "content": prompt}], max_tokens=0
            )
        assert no_budget.value.body["error"]["message"].startswith("max_tokens:")
        with pytest.raises(anthropic.BadRequestError) as unknown:
            await claude.messages.create(
                model="oracle", max_tokens=10, messages=[{"role": "user", "content": "What is 2 + 2?"}]
            )
        assert TASK_HEADER in unknown.value.body["error"]["message"]
        # Not JSON at all, straight over HTTP: still the API's shape, never a traceback.
        async with httpx2.AsyncClient() as raw:
            garbage = await raw.post(f"{url}/v1/chat/completions", content=b"{not json")
            empty = await raw.post(f"{url}/v1/messages", json=[])
        assert garbage.status_code == 400 and garbage.json()["error"]["type"] == "invalid_request_error"
        assert empty.status_code == 400 and empty.json()["type"] == "error"
        assert "Traceback" not in garbage.text + empty.text


async def test_the_task_is_recognised_through_wrapping_memory_headers_and_other_variants():
    index = model_server().index
    resilibench = get_suite("resilibench")
    task = resilibench.default_tasks[2]
    prompt = resilibench.prompt(task)
    wrapped = "You are a careful agent.\n\n" + " ".join(prompt.split()) + "\n\nBe brief."
    assert index.recognise(["", wrapped]).task.id == task.id
    remembered = with_memory(prompt, [Reflection(0, "retry more"), Reflection(1, "line one\nline two")])
    assert index.recognise(["", remembered]).task.id == task.id
    assert read_memory(remembered) == (Reflection(0, "retry more"), Reflection(1, "line one\nline two"))
    # A task outside the default set, in a variant whose text differs from the baseline's.
    far = resilibench.tasks[4321]
    assert index.recognise([resilibench.prompt(far, "cot")]).task.id == far.id
    assert index.named(f"toolmaze/{get_suite('toolmaze').default_tasks[0].id}").suite == "toolmaze"
    with pytest.raises(TaskNotRecognisedError, match="unknown suite"):
        index.named("nosuch/task_1")


async def test_a_header_names_the_task_when_the_prompt_does_not_and_the_learner_reflects():
    reliability = get_suite("reliabilitybench")
    task = reliability.default_tasks[1]
    async with serving(model_server().app) as url:
        async with openai_client(url, default_headers={TASK_HEADER: f"reliabilitybench/{task.id}"}) as named:
            reply = await named.chat.completions.create(
                model="learner", messages=[{"role": "user", "content": "do the thing"}]
            )
        assert reply.choices[0].message.tool_calls
        episode = json.dumps({"id": "ep", "task": task.id})
        call = reply.choices[0].message.tool_calls[0]
        conversation = [
            {"role": "user", "content": reliability.prompt(task)},
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": "Error TIMEOUT: the calendar did not answer",
            },
            {"role": "assistant", "content": "Task completed."},
            {"role": "user", "content": reflection_prompt("completed", None)},
        ]
        async with openai_client(url, default_headers={EPISODE_HEADER: episode}) as client:
            reflected = await client.chat.completions.create(model="learner", messages=conversation)
            # Its memory, in the first prompt as our runner writes it, makes it retry like the oracle.
            lesson = with_memory(reliability.prompt(task), [Reflection(0, RETRY_LESSON)])
            again = await client.chat.completions.create(
                model="learner", messages=[{"role": "user", "content": lesson}]
            )
    assert RETRY_LESSON in reflected.choices[0].message.content
    assert f"{call.function.name} (Error TIMEOUT" in reflected.choices[0].message.content
    assert reflected.choices[0].finish_reason == "stop"
    assert again.choices[0].message.tool_calls


async def test_usage_is_deterministic_grows_with_the_conversation_and_a_small_budget_stops_the_answer():
    suite = get_suite("resilibench")
    prompt = suite.prompt(suite.default_tasks[0])
    async with serving(model_server().app) as url, anthropic_client(url) as client:
        first = await client.messages.create(
            model="oracle", max_tokens=500, messages=[{"role": "user", "content": prompt}]
        )
        same = await client.messages.create(
            model="oracle", max_tokens=500, messages=[{"role": "user", "content": prompt}]
        )
        longer = await client.messages.create(
            model="oracle",
            max_tokens=500,
            messages=[
                {"role": "user", "content": prompt},
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": first.content[0].id, "content": "Error X: no"}
                    ],
                },
            ],
        )
        counted = await client.messages.count_tokens(
            model="oracle", messages=[{"role": "user", "content": prompt}]
        )
        cut = await client.messages.create(
            model="oracle", max_tokens=1, messages=[{"role": "user", "content": prompt}]
        )
    assert first.usage == same.usage and first.id == same.id
    assert longer.usage.input_tokens > first.usage.input_tokens > 0
    assert counted.input_tokens == first.usage.input_tokens
    # The error result was read as an error: the oracle calls the same tool again.
    assert longer.content[0].name == first.content[0].name and longer.content[0].id != first.content[0].id
    assert cut.stop_reason == "max_tokens" and cut.content == [] and cut.usage.output_tokens == 1


def test_tool_names_round_trip_through_the_standard_mapping_or_a_harness_of_its_own():
    mcp_names = ["files.read", "files_read", "data.parse-v2", "x" * 80, "finish"]
    standard = ToolNameMap.build(mcp_names)
    offered = [standard.provider_name(n) for n in mcp_names]
    assert all("." not in name and len(name) <= 64 for name in offered)
    bridge = NameBridge(offered, mcp_names)
    assert [bridge.mcp(name) for name in offered] == mcp_names
    assert [bridge.provider(name) for name in mcp_names] == offered
    # A harness with its own mapping (dots to double underscores) is matched ignoring separators.
    own = NameBridge(["DATA__PARSE-V2", "finish"], mcp_names)
    assert own.mcp("DATA__PARSE-V2") == "data.parse-v2" and own.provider("data.parse-v2") == "DATA__PARSE-V2"
    # An MCP tool the request does not offer comes back under the standard provider name.
    assert own.provider("files.read") == standard.provider_name("files.read")


async def test_a_server_with_a_token_refuses_another_key_in_each_apis_shape():
    server = ModelServer(model_server().index.suites, index=model_server().index, token="t" * 24)
    async with serving(server.app) as url:
        async with openai_client(url, api_key="wrong") as client:
            with pytest.raises(openai.AuthenticationError) as refused:
                await client.chat.completions.create(
                    model="oracle", messages=[{"role": "user", "content": "x"}]
                )
        async with anthropic_client(url, api_key="t" * 24) as claude:
            with pytest.raises(anthropic.BadRequestError):  # let in: refused for the prompt, not the key
                await claude.messages.create(
                    model="oracle", max_tokens=5, messages=[{"role": "user", "content": "x"}]
                )
    assert refused.value.code == "invalid_api_key"
