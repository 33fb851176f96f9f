"""The proxy between two real third-party peers from npm: the MCP Inspector CLI (client) and the official
reference server ``@modelcontextprotocol/server-everything`` (upstream), both pinned in tests/peers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from servers import CLI_TIMEOUT, REPO_ROOT, child_env, cli_command, run_inspector

EVERYTHING = REPO_ROOT / "tests" / "peers" / "node_modules" / "@modelcontextprotocol" / "server-everything"
UPSTREAM = ["node", str(EVERYTHING / "dist" / "index.js"), "stdio"]


def proxy_target(tmp_path: Path, rules: list[dict]) -> list[str]:
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"kind": "rules", "rules": rules}))
    proxy = cli_command("proxy", "--upstream", " ".join(UPSTREAM), "--faults", str(faults))
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


#: server-everything lists this tool only to clients that declare the roots capability; the proxy's own
#: upstream connection declares no client capabilities, so it is the one tool the proxy cannot offer.
NEEDS_CLIENT_ROOTS = {"get-roots-list"}


def test_proxy_lists_the_reference_servers_tools_prompts_and_resources_unchanged(
    inspector: Path, tmp_path: Path
) -> None:
    for method, key in (
        ("tools/list", "tools"),
        ("prompts/list", "prompts"),
        ("resources/list", "resources"),
    ):
        direct = inspect(inspector, tmp_path, "--method", method, *direct_target())[key]
        proxied = inspect(inspector, tmp_path, "--method", method, *proxy_target(tmp_path, TIMEOUT_ECHO))[key]
        assert proxied, method
        assert proxied == [item for item in direct if item.get("name") not in NEEDS_CLIENT_ROOTS], method


def test_proxy_injects_the_configured_fault_and_passes_other_calls_through(
    inspector: Path, tmp_path: Path
) -> None:
    call = ["--method", "tools/call", "--tool-name"]
    target = proxy_target(tmp_path, TIMEOUT_ECHO)
    faulted = inspect(inspector, tmp_path, *call, "echo", "--tool-arg", "message=hi", *target)
    assert faulted["isError"] is True
    assert faulted["content"][0]["text"].startswith("Error TIMEOUT")

    direct = inspect(inspector, tmp_path, *call, "get-sum", "--tool-arg", "a=2", "b=3", *direct_target())
    proxied = inspect(inspector, tmp_path, *call, "get-sum", "--tool-arg", "a=2", "b=3", *target)
    assert "5" in json.dumps(direct["content"])
    assert without_meta(proxied) == without_meta(direct)


def test_proxy_records_every_call_with_its_fault_decision(inspector: Path, tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    target = proxy_target(tmp_path, TIMEOUT_ECHO)
    target[target.index("--") + 1 :] = [*target[target.index("--") + 1 :], "--trace-dir", str(traces)]
    inspect(
        inspector,
        tmp_path,
        "--method",
        "tools/call",
        "--tool-name",
        "echo",
        "--tool-arg",
        "message=hi",
        *target,
    )
    (trace_file,) = traces.iterdir()
    header, event = (json.loads(line) for line in trace_file.read_text().splitlines())
    assert header["suite"] == "proxy" and header["fault_plan"]["kind"] == "rules"
    assert (
        event["tool"] == "echo"
        and event["fault"]["code"] == "TIMEOUT"
        and event["arguments"] == {"message": "hi"}
    )


def test_check_passes_on_the_reference_server_calls_included(inspector: Path) -> None:
    proc = subprocess.run(
        cli_command("check", "--server", " ".join(UPSTREAM), "--call"),
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=CLI_TIMEOUT * 3,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("PASS")
