import json
import subprocess
import sys
from pathlib import Path

import mcp_types as types
import pytest
from mcp import Client
from tiny_suite import suite as tiny_suite

from mcp_resili.check import CheckError, check_server, check_target, sample_arguments, strict_mode_problems
from mcp_resili.cli.config import ClientConfigError, render_config, server_entry, write_config
from mcp_resili.faults import NoFaults
from mcp_resili.server.app import ResiliServer

BROKEN = Path(__file__).parent / "fakes" / "broken_server.py"
RAW = Path(__file__).parent / "fakes" / "raw_server.py"
DYING = Path(__file__).parent / "fakes" / "dying_server.py"
pytest_plugins = ["mcp_resili.check.pytest_plugin"]


@pytest.mark.anyio
async def test_our_server_passes_every_contract_check_including_calls():
    server = ResiliServer(tiny_suite(), NoFaults())
    async with Client(server.mcp) as client:
        report = await check_server(client, "in-memory", call_tools=True)
    assert report.ok(strict=True), report.render()
    assert report.tools == 6 and report.calls > 6  # 5 tools and finish


@pytest.mark.anyio
async def test_check_fails_on_a_broken_server_with_a_clear_report():
    report = await check_target(f"{sys.executable} {BROKEN}", call_tools=True)
    out = report.render()
    assert out.splitlines()[-1].startswith("FAIL")
    for needle in (
        "mcp-name [bad name]",
        "input-schema-valid [invalid_schema]",
        "output-schema [lies_about_output]",
        "pagination",
    ):
        assert needle in out, needle


@pytest.mark.anyio
async def test_check_reports_a_listing_that_breaks_the_mcp_schema_and_checks_the_valid_tools():
    report = await check_target(f"{sys.executable} {RAW}")
    by_check = {(f.check, f.tool): f.message for f in report.findings}
    assert "tools[0].inputSchema.type" in by_check["tools/list-schema", "array_root"]
    assert report.tools == 2 and ("mcp-name", "spaced name") in by_check  # the valid ones were checked
    assert "raw server 0.0.1 starting" in by_check["stdout", None]  # stdout is for JSON-RPC only
    assert not report.ok()


@pytest.mark.anyio
async def test_check_says_in_one_line_why_a_server_that_dies_could_not_be_checked():
    with pytest.raises(CheckError) as caught:
        await check_target(f"{sys.executable} {DYING}")
    message = str(caught.value)
    assert "\n" not in message and "closed the connection during tools/call" in message
    assert message.endswith("its last stderr line: fatal: crashed on purpose")


@pytest.mark.anyio
async def test_check_gives_up_on_a_server_that_never_answers():
    with pytest.raises(CheckError, match="did not answer initialize in time"):
        await check_target(f"{sys.executable} -c 'import sys; sys.stdin.read()'", timeout=0.5)


def test_check_json_report_is_machine_readable_and_violations_exit_1():
    proc = subprocess.run(
        [sys.executable, "-m", "mcp_resili", "check", "--server", f"{sys.executable} {BROKEN}", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is False and report["tools"] == 3
    assert {f["check"] for f in report["findings"] if f["severity"] == "error"} >= {"mcp-name", "pagination"}


def test_pytest_fixture_reports_contract_failures(mcp_contract):
    report = mcp_contract(f"{sys.executable} {BROKEN}")
    with pytest.raises(AssertionError, match="mcp-name"):
        report.assert_ok()


def test_pytest_fixture_fails_in_one_line_when_the_server_cannot_be_checked(mcp_contract):
    with pytest.raises(pytest.fail.Exception, match="could not check") as caught:
        mcp_contract("no-such-command-mcp-resili")
    assert "command not found" in str(caught.value) and "\n" not in str(caught.value)


def test_sample_arguments_satisfy_their_schema():
    schema = {
        "type": "object",
        "required": ["a", "b", "c", "d"],
        "properties": {
            "a": {"type": "string", "minLength": 3},
            "b": {"enum": ["x", "y"]},
            "c": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
            "d": {"type": "object", "required": ["e"], "properties": {"e": {"type": "number", "minimum": 5}}},
        },
    }
    import jsonschema

    value = sample_arguments(schema)
    jsonschema.validate(value, schema)
    assert value["b"] == "x" and value["d"]["e"] == 5.0


def test_strict_mode_problems_name_what_openai_would_reject():
    ok = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    assert strict_mode_problems(ok) == []
    loose = {"type": "object", "properties": {"a": {"type": "string"}}}
    problems = strict_mode_problems(loose)
    assert any("additionalProperties" in p for p in problems) and any("optional" in p for p in problems)


@pytest.mark.parametrize(("client", "key"), [("claude-desktop", "mcpServers"), ("vscode", "servers")])
def test_config_snippets_use_each_clients_shape(client, key):
    config = render_config(client, "chaos", server_entry(faults="resilibench"))
    entry = config[key]["chaos"]
    assert entry["args"][-3:] == ["serve", "--faults", "resilibench"]
    assert Path(entry["command"]).is_absolute()
    assert ("type" in entry) == (client == "vscode")


def test_write_config_merges_and_keeps_other_servers(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"mcpServers": {"other": {"command": "x"}}, "theme": "dark"}))
    write_config("claude-desktop", "chaos", server_entry(upstream="npx server"), path)
    data = json.loads(path.read_text())
    assert data["theme"] == "dark" and data["mcpServers"]["other"] == {"command": "x"}
    assert data["mcpServers"]["chaos"]["args"][-3:] == ["proxy", "--upstream", "npx server"]
    path.write_text("{broken")
    with pytest.raises(ClientConfigError, match="not readable JSON"):
        write_config("claude-desktop", "chaos", server_entry(), path)
    assert path.read_text() == "{broken"


def test_a_listing_broken_outside_its_tools_is_a_finding_and_its_tools_are_kept():
    from mcp_types import methods
    from pydantic import ValidationError

    from mcp_resili.check.contract import _schema_findings
    from mcp_resili.check.report import CheckReport

    raw = {"tools": [{"name": "ok", "inputSchema": {"type": "object"}}], "nextCursor": 5}
    with pytest.raises(ValidationError) as caught:
        methods.validate_server_result("tools/list", "2025-11-25", raw)
    report = CheckReport(target="raw")
    valid = _schema_findings(report, "tools/list", caught.value, raw, "tools", types.Tool, "2025-11-25")
    assert [tool.name for tool in valid] == ["ok"]
    (finding,) = report.findings
    assert (
        finding.check == "tools/list-schema"
        and "nextCursor" in finding.message
        and "got 5" in finding.message
    )


def test_write_config_keeps_the_files_mode_its_link_and_everything_it_cannot_rewrite(tmp_path, monkeypatch):
    import os
    import stat

    monkeypatch.chdir(tmp_path)
    real = tmp_path / "real.json"
    real.write_text(json.dumps({"mcpServers": {"gh": {"env": {"GITHUB_TOKEN": "secret"}}}, "name": "Äpfel"}))
    real.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    # A planted link where a fixed temporary name would go: never written through.
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "link.json.tmp").symlink_to(victim)
    (tmp_path / ".real.json.tmp").symlink_to(victim)
    write_config("claude-desktop", "chaos", server_entry(), link)
    assert link.is_symlink() and stat.S_IMODE(real.stat().st_mode) == 0o600
    data = json.loads(real.read_text(encoding="utf-8"))
    assert data["name"] == "Äpfel" and "Äpfel" in real.read_text(encoding="utf-8")  # not \u00c4
    assert data["mcpServers"]["gh"]["env"]["GITHUB_TOKEN"] == "secret" and "chaos" in data["mcpServers"]
    assert victim.read_text() == "keep me" and sorted(os.listdir(tmp_path)) == sorted(
        [".real.json.tmp", "link.json", "link.json.tmp", "real.json", "victim.txt"]
    )
    # Another server under the same name is not replaced unless asked.
    before = real.read_text()
    with pytest.raises(ClientConfigError, match="already has a different server 'chaos'"):
        write_config("claude-desktop", "chaos", server_entry(upstream="npx other"), real)
    assert real.read_text() == before
    write_config("claude-desktop", "chaos", server_entry(upstream="npx other"), real, replace=True)
    assert json.loads(real.read_text())["mcpServers"]["chaos"]["args"][-1] == "npx other"
    for text, why in (
        ('{"a": 1, "a": 2}', "appears twice"),
        ('{"a": 1e400}', "does not fit"),
        ('{"a": NaN}', "NaN"),
    ):
        real.write_text(text)
        with pytest.raises(ClientConfigError, match=why):
            write_config("claude-desktop", "chaos", server_entry(), real)
        assert real.read_text() == text
    real.write_text("{}")
    real.chmod(0o444)
    with pytest.raises(ClientConfigError, match="read-only"):
        write_config("claude-desktop", "chaos", server_entry(), real)
    assert real.read_text() == "{}"
