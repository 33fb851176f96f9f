"""The paper's text protocol (tags in, feedback text out) and the plan-following agent."""

import pytest

from mcp_resili.agents.model import ModelRequest, ModelResponse, ToolDefinition, UserMessage
from mcp_resili.agents.scripted import SCRIPTED_AGENTS
from mcp_resili.agents.text_protocol import TextProtocolModel, parse_call
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.suites.resilibench.tasks import default_tasks
from mcp_resili.trace import Trace

KNOWN = ["file_operations_reader", "data_processing_parser", "network_fetcher"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("data_processing_parser", ("data_processing_parser", None)),
        ("  Data_Processing_Parser ", ("data_processing_parser", None)),
        ("parser", ("data_processing_parser", None)),
        (
            'network_fetcher {"source": "https://x.example"}',
            ("network_fetcher", {"source": "https://x.example"}),
        ),
        (
            '{"name": "file_operations_reader", "arguments": {"source": "a.csv"}}',
            ("file_operations_reader", {"source": "a.csv"}),
        ),
        ("teleporter", None),
        ("", None),
    ],
)
def test_tool_call_tags_are_matched_like_the_reference_executor(body, expected):
    assert parse_call(body, KNOWN) == expected


class Replies:
    """A text-only model that says what it is told."""

    def __init__(self, text):
        self.text = text
        self.seen = None

    name = "scripted:replies"

    async def generate(self, request):
        self.seen = request
        return ModelResponse(text=self.text)


def request(task):
    tools = tuple(ToolDefinition(n, "", {"type": "object"}) for n in [*KNOWN, "search_tools", "tool_info"])
    return ModelRequest(messages=(UserMessage("do it"),), tools=tools, task=task)


@pytest.mark.anyio
async def test_search_comes_first_and_only_one_tool_runs_per_turn():
    task = next(t for t in default_tasks() if t.workflow.steps[0].tool == "file_operations_reader")
    both = Replies("<tool_call>network_fetcher</tool_call> <tool_search>csv parser</tool_search>")
    response = await TextProtocolModel(both).generate(request(task))
    assert [c.name for c in response.tool_calls] == ["search_tools"]
    assert response.tool_calls[0].arguments == {"query": "csv parser"}
    assert (
        both.seen.tools == () and "<tool_call>" in both.seen.messages[0].text
    )  # text only, with the preamble
    two = Replies(
        "<tool_call>file_operations_reader</tool_call><tool_call>data_processing_parser</tool_call>"
    )
    response = await TextProtocolModel(two).generate(request(task))
    assert [c.name for c in response.tool_calls] == ["file_operations_reader"]
    assert response.tool_calls[0].arguments == {"source": task.inputs["source"]}  # auto arguments
    none = await TextProtocolModel(Replies("I think I am done")).generate(request(task))
    assert none.tool_calls == ()


@pytest.mark.anyio
async def test_text_only_agent_completes_tasks_through_tags_and_phrases(tmp_path):
    result = await execute(
        RunConfig(
            db=tmp_path / "r.db", models=("text:scripted:text-oracle",), faults=("none",), trials=1, limit=10
        )
    )
    assert {r.label for r in result.rows} == {"full"}
    trace = Trace.from_lines(result.rows[0].trace.splitlines())
    assert trace.tool_calls[0].tool == "search_tools" and trace.finish is None
    assert trace.end.termination == "completed"
    assert result.rows[0].score["components"]["discovery_calls"] == 1


class Ponderer:
    """Talks without acting on its first turn, then behaves like the text oracle."""

    name = "scripted:ponderer"

    async def generate(self, request):
        from mcp_resili.agents.text_protocol import TextOracleAgent

        users = [m.text for m in request.messages if isinstance(m, UserMessage)]
        if len(users) == 1:
            return ModelResponse(text="Let me think about which tools this needs before doing anything.")
        assert "NO ACTION DETECTED" in users[1]
        return await TextOracleAgent().generate(request)


@pytest.mark.anyio
async def test_a_reply_without_a_tag_gets_a_reminder_and_the_episode_goes_on(tmp_path, monkeypatch):
    monkeypatch.setitem(SCRIPTED_AGENTS, "ponderer", Ponderer)
    result = await execute(
        RunConfig(
            db=tmp_path / "r.db", models=("text:scripted:ponderer",), faults=("none",), trials=1, limit=3
        )
    )
    assert {r.label for r in result.rows} == {"full"}
    trace = Trace.from_lines(result.rows[0].trace.splitlines())
    turns = [e for e in trace.events if e.event == "model_turn"]
    assert turns[0].tool_calls == () and trace.end.termination == "completed"
