"""`mcp-resili config` writes HTTP entries for a running server, in each client's own shape."""

from __future__ import annotations

import json

import pytest

from mcp_resili.cli import main


@pytest.mark.parametrize(
    ("client", "key", "kind", "reference"),
    [
        ("claude-code", "mcpServers", "http", "${TOKEN}"),
        ("vscode", "servers", "http", "${env:TOKEN}"),
        ("cursor", "mcpServers", None, "${env:TOKEN}"),
    ],
)
def test_config_writes_an_http_entry_with_the_token_read_from_the_environment(
    client, key, kind, reference, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("TOKEN", "s3cret-value")
    path = tmp_path / "mcp.json"
    url = "http://127.0.0.1:8765/mcp"
    assert (
        main(["config", client, "--url", url, "--bearer-env", "TOKEN", "--write", "--path", str(path)]) == 0
    )
    entry = json.loads(path.read_text())[key]["mcp-resili"]
    assert entry["url"] == url and entry.get("type") == kind
    assert entry["headers"] == {"Authorization": f"Bearer {reference}"}
    assert "s3cret-value" not in path.read_text()  # the client expands the variable; we never write it


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["config", "claude-desktop", "--url", "http://127.0.0.1:1/mcp"], "stdio only"),
        (["config", "vscode", "--url", "ftp://x/mcp"], "http(s) URL"),
        (["config", "vscode", "--url", "http://h/mcp", "--bearer-env", "not a name"], "variable name"),
        (["config", "vscode", "--bearer-env", "TOKEN"], "needs --url"),
        (["config", "vscode", "--url", "http://h/mcp", "--faults", "none"], "running server"),
    ],
)
def test_config_refuses_impossible_http_entries_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["config", "vscode", "--faults", "nope"], "unknown fault spec 'nope'"),
        (
            ["config", "vscode", "--upstream", "npx server", "--faults", "toolmaze:P1"],
            "works only with suite",
        ),
    ],
)
def test_config_refuses_a_fault_spec_the_server_would_refuse_at_every_start(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_config_flags_that_only_write_are_refused_without_write_and_a_symlink_loop_is_one_line(
    tmp_path, capsys
):
    assert main(["config", "vscode", "--path", str(tmp_path / "c.json")]) == 2
    assert "need --write" in capsys.readouterr().err and not (tmp_path / "c.json").exists()
    assert main(["config", "vscode", "--replace"]) == 2
    assert "need --write" in capsys.readouterr().err
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    assert main(["config", "vscode", "--write", "--path", str(loop)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot follow the symlink" in err
