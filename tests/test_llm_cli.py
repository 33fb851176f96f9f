"""`mcp-resili model-server` and `mcp-resili llm-proxy` as commands: started, used, refused."""

import contextlib
import re
import signal
from collections.abc import AsyncIterator

import anyio
import openai
import pytest
from llm_support import model_server, openai_client, serving
from servers import START_TIMEOUT, child_env, cli_command, free_port, interruptible

from mcp_resili.modelapi import TRACE_SUFFIX, read_model_events
from mcp_resili.modelserver import ModelServer
from mcp_resili.registry.loader import get_suite

pytestmark = pytest.mark.anyio
_URL = re.compile(r" at (http://127\.0\.0\.1:\d+)")


async def run(*args: str, **env: str) -> tuple[int, str]:
    """``mcp-resili ARGS`` to its end: exit status and stderr."""
    with anyio.fail_after(START_TIMEOUT):
        done = await anyio.run_process(cli_command(*args), env=child_env(**env), check=False)
    return done.returncode, done.stderr.decode()


@contextlib.asynccontextmanager
async def started(*args: str) -> AsyncIterator[tuple[str, list[str]]]:
    """``mcp-resili ARGS`` running: yields its URL (from its start line) and its stderr lines so far."""
    async with await anyio.open_process(interruptible(cli_command(*args)), env=child_env()) as process:
        lines: list[str] = []
        buffer = ""
        assert process.stderr is not None
        with anyio.fail_after(START_TIMEOUT):
            while (found := _URL.search(buffer)) is None:
                chunk = await process.stderr.receive()
                buffer += chunk.decode()
        lines += buffer.splitlines()
        try:
            yield found.group(1), lines
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.move_on_after(START_TIMEOUT):
                await process.wait()
            if process.returncode is None:  # never left running (closing the process would wait on it)
                process.kill()
                await process.wait()
                pytest.fail(f"mcp-resili {args[0]} did not stop on Ctrl-C")


async def test_a_bad_upstream_is_one_line_and_exit_2(tmp_path):
    async def html(scope, receive, send):
        if scope["type"] != "http":
            return
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]}
        )
        await send({"type": "http.response.body", "body": b"<html>not a model API</html>"})

    locked = ModelServer(model_server().index.suites, index=model_server().index, token="k" * 20)
    results: dict[str, tuple[int, str]] = {}
    async with serving(html) as page, serving(locked.app) as keyed:

        async def attempt(name: str, upstream: str, env: dict[str, str] | None = None) -> None:
            results[name] = await run("llm-proxy", "--upstream", upstream, "--port", "0", **(env or {}))

        async with anyio.create_task_group() as group:
            group.start_soon(attempt, "unreachable", f"http://127.0.0.1:{free_port()}")
            group.start_soon(attempt, "wrong format", page)
            group.start_soon(attempt, "refused", f"{keyed}/v1", {"OPENAI_API_KEY": "sk-wrong-key-123456"})
            group.start_soon(attempt, "not a URL", "api.openai.com")
    for name, (status, stderr) in results.items():
        assert status == 2 and stderr.count("\n") == 1 and stderr.startswith("mcp-resili: error: "), (
            name,
            stderr,
        )
        assert "Traceback" not in stderr
    assert "is unreachable" in results["unreachable"][1]
    assert "does not look like an OpenAI- or Anthropic-compatible API" in results["wrong format"][1]
    assert "refused the key in OPENAI_API_KEY (HTTP 401)" in results["refused"][1]
    assert "sk-wrong-key" not in results["refused"][1]
    assert "must be an http(s):// URL" in results["not a URL"][1]


async def test_the_commands_serve_an_sdk_the_scripted_oracle_with_the_faults_of_a_file(tmp_path):
    faults = tmp_path / "faults.toml"
    faults.write_text('[[rules]]\ncalls = [1]\n[rules.fault]\ntype = "rate_limit"\nretry_after = 30\n')
    suite = get_suite("resilibench")
    prompt = suite.prompt(suite.default_tasks[0])
    traces = tmp_path / "traces"
    messages = [{"role": "user", "content": prompt}]
    async with started("model-server", "--port", "0") as (upstream, _):
        proxy_args = ("--upstream", f"{upstream}/v1", "--port", "0", "--faults", str(faults))
        proxy_args += ("--trace-dir", str(traces), "--time-scale", "0.001")
        async with (
            started("llm-proxy", *proxy_args) as (url, lines),
            openai_client(url, api_key="sk-cli-secret-000") as client,
        ):
            with pytest.raises(openai.RateLimitError) as limited:
                await client.chat.completions.create(model="oracle", messages=messages)
            answer = await client.chat.completions.create(model="scripted:oracle", messages=messages)
    assert limited.value.response.headers["retry-after-ms"] == "30"
    assert answer.choices[0].message.tool_calls
    assert any("faults.toml" in line for line in lines)
    (path,) = traces.iterdir()
    assert path.name == f"client-1{TRACE_SUFFIX}"
    assert [e.status for e in read_model_events(path)] == [429, 200]
    assert "sk-cli-secret" not in path.read_text()


async def test_a_non_loopback_bind_needs_a_token():
    status, stderr = await run("model-server", "--host", "0.0.0.0", "--port", "0")
    assert status == 2 and "without a lock" in stderr and stderr.count("\n") == 1
