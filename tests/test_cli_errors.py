"""Every command answers bad input with one line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_resili.cli import main
from mcp_resili.faults import FaultSpecError, parse_fault_spec

FAKES = Path(__file__).parent / "fakes"
DEAD = f"{sys.executable} -c pass"  # starts, then exits before answering initialize
DYING = f"{sys.executable} {FAKES / 'dying_server.py'}"  # answers initialize, dies on a tool call
MISSING = "no-such-command-mcp-resili"
REFUSED = "http://127.0.0.1:1/mcp"  # nothing listens on port 1
BAD_FAULTS = '{"kind": "rules", "rules": [{"tool": "x", "fault": {"type": "error", "code": 5}}]}'


@pytest.fixture
def busy_port() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield str(sock.getsockname()[1])


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "faults.json").write_text(BAD_FAULTS)
    (tmp_path / "garbage.txt").write_text("garbage\n")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 \xff\xfe\n".encode("latin-1"))  # not UTF-8
    return tmp_path


BAD_INPUTS = {
    "serve: unknown fault spec": ["serve", "--faults", "nope"],
    "serve: invalid fault file": ["serve", "--faults", "{files}/faults.json"],
    "serve: unknown task": ["serve", "--task", "nope"],
    "serve: negative time scale": ["serve", "--time-scale", "-1"],
    "serve: port out of range": ["serve", "--transport", "http", "--port", "99999"],
    "serve: busy port": ["serve", "--transport", "http", "--port", "{port}"],
    "proxy: empty upstream": ["proxy", "--upstream", ""],
    "proxy: missing upstream command": ["proxy", "--upstream", MISSING],
    "proxy: upstream exits at once": ["proxy", "--upstream", DEAD],
    "proxy: upstream refuses connections": ["proxy", "--upstream", REFUSED],
    "proxy: a suite's faults": ["proxy", "--upstream", MISSING, "--faults", "toolmaze:P1"],
    "proxy: invalid fault file": ["proxy", "--upstream", MISSING, "--faults", "{files}/faults.json"],
    "proxy: busy port, before the upstream starts": [
        "proxy",
        "--upstream",
        MISSING,
        "--transport",
        "http",
        "--port",
        "{port}",
    ],
    "run: unknown model": ["run", "--model", "nope"],
    "run: a model spec with an escape sequence": ["run", "--model", "openai:gpt\x1b]0;title\x07\nX"],
    "config: an empty server name": ["config", "vscode", "--name", ""],
    "config: a server name with a newline": ["config", "vscode", "--name", "a\nb"],
    "run: zero trials": ["run", "--trials", "0"],
    "run: a seed beyond 64 bits": ["run", "--seed", str(2**63)],
    "run: a seed below 64 bits": ["run", "--seed", str(-(2**63) - 1)],
    "run: not a number": ["run", "--trials", "x"],
    "run: negative ramp-up": ["run", "--ramp-up", "-1"],
    "run: ramp-up not a number": ["run", "--ramp-up", "nan"],
    "run: ramp-up of a year": ["run", "--ramp-up", "31536000"],
    "run: empty ray address": ["run", "--executor", "ray", "--ray-address", " "],
    "run: ray workers without ray": ["run", "--ray-workers", "2"],
    "run: no ray workers": ["run", "--executor", "ray", "--ray-workers", "0"],
    "run: unknown variant": ["run", "--variant", "nope"],
    "run: invalid fault file": ["run", "--faults", "{files}/faults.json"],
    "run: missing server command": ["run", "--server", MISSING, "--limit", "1", "--trials", "1"],
    "run: server exits at once": ["run", "--server", DEAD, "--limit", "1", "--trials", "1"],
    "run: server refuses connections": ["run", "--server", REFUSED, "--limit", "1", "--trials", "1"],
    "tasks: unknown suite": ["tasks", "list", "--suite", "nope"],
    "score: missing trace": ["score", "{files}/missing.jsonl"],
    "score: empty trace": ["score", "{files}/empty.txt"],
    "compare: not a workflow": ["compare", "{files}/garbage.txt", "{files}/garbage.txt"],
    "perturb: missing workflow": ["perturb", "{files}/missing.json", "--type", "missing"],
    "calibrate: unknown suite": ["calibrate", "--suite", "nope"],
    "score: a trace that is not UTF-8": ["score", "{files}/latin1.txt"],
    "compare: a workflow that is not UTF-8": ["compare", "{files}/latin1.txt", "{files}/latin1.txt"],
    "calibrate: a workflow that is not UTF-8": ["calibrate", "{files}/latin1.txt"],
    "run: a price file that is not UTF-8": ["run", "--prices", "{files}/latin1.txt"],
    "run: a fault file that is not UTF-8": ["run", "--faults", "{files}/latin1.txt"],
    "config: a client file not in UTF-8": ["config", "vscode", "--write", "--path", "{files}/latin1.txt"],
    "check: missing server command": ["check", "--server", MISSING],
    "check: server exits at once": ["check", "--server", DEAD],
    "check: server dies mid-check": ["check", "--server", DYING],
    "check: server refuses connections": ["check", "--server", REFUSED],
    "check: zero timeout": ["check", "--timeout", "0"],
    "config: a directory as the file": ["config", "vscode", "--write", "--path", "{files}"],
    "no such command": ["nope"],
}


@pytest.mark.parametrize("argv", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_one_line_and_exit_status_2(
    argv: list[str],
    files: Path,
    busy_port: str,
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # a run that gets as far as its default database writes it here
    argv = [arg.format(files=files, port=busy_port) for arg in argv]
    if argv[0] in ("run", "serve") and "--suite" not in argv:  # the framework's errors: on the tiny suite
        argv = [argv[0], "--suite", "tiny", *argv[1:]]
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        status = exc.code
    captured = capfd.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert status == 2, captured.err
    assert len(lines) == 1 and lines[0].startswith("mcp-resili") and "Traceback" not in captured.err, (
        captured.err
    )


def test_a_fault_file_error_names_the_key_and_what_was_expected(files: Path) -> None:
    with pytest.raises(FaultSpecError) as caught:
        parse_fault_spec(str(files / "faults.json"))
    message = str(caught.value)
    assert "rules[0].fault.code: expected a string (got 5)" in message
    assert not any(
        internal in message for internal in ("Input should", "Value error", "tagged-union", "pydantic")
    )


def test_a_fault_file_without_a_kind_or_that_is_missing_says_so(tmp_path: Path) -> None:
    path = tmp_path / "faults.json"
    path.write_text("{}")
    with pytest.raises(FaultSpecError, match=r"needs a 'kind' \(one of: .*rules"):
        parse_fault_spec(str(path))
    with pytest.raises(FaultSpecError, match=r"fault file .*missing\.toml does not exist"):
        parse_fault_spec(str(tmp_path / "missing.toml"))


def test_a_fault_file_with_an_unknown_key_lists_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "faults.toml"
    path.write_text('kind = "rules"\nrule = []\n')
    with pytest.raises(FaultSpecError, match=r"rule: is not a known key \(known keys: kind, rules\)"):
        parse_fault_spec(str(path))


def test_malformed_traces_and_workflows_are_named_in_plain_words_without_pydantic_internals(tmp_path, capsys):
    trace, workflow = tmp_path / "t.jsonl", tmp_path / "w.json"
    trace.write_text('{"event": "header"}\n', encoding="utf-8")
    workflow.write_text('{"kind": "tools", "steps": [{"id": 1}]}', encoding="utf-8")
    for argv, where in (
        (["score", str(trace)], "suite: Field required"),
        (["compare", str(workflow), str(workflow)], "steps[0].id"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert where in err and err.count("\n") == 1
        assert "pydantic" not in err and "type=" not in err
