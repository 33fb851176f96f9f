"""The MCP server: tools, validation, dependencies, faults, episodes, prompts, traces, and tools that
crash or hang. Played on the tiny suite (tests/tiny_suite), handed down as a `Suite` object."""

import threading
from dataclasses import replace

import anyio
import mcp_types as types
import pydantic_core
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError
from tiny_suite import TinyFaults
from tiny_suite import suite as tiny_suite

from mcp_resili.cli import main
from mcp_resili.constants import META_EPISODE, META_EVENT
from mcp_resili.faults import (
    CallOutcome,
    ErrorFault,
    NoFaults,
    RuleFaults,
    parse_fault_spec,
)
from mcp_resili.faults.chaos import HighLatency, SchemaDrift
from mcp_resili.registry.suites import Suite
from mcp_resili.server.app import PROMPT_PAGE_SIZE, EpisodeRequest, ResiliServer
from mcp_resili.server.backend import INLINE_MAX_CHARS, INLINE_MAX_VALUES, _counted_small, small_arguments
from mcp_resili.tools import ToolLibrary, ToolSpec
from mcp_resili.trace import Trace

pytestmark = pytest.mark.anyio

TINY = tiny_suite()


def make_server(plan=None, suite=TINY, **kw):
    # These tests read each call's recorded event from its result (--expose-faults).
    kw.setdefault("expose_faults", True)
    return ResiliServer(suite, plan or NoFaults(), **kw)


def meta(episode, **extra):
    return {META_EPISODE: {"id": episode, **extra}}


async def test_lists_the_suites_tools_and_finish_with_schemas_and_discovery_only_when_the_suite_asks():
    for discovery in (False, True):
        async with Client(make_server(suite=replace(TINY, discovery=discovery)).mcp) as client:
            tools = (await client.list_tools()).tools
        names = {t.name for t in tools}
        expected = {"lookup", "scale", "echo", "record", "list_records", "finish"}
        assert names == expected | ({"search_tools", "tool_info"} if discovery else set())
        lookup = next(t for t in tools if t.name == "lookup")
        assert lookup.input_schema["required"] == ["key"] and lookup.output_schema is not None


async def test_successful_call_returns_structured_output_and_its_trace_event():
    async with Client(make_server().mcp) as client:
        result = await client.call_tool("lookup", {"key": "plum"}, meta=meta("e1"))
    assert not result.is_error
    assert result.structured_content == {"key": "plum", "value": 7}
    event = result.meta[META_EVENT]
    assert event["event"] == "tool_call" and event["fault"] is None and event["seq"] == 1


async def test_invalid_arguments_name_the_problem_and_do_not_run_the_tool():
    server = make_server()
    async with Client(server.mcp) as client:
        result = await client.call_tool("lookup", {"key": 3, "extra": 1}, meta=meta("e1"))
        assert result.is_error
        text = result.content[0].text
        assert text.startswith("Error INVALID_INPUT") and "key" in text and "extra" in text
        assert result.meta[META_EVENT]["decision"] is None  # rejected before the fault decision
        again = await client.call_tool("lookup", {"key": "apple"}, meta=meta("e1"))
    assert not again.is_error


async def test_unknown_tool_is_an_error_result_listing_the_tools():
    async with Client(make_server().mcp) as client:
        result = await client.call_tool("no_such_tool", {}, meta=meta("e1"))
    assert (
        result.is_error
        and "UNKNOWN_TOOL" in result.content[0].text
        and "list_records" in result.content[0].text
    )


async def test_dependency_check_blocks_until_the_dependency_succeeded():
    entry = {"label": "a", "value": 1}
    async with Client(make_server().mcp) as client:
        blocked = await client.call_tool("record", entry, meta=meta("e1"))
        assert blocked.is_error and "DEPENDENCY_NOT_MET" in blocked.content[0].text
        assert blocked.meta[META_EVENT]["unmet_dependencies"] == ["lookup"]
        missing = await client.call_tool("lookup", {"key": "nope"}, meta=meta("e1"))  # its own error
        assert missing.is_error and missing.content[0].text.startswith("Error NOT_FOUND")
        still = await client.call_tool("record", entry, meta=meta("e1"))  # a failed run meets nothing
        assert "DEPENDENCY_NOT_MET" in still.content[0].text
        await client.call_tool("lookup", {"key": "apple"}, meta=meta("e1"))
        ok = await client.call_tool("record", entry, meta=meta("e1"))
        assert not ok.is_error
        # another episode has not run the lookup: state is per episode
        other = await client.call_tool("record", entry, meta=meta("e2"))
    assert other.is_error and "DEPENDENCY_NOT_MET" in other.content[0].text


async def test_injected_fault_is_an_error_result_recorded_with_its_decision():
    plan = RuleFaults(rules=({"tool": "lookup", "calls": (1,), "fault": ErrorFault(code="TIMEOUT")},))
    async with Client(make_server(plan).mcp) as client:
        first = await client.call_tool("lookup", {"key": "apple"}, meta=meta("e1"))
        second = await client.call_tool("lookup", {"key": "apple"}, meta=meta("e1"))
    assert first.is_error and first.content[0].text.startswith("Error TIMEOUT")
    event = first.meta[META_EVENT]
    assert event["fault"] == {
        "type": "error",
        "code": "TIMEOUT",
        "message": "",
        "details": {},
        "explicit": True,
        "transient": True,
        "side": "request",
        "delay_seconds": 0.0,
    }
    assert event["decision"]["rule"] == 0
    assert not second.is_error


async def test_response_side_fault_runs_the_write_but_reports_an_error():
    plan = RuleFaults(rules=({"tool": "record", "fault": ErrorFault(code="TIMEOUT", side="response")},))
    server = make_server(plan)
    episode = server.episode(EpisodeRequest("e1"))
    episode.history += [CallOutcome("lookup", True)]  # the write's dependency ran earlier in this episode
    async with Client(server.mcp) as client:
        result = await client.call_tool("record", {"label": "x", "value": 4}, meta=meta("e1"))
        listed = await client.call_tool("list_records", {}, meta=meta("e1"))
    assert result.is_error and result.content[0].text.startswith("Error TIMEOUT")
    assert episode.tool_state["records"] == [{"label": "x", "value": 4}]
    assert listed.structured_content == {"records": [{"label": "x", "value": 4}], "count": 1}


async def test_same_seed_and_fault_key_give_the_same_ledger_in_separate_episodes():
    server = make_server(TinyFaults(failure=0.5))

    async def ledger(client, episode, seed):
        faults = []
        for i in range(30):
            r = await client.call_tool(
                "lookup",
                {"key": ("apple", "pear", "fig")[i % 3]},
                meta=meta(episode, fault_key="k", seed=seed),
            )
            faults.append(r.meta[META_EVENT]["fault"])
        return faults

    async with Client(server.mcp) as client:
        a = await ledger(client, "a", 1)
        b = await ledger(client, "b", 1)
        c = await ledger(client, "c", 2)
    assert a == b and a != c and any(a)


async def test_concurrent_episodes_do_not_share_state():
    server = make_server(parse_fault_spec("tiny", TINY.spec_scope))

    async def episode(client, name, results):
        for _ in range(10):
            r = await client.call_tool("lookup", {"key": "apple"}, meta=meta(name, fault_key="k"))
            results.append((name, r.meta[META_EVENT]["seq"], r.meta[META_EVENT]["decision"]["ordinal"]))

    results: list = []
    async with Client(server.mcp) as client, anyio.create_task_group() as tg:
        for name in ("x", "y", "z"):
            tg.start_soon(episode, client, name, results)
    for name in ("x", "y", "z"):
        mine = [(s, o) for n, s, o in results if n == name]
        assert sorted(mine) == [(i + 1, i) for i in range(10)]


async def test_unknown_task_in_episode_meta_is_invalid_params():
    async with Client(make_server().mcp) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("lookup", {"key": "apple"}, meta=meta("e", task="nope"))
        assert err.value.code == types.INVALID_PARAMS
        ok = await client.call_tool("lookup", {"key": "apple"}, meta=meta("e"))
    assert not ok.is_error


async def test_finish_records_completion_and_rejects_arguments_its_schema_forbids():
    # Review finding: a missing summary and an extra field were accepted against the published schema.
    forbidden = [
        ({"status": "maybe", "summary": ""}, "status: 'maybe' is not one of"),
        ({"status": "completed"}, "(arguments): 'summary' is a required property"),
        ({"status": "completed", "summary": "done", "score": 100}, "Additional properties are not allowed"),
        ({"status": "completed", "summary": 7}, "summary: 7 is not of type 'string'"),
    ]
    async with Client(make_server().mcp) as client:
        bad = [await client.call_tool("finish", arguments, meta=meta("e")) for arguments, _ in forbidden]
        good = await client.call_tool("finish", {"status": "completed", "summary": "done"}, meta=meta("e"))
    for result, (_, problem) in zip(bad, forbidden, strict=True):
        text = result.content[0].text
        assert (
            result.is_error
            and text.startswith("Error INVALID_INPUT: finish needs status")
            and problem in text
        )
        assert result.meta[META_EVENT]["event"] == "tool_call"  # recorded as a refused call, not a finish
    assert good.meta[META_EVENT]["event"] == "finish" and good.meta[META_EVENT]["status"] == "completed"


async def test_prompts_are_paginated_and_bind_the_connection_episode_to_the_task(tmp_path):
    # More tasks than a page: the tiny suite's six, each under a hundred ids.
    many = tuple(t.model_copy(update={"id": f"{t.id}-{n}"}) for n in range(20) for t in TINY.tasks)
    suite = replace(TINY, load_tasks=lambda: many)
    assert len(suite.tasks) > PROMPT_PAGE_SIZE
    server = make_server(suite=suite, trace_dir=tmp_path)
    async with Client(server.mcp) as client:
        first = await client.list_prompts()
        assert [p.name for p in first.prompts] == [t.id for t in suite.tasks[:PROMPT_PAGE_SIZE]]
        assert first.next_cursor is not None
        task = suite.tasks[3]
        prompt = await client.get_prompt(task.id)
        assert prompt.messages[0].content.text == suite.prompt(task)
        await client.call_tool("lookup", {"key": "apple"})  # no meta: the connection's episode
        with pytest.raises(MCPError):
            await client.get_prompt("nope")
    (trace_file,) = tmp_path.iterdir()
    assert Trace.read(trace_file).header.task == task.id


@pytest.mark.parametrize(
    "bad",
    [
        {"id": "e", "task": 5},
        {"id": "e", "fault_key": 7},
        {"id": "e", "seed": True},
        {"id": "e", "seed": "3"},
        {"id": "e", "trial": -1},
        {"id": "e", "trial": False},
        {"id": ""},
        "",
        "e" * 1000,
        {"id": "e", "task": None, "colour": "red"},
    ],
)
async def test_malformed_episode_meta_is_invalid_params_and_writes_nothing(tmp_path, bad):
    async with Client(make_server(trace_dir=tmp_path).mcp) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("lookup", {"key": "apple"}, meta={META_EPISODE: bad})
    assert err.value.code == types.INVALID_PARAMS
    assert list(tmp_path.iterdir()) == []


async def test_invalid_finish_is_recorded_with_its_event(tmp_path):
    async with Client(make_server(trace_dir=tmp_path).mcp) as client:
        bad = await client.call_tool("finish", {"status": "maybe"}, meta=meta("e"))
    assert bad.is_error and bad.meta[META_EVENT]["error_code"] == "INVALID_INPUT"
    (trace_file,) = tmp_path.iterdir()
    assert [c.tool for c in Trace.read(trace_file).tool_calls] == ["finish"]


async def test_episode_ids_that_clean_alike_or_come_back_on_another_server_get_trace_files_of_their_own(
    tmp_path, capsys
):
    task = TINY.tasks[0].id
    traces = tmp_path / "traces"
    # Ids whose characters are cleaned alike, that climb out of the directory, or are too long for a name.
    alike = ["c/d", "c_d", "c:d", "../c_d", "..", ".", "/", "x" * 300, "x" * 300 + "/"]
    # Two servers sharing the directory (two `serve` processes) play the same ids.
    for server in range(2):
        async with Client(make_server(trace_dir=traces).mcp) as client:
            with anyio.fail_after(60):
                for number, episode in enumerate(alike):
                    text = f"{server}-{number}"
                    await client.call_tool("echo", {"text": text}, meta=meta(episode, task=task))

    assert [path.name for path in tmp_path.iterdir()] == ["traces"]  # nothing lands outside it
    files = sorted(traces.iterdir())
    assert len(files) == 2 * len(alike) and all(path.suffix == ".jsonl" for path in files)
    assert (traces / "c_d.jsonl").is_file()  # a safe id keeps its name
    played = set()
    for path in files:
        # One header, then the one call of its own episode on its own server: nothing appended from another.
        trace = Trace.read(path)
        (call,) = trace.tool_calls
        server, number = call.arguments["text"].split("-")
        assert trace.header.episode == alike[int(number)]
        played.add((server, number))
        assert main(["score", str(path)]) == 0, capsys.readouterr().err
    assert len(played) == len(files)


# --- no answer key on the wire ---------------------------------------------------------------------


async def test_results_carry_no_fault_decision_unless_the_server_exposes_faults():
    plan = RuleFaults(rules=({"tool": "lookup", "fault": ErrorFault(code="TIMEOUT")},))
    for expose in (False, True):
        async with Client(make_server(plan, expose_faults=expose).mcp) as client:
            faulted = await client.call_tool("lookup", {"key": "apple"}, meta=meta("e"))
            clean = await client.call_tool("echo", {"text": "hi"}, meta=meta("e"))
        assert faulted.is_error and faulted.content[0].text.startswith("Error TIMEOUT")
        for result in (faulted, clean):
            assert (META_EVENT in (result.meta or {})) is expose


# --- no tool can crash or hang the server ----------------------------------------------------------


def hand_made_suite(*specs_and_simulators, inline=frozenset()):
    """A suite of hand-made tools: (ToolSpec, simulator) pairs; ``inline`` as in `ToolLibrary`."""
    specs = tuple(spec for spec, _ in specs_and_simulators)
    library = ToolLibrary(
        "hand-made", specs, {spec.name: sim for spec, sim in specs_and_simulators}, inline=inline
    )
    return Suite(
        name="hand-made",
        description="tools for server tests",
        library=library,
        load_tasks=tuple,
        render_prompt=lambda task, variant: "",
        score=lambda task, trace: None,
    )


def spec(name, **properties):
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    return ToolSpec(name=name, description=name, input_schema=schema, output_schema={"type": "object"})


async def test_a_tool_that_raises_is_tool_crashed_recorded_in_the_trace_and_the_server_keeps_serving():
    def crash(arguments, state):
        raise OverflowError("int too large to convert to float")

    suite = hand_made_suite((spec("fragile"), crash), (spec("sturdy"), lambda a, s: {"ok": True}))
    plan = RuleFaults(rules=({"tool": "fragile", "calls": (1,), "fault": ErrorFault(code="TIMEOUT")},))
    server = ResiliServer(suite, plan)
    async with Client(server.mcp) as client:
        faulted = await client.call_tool("fragile", {}, meta=meta("e"))
        crashed = await client.call_tool("fragile", {}, meta=meta("e"))
        other = await client.call_tool("sturdy", {}, meta=meta("e"))
    assert faulted.content[0].text.startswith("Error TIMEOUT")
    assert crashed.is_error and crashed.content[0].text.startswith("Error TOOL_CRASHED: fragile failed")
    assert "int too large" not in crashed.content[0].text  # no raw exception text for the model
    assert not other.is_error
    events = server.take_events("e")
    assert [(e.seq, e.tool, e.error_code) for e in events] == [
        (1, "fragile", "TIMEOUT"),
        (2, "fragile", "TOOL_CRASHED"),
        (3, "sturdy", None),
    ]
    assert [e.decision.ordinal for e in events] == [0, 1, 0]  # the crashed call kept its ordinal
    assert "TOOL_CRASHED" in (await _declared(server, "fragile"))


async def test_the_runner_counts_a_crashed_tool_as_an_infrastructure_error_an_injected_error_not():
    """TOOL_CRASHED is a bug in the tool: the episode measured nothing about the agent."""
    from mcp_resili.agents.model import InfrastructureError, ToolCall
    from mcp_resili.client.episode import EpisodeSpec
    from mcp_resili.client.loop import call_tool
    from mcp_resili.client.recorded import RecordedEvents

    def crash(arguments, state):
        raise OverflowError("int too large to convert to float")

    suite = hand_made_suite((spec("fragile"), crash))
    plan = RuleFaults(rules=({"tool": "fragile", "calls": (1,), "fault": ErrorFault(code="TOOL_CRASHED")},))
    server = ResiliServer(suite, plan)
    episode = EpisodeSpec(id="e", fault_key="k", seed=0, task=None, prompt="")
    recorded = RecordedEvents(after_call=server.take_events)
    async with Client(server.mcp) as client:
        # An injected error that happens to use the code is a fault the agent must cope with ...
        answer, event, _ = await call_tool(client, episode, ToolCall("c1", "fragile", {}), 1, recorded)
        assert answer.is_error and event.fault is not None
        # ... the tool's own crash is not.
        with pytest.raises(InfrastructureError, match="tool fragile crashed"):
            await call_tool(client, episode, ToolCall("c2", "fragile", {}), 2, recorded)


async def _declared(server, name):
    async with Client(server.mcp) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == name)
    return tool.meta["mcp-resili/errors"]


async def test_a_tool_marked_inline_runs_on_the_loop_only_with_small_arguments_others_always_in_a_thread():
    def where(arguments, state):
        return {"on_loop": threading.current_thread() is threading.main_thread()}

    suite = hand_made_suite(
        (spec("quick", text={"type": "string"}), where),
        (spec("plain", text={"type": "string"}), where),
        inline=frozenset({"quick"}),
    )
    server = ResiliServer(suite, NoFaults())
    huge = "x" * (INLINE_MAX_CHARS + 1)
    async with Client(server.mcp) as client:
        ran = {
            (tool, size): (await client.call_tool(tool, {"text": text}, meta=meta("e"))).structured_content
            for tool in ("quick", "plain")
            for size, text in (("small", "hello"), ("huge", huge))
        }
    assert ran == {
        ("quick", "small"): {"on_loop": True},
        ("quick", "huge"): {"on_loop": False},
        ("plain", "small"): {"on_loop": False},
        ("plain", "huge"): {"on_loop": False},
    }


def test_argument_size_check_counts_values_and_characters_at_any_depth():
    assert small_arguments({"a": [1, 2, {"b": "x" * 100}]})
    assert not small_arguments({"a": [0] * (INLINE_MAX_VALUES + 1)})
    assert not small_arguments({"a": [{"b": ["x" * (INLINE_MAX_CHARS // 2)]}] * 3})
    assert not small_arguments({"k" * (INLINE_MAX_CHARS + 1): 1})
    # The tightest packing of values, at the bound and one past it.
    assert small_arguments([0] * (INLINE_MAX_VALUES - 1))
    assert not small_arguments([0] * INLINE_MAX_VALUES)
    with pytest.raises(ValueError, match="marks unknown tools inline"):
        hand_made_suite((spec("quick"), lambda a, s: {}), inline=frozenset({"missing"}))


_json_ish = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=40) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=60,
)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(value=_json_ish)
def test_the_quick_size_check_answers_as_the_count_that_defines_it(value):
    assert small_arguments(value) == _counted_small(value)
    try:  # the pipeline hands its encoding's length over: the same answer without encoding again
        encoded = pydantic_core.to_json(value)
    except ValueError:  # e.g. a lone surrogate: the pipeline has no encoding to hand over then
        return
    assert small_arguments(value, len(encoded)) == _counted_small(value)


@pytest.mark.parametrize("peek_inline", [False, True])
async def test_a_slow_tool_times_out_while_another_episode_is_answered_and_its_next_call_waits_for_it(
    peek_inline,
):
    release = threading.Event()
    started = threading.Event()

    def slow(arguments, state):
        started.set()
        release.wait(30)
        state["slow_done"] = True
        return {"done": True}

    def peek(arguments, state):
        return {"slow_done": state.get("slow_done", False)}

    # An inline tool too waits for the episode's abandoned call before it touches the state.
    inline = frozenset({"peek"}) if peek_inline else frozenset()
    suite = hand_made_suite((spec("slow"), slow), (spec("peek"), peek), inline=inline)
    server = ResiliServer(suite, NoFaults(), call_time_limit=0.5)
    async with Client(server.mcp) as client:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                results = {}

                async def call(name, episode):
                    results[episode] = await client.call_tool(name, {}, meta=meta(episode))

                tg.start_soon(call, "slow", "a")
                await anyio.to_thread.run_sync(started.wait)
                # While "slow" holds its thread, another episode is served.
                await call("peek", "b")
                assert not release.is_set() and "a" not in results
            assert results["a"].is_error and results["a"].content[0].text.startswith("Error TOOL_TIMEOUT")
            release.set()
            # The abandoned call finishes before the episode's next call touches its state.
            after = await client.call_tool("peek", {}, meta=meta("a"))
    assert after.structured_content == {"slow_done": True}


async def test_a_call_whose_client_gives_up_is_still_recorded_so_the_trace_replays():
    """Review finding: a call abandoned during an injected delay (or while its tool ran) left no event,
    though it took an ordinal and a fault decision: the trace then started at seq 2, ordinal 1."""
    release = threading.Event()

    def slow(arguments, state):
        release.wait(30)
        return {"done": True}

    suite = hand_made_suite((spec("late"), lambda a, s: {"ok": True}), (spec("slow"), slow))
    # An hour-long injected delay on the first "late" call; nothing else is faulted.
    plan = RuleFaults(rules=({"tool": "late", "calls": (1,), "fault": HighLatency(delay_seconds=3600)},))
    server = ResiliServer(suite, plan, call_time_limit=None)
    episode = server.episode(EpisodeRequest(id="e"))

    async def given_up(tool):
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.pipeline.call, episode, tool, {})
                await anyio.wait_all_tasks_blocked()  # the call waits out its delay, or its tool's thread
                tg.cancel_scope.cancel()

    await given_up("late")
    await given_up("slow")
    release.set()
    await server.pipeline.call(episode, "late", {})
    events = server.take_events("e")
    assert [(e.seq, e.tool, e.decision.ordinal, e.error_code) for e in events] == [
        (1, "late", 0, None),  # the delayed answer nobody read: recorded as it was decided
        (2, "slow", 0, "CALL_CANCELLED"),
        (3, "late", 1, None),
    ]
    assert events[0].fault is not None and events[0].fault.type == "high_latency"
    assert [h.ok for h in episode.history] == [True, False, True]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        # Numbers JSON can carry but no tool can use: refused before the schema (whose maximum would
        # quote all 400 digits), the boundary 2**53 included.
        (10**400, "value: numbers must be finite and within"),
        (1e308, "value: numbers must be finite and within"),
        (2**53, "value: numbers must be finite and within"),
        # JSON has no NaN or infinity: the client sends null, which the schema refuses.
        (float("nan"), "value: None is not of type 'integer'"),
        (float("inf"), "value: None is not of type 'integer'"),
    ],
    ids=["10**400", "1e308", "2**53", "nan", "inf"],
)
async def test_numbers_no_tool_can_use_are_refused_up_front_as_invalid_input(value, problem):
    async with Client(make_server().mcp) as client:
        result = await client.call_tool("scale", {"value": value, "factor": 1}, meta=meta("e"))
        still = await client.call_tool("scale", {"value": 2**19, "factor": 3}, meta=meta("e"))
    assert result.is_error
    assert result.content[0].text.startswith(f"Error INVALID_INPUT: invalid arguments for scale: {problem}")
    assert not still.is_error and still.structured_content == {"value": 3 * 2**19}


async def test_a_fault_that_reshapes_a_strict_result_becomes_response_schema_mismatch_with_the_payload():
    plan = RuleFaults(rules=({"tool": "lookup", "fault": SchemaDrift()},))
    server = make_server(plan)
    async with Client(server.mcp) as client:  # the client validates structured content: it must not raise
        result = await client.call_tool("lookup", {"key": "apple"}, meta=meta("e"))
    assert result.is_error and result.structured_content is None
    text = result.content[0].text
    assert text.startswith("Error RESPONSE_SCHEMA_MISMATCH") and '"apiVersion": "v2"' in text
    event = result.meta[META_EVENT]
    assert event["fault"]["type"] == "schema_drift" and event["result"]["response"]["apiVersion"] == "v2"


async def test_a_suite_whose_initial_state_raises_fails_every_call_as_tool_crashed_never_plays_without_it():
    # Before, the first call was a protocol error and the rest ran on an empty state: no world to
    # check the calls against, so a naive agent's ResiliBench episode could score "full".
    def broken(task):
        raise RuntimeError("no world for this task")

    server = ResiliServer(replace(TINY, initial_state=broken), NoFaults())
    task = TINY.tasks[0].id
    async with Client(server.mcp) as client:
        answers = [
            await client.call_tool("lookup", {"key": "apple"}, meta=meta("e", task=task)) for _ in range(2)
        ]
    for answer in answers:
        assert answer.is_error
        assert answer.content[0].text.startswith(
            "Error TOOL_CRASHED: the suite could not set up this episode"
        )
        assert "no world" not in answer.content[0].text  # no raw exception text for the model
    events = server.take_events("e")
    assert [(e.tool, e.error_code, e.decision) for e in events] == [("lookup", "TOOL_CRASHED", None)] * 2
