"""The proxy in front of the official reference server ``@modelcontextprotocol/server-everything`` (npm,
pinned in tests/peers): driven by the MCP Inspector CLI (a third-party client), and by an SDK client that
uses every feature (progress, logs, completion, subscriptions, sampling, elicitation, roots) once directly
and once through the proxy, which must be indistinguishable."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning
from servers import CLI_TIMEOUT, REPO_ROOT, child_env, cli_command, run_inspector

from mcp_resili.faults import ErrorFault, RuleFaults
from mcp_resili.proxy import ClientRelay, ProxyServer, connect_upstream

EVERYTHING = REPO_ROOT / "tests" / "peers" / "node_modules" / "@modelcontextprotocol" / "server-everything"
UPSTREAM = ["node", str(EVERYTHING / "dist" / "index.js"), "stdio"]


def proxy_target(tmp_path: Path, rules: list[dict]) -> list[str]:
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"kind": "rules", "rules": rules}))
    proxy = cli_command(
        "proxy", "--upstream", " ".join(UPSTREAM), "--faults", str(faults), "--time-scale", "0"
    )
    return ["--transport", "stdio", "-e", f"PYTHONPATH={child_env()['PYTHONPATH']}", "--", *proxy]


def direct_target() -> list[str]:
    return ["--transport", "stdio", "--", *UPSTREAM]


TIMEOUT_ECHO = [{"tool": "echo", "fault": {"type": "error", "code": "TIMEOUT"}}]


def inspect(inspector: Path, home: Path, *args: str) -> dict:
    """The Inspector's JSON answer; an ``isError`` result is an answer here, not a failure."""
    result: dict = run_inspector(inspector, home, *args, accept_tool_errors=True)
    return result


def without_meta(result: dict) -> dict:
    """A result without ``_meta``, with ``isError`` at its spec default (absent means false)."""
    return {"isError": False, **{k: v for k, v in result.items() if k != "_meta"}}


#: Tools server-everything offers only to clients that declare sampling or elicitation (the Inspector
#: declares neither, so neither directly nor through the proxy does it see them).
NEEDS_SAMPLING_OR_ELICITATION = {
    "trigger-sampling-request",
    "trigger-elicitation-request",
    "trigger-url-elicitation",
}


def test_proxy_lists_the_reference_servers_tools_unchanged(inspector: Path, tmp_path: Path) -> None:
    direct = inspect(inspector, tmp_path, "--method", "tools/list", *direct_target())["tools"]
    target = proxy_target(tmp_path, TIMEOUT_ECHO)
    proxied = inspect(inspector, tmp_path, "--method", "tools/list", *target)["tools"]
    # Issue 33: the Inspector's own upstream session declares what the Inspector declares, so the
    # upstream offers it exactly what it offers it directly (no tools needing sampling or elicitation).
    assert direct and proxied == direct
    assert not {tool["name"] for tool in proxied} & NEEDS_SAMPLING_OR_ELICITATION


def test_proxy_injects_the_configured_fault_records_it_and_passes_other_calls_through(
    inspector: Path, tmp_path: Path
) -> None:
    traces = tmp_path / "traces"
    target = proxy_target(tmp_path, TIMEOUT_ECHO)
    target[target.index("--") + 1 :] = [*target[target.index("--") + 1 :], "--trace-dir", str(traces)]
    call = ["--method", "tools/call", "--tool-name"]
    faulted = inspect(inspector, tmp_path, *call, "echo", "--tool-arg", "message=hi", *target)
    assert faulted["isError"] is True
    assert faulted["content"][0]["text"].startswith("Error TIMEOUT")
    assert "_meta" not in faulted  # fault metadata only with --expose-faults
    (trace_file,) = traces.iterdir()
    header, event = (json.loads(line) for line in trace_file.read_text().splitlines())
    assert header["suite"] == "proxy" and header["fault_plan"]["kind"] == "rules"
    assert (
        event["tool"] == "echo"
        and event["fault"]["code"] == "TIMEOUT"
        and event["arguments"] == {"message": "hi"}
    )

    direct = inspect(inspector, tmp_path, *call, "get-sum", "--tool-arg", "a=2", "b=3", *direct_target())
    proxied = inspect(inspector, tmp_path, *call, "get-sum", "--tool-arg", "a=2", "b=3", *target)
    assert "5" in json.dumps(direct["content"])
    assert proxied == direct


def test_check_passes_on_the_reference_server(inspector: Path) -> None:
    proc = subprocess.run(
        cli_command("check", "--server", " ".join(UPSTREAM)),
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=CLI_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("PASS")


@dataclass
class Observed:
    """What a client saw of server-everything while `exercise` ran."""

    progress: list[tuple[float, float | None]] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    events: dict[str, anyio.Event] = field(
        default_factory=lambda: {name: anyio.Event() for name in ("subscribed", "updated", "roots")}
    )

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.LoggingMessageNotification):
            text = str(message.params.data)
            self.logs.append(text)
            if text.startswith("Received Subscribe"):
                self.events["subscribed"].set()
            if text.startswith("Roots updated"):
                self.events["roots"].set()
        elif isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(message.params.uri)
            self.events["updated"].set()


ROOTS = [types.Root(uri="file:///tmp/project", name="project")]
DOCUMENT = "demo://resource/static/document/architecture.md"


async def _sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    prompt = params.messages[0].content
    text = prompt.text if isinstance(prompt, types.TextContent) else ""
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text=f"sampled: {text}"), model="fake"
    )


async def _elicitation(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


async def _roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=ROOTS)


async def exercise(server: Any) -> Observed:
    """Drive every feature through ``server`` (a launch spec or our proxy) as a handshake-era client."""
    seen = Observed()
    async with Client(
        server,
        mode="legacy",
        read_timeout_seconds=CLI_TIMEOUT,
        message_handler=seen.on_message,
        sampling_callback=_sampling,
        elicitation_callback=_elicitation,
        list_roots_callback=_roots,
    ) as client:

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.progress.append((progress, total))

        operation = {"duration": 0.04, "steps": 4}
        result = await client.call_tool(
            "trigger-long-running-operation", operation, progress_callback=on_progress
        )
        seen.results["long"] = result.model_dump()
        for name, arguments in (
            ("get-sum", {"a": 2, "b": 3}),
            ("get-structured-content", {"location": "New York"}),
            ("trigger-sampling-request", {"prompt": "hello"}),
            ("trigger-elicitation-request", {}),
            ("get-roots-list", {}),
        ):
            seen.results[name] = (await client.call_tool(name, arguments)).model_dump()
        prompt = types.PromptReference(type="ref/prompt", name="completable-prompt")
        completion = await client.complete(prompt, {"name": "department", "value": "E"})
        seen.results["completion"] = completion.completion.values
        seen.results["resource"] = (await client.read_resource(DOCUMENT)).model_dump()
        with pytest.warns(MCPDeprecationWarning):  # handshake-era subscriptions, as the upstream speaks
            await client.subscribe_resource(DOCUMENT)
        await client.call_tool("toggle-subscriber-updates", {})
        with anyio.fail_after(CLI_TIMEOUT):
            for name in ("subscribed", "updated", "roots"):
                await seen.events[name].wait()
        await client.call_tool("toggle-subscriber-updates", {})
    return seen


@pytest.mark.anyio
async def test_proxy_is_transparent_to_progress_logs_completion_subscriptions_and_client_requests(
    inspector: Path, tmp_path: Path
) -> None:
    direct = await exercise(StdioServerParameters(command=UPSTREAM[0], args=UPSTREAM[1:]))
    relay = ClientRelay()
    plan = RuleFaults(rules=({"tool": "echo", "fault": ErrorFault(code="TIMEOUT")},))
    async with connect_upstream(" ".join(UPSTREAM), **relay.client_options()) as upstream:
        proxy = await ProxyServer.create(
            upstream.client, plan, upstream="server-everything", relay=relay, trace_dir=tmp_path
        )
        proxied = await exercise(proxy.mcp)
    assert len(direct.progress) == 4 and proxied.progress == direct.progress
    subscribed = [log for log in direct.logs if log.startswith("Received Subscribe")]
    assert (
        len(subscribed) == 1
        and [log for log in proxied.logs if log.startswith("Received Subscribe")] == subscribed
    )
    assert proxied.updated[0] == direct.updated[0] == DOCUMENT
    assert proxied.results == direct.results
    assert "sampled: " in json.dumps(proxied.results["trigger-sampling-request"])
    assert "file:///tmp/project" in json.dumps(proxied.results["get-roots-list"])
    assert proxied.results["completion"] == ["Engineering"]
    # Every call went through the pipeline and is in the proxy's trace.
    (trace_file,) = tmp_path.iterdir()
    tools = [event["tool"] for event in map(json.loads, trace_file.read_text().splitlines()[1:])]
    assert (
        tools[:2] == ["trigger-long-running-operation", "get-sum"]
        and tools.count("toggle-subscriber-updates") == 2
    )
