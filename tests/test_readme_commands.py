"""Every `mcp-resili` command README.md shows in a code block runs here as written, and prints what the
README shows after it.

Each command runs through ``bash -c`` in a scratch directory (its own ``HOME``, the venv's ``bin`` first
on ``PATH``, no API keys), with the README's placeholders filled as a reader would: ``RUN_ID`` (the
first command's run), ``EPISODE`` (the episode just played) and the Ollama URL (a loopback fake model
API). The first screen's command is run from its ``&&`` on: the set-up before it is this venv. The
hosted models' commands run against the fake (the real anthropic and openai SDKs, on a socket); without
a key the Anthropic one fails in one line naming the variable. Periodic ``progress:`` lines on stderr
are timing, not output, and are left out of the comparison.
"""

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from fakes.model_server import FakeModelServer, Reply, finish_call, serve

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: (language, body) of every fenced block, in order.
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", README, re.S | re.M)
VENV = Path(sys.prefix)
RUN_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b")
OLLAMA = "http://localhost:11434/v1"


def _commands() -> list[tuple[int, str]]:
    """(block index, line) of every command line naming `mcp-resili` in a ``sh`` block."""
    return [
        (index, line.strip())
        for index, (lang, body) in enumerate(BLOCKS)
        if lang == "sh"
        for line in body.splitlines()
        if "mcp-resili " in line and not line.lstrip().startswith("#")
    ]


#: What picks out each README command, for the test that runs it.
MARKERS = {
    "first screen": ".venv/bin/mcp-resili run",
    "toolmaze defaults": "mcp-resili run --suite toolmaze",
    "anthropic": "mcp-resili run --model anthropic:",
    "openai-compatible": "mcp-resili run --model openai:",
    "resume": "mcp-resili run --resume RUN_ID",
    "config": "mcp-resili config claude-desktop",
    "score": "mcp-resili score ",
}


def readme_command(name: str) -> tuple[int, str]:
    """The one README command ``MARKERS[name]`` picks, and its block."""
    (found,) = [(i, line) for i, line in _commands() if MARKERS[name] in line]
    return found


def shown_after(block: int, lang: str = "text") -> str:
    """The first ``lang`` block after block ``block``: what the README says the command prints."""
    return next(body for lang_, body in BLOCKS[block + 1 :] if lang_ == lang)


def normalised(text: str) -> list[str]:
    """Lines without trailing blanks, run ids as RUN, ``progress:`` lines dropped."""
    return [
        RUN_ID.sub("RUN", line.rstrip()) for line in text.splitlines() if not line.startswith("progress:")
    ]


def assert_shows(shown: str, printed: str) -> None:
    """``shown``'s lines appear, in order and together, in what was printed."""
    want, got = normalised(shown), normalised(printed)
    starts = [i for i in range(len(got) - len(want) + 1) if got[i : i + len(want)] == want]
    assert starts, "the README shows:\n" + "\n".join(want) + "\n\nthe command printed:\n" + "\n".join(got)


def environment(home: Path, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("COLUMNS", "XDG_STATE_HOME", "ANTHROPIC_API_KEY", "OPENAI_API_KEY")
        and not key.endswith("_BASE_URL")
    }
    return {**env, "HOME": str(home), "PATH": f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}", **extra}


def sh(command: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=environment(cwd / "home", **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A reader's repository root: the venv as ``.venv``, a home of its own."""
    root = tmp_path_factory.mktemp("reader")
    (root / ".venv").symlink_to(VENV)
    (root / "home").mkdir()
    return root


@pytest.fixture(scope="module")
def first_run(workdir):
    """The first screen's command, run once: (its process, its run id)."""
    _, line = readme_command("first screen")
    proc = sh(line.split(" && ")[-1], workdir)
    assert proc.returncode == 0, proc.stderr
    (run_id,) = set(RUN_ID.findall(proc.stdout))
    return proc, run_id


def test_every_readme_command_is_one_this_file_runs():
    lines = [line for _, line in _commands()]
    claimed = {line: [name for name, marker in MARKERS.items() if marker in line] for line in lines}
    assert all(len(names) == 1 for names in claimed.values()), claimed
    assert len(lines) == len(MARKERS)


def test_first_screen_run_prints_the_table_the_readme_shows(first_run):
    block, _ = readme_command("first screen")
    proc, _ = first_run
    assert_shows(shown_after(block), proc.stdout + proc.stderr)


def test_resume_after_a_crash_plays_the_missing_episodes_to_the_same_table(first_run, workdir):
    first, run_id = first_run
    with sqlite3.connect(workdir / "mcp-resili.db") as db:  # a crash: the last 40 episodes never stored
        db.execute(
            "DELETE FROM episodes WHERE rowid IN (SELECT rowid FROM episodes ORDER BY rowid DESC LIMIT 40)"
        )
    _, line = readme_command("resume")
    proc = sh(line.replace("RUN_ID", run_id), workdir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == first.stdout  # the same table, to the digit
    assert f"stored 240 episodes of run {run_id}" in proc.stderr


def test_toolmaze_without_models_shows_its_own_agents_as_the_readme_does(workdir):
    block, line = readme_command("toolmaze defaults")
    proc = sh(line, workdir)
    assert proc.returncode == 0, proc.stderr
    assert_shows(shown_after(block), proc.stdout + proc.stderr)


def _finish_at_once(exchange):
    return Reply(text="nothing to do", calls=(finish_call("gave up", "aborted"),))


@pytest.mark.anyio
async def test_hosted_model_commands_run_against_a_loopback_model_api(workdir):
    fake = FakeModelServer(_finish_at_once)
    _, anthropic_line = readme_command("anthropic")
    _, openai_line = readme_command("openai-compatible")
    async with serve(fake.app) as url:
        anthropic = await anyio.to_thread.run_sync(
            lambda: sh(anthropic_line, workdir, ANTHROPIC_BASE_URL=url)
        )
        ollama = await anyio.to_thread.run_sync(lambda: sh(openai_line.replace(OLLAMA, f"{url}/v1"), workdir))
    # Each episode asked the model once (it gives up at once): 20 tasks x 3 trials each.
    assert fake.answered == 20 * 3 + 20 * 3
    for proc, model, episodes in ((anthropic, "anthropic:", 60), (ollama, "openai:llama3.1", 60)):
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()  # the outcome table comes first
        header = [
            cell.strip() for cell in next(line for line in lines if line.startswith("┃ model")).split("┃")
        ]
        row = [
            cell.strip() for cell in next(line for line in lines if line.startswith(f"│ {model}")).split("│")
        ]
        outcome = dict(zip(header, row, strict=True))
        # Every episode scored (giving up is the agent's failure), none an infrastructure error.
        assert outcome["episodes"] == str(episodes) and outcome["infra errors"] == "0"
        assert outcome["failure % (95% CI)"].startswith("100.0 ")
    assert "spent $" in anthropic.stderr and "of the $5.00 cap" in anthropic.stderr


def test_the_anthropic_command_without_a_key_fails_in_one_line(workdir):
    _, line = readme_command("anthropic")
    proc = sh(line.removeprefix("ANTHROPIC_API_KEY=... "), workdir)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "ANTHROPIC_API_KEY" in proc.stderr


@pytest.mark.anyio
async def test_config_prints_the_readme_entry_and_its_traces_score_as_the_readme_says(workdir):
    from mcp import Client, StdioServerParameters

    block, line = readme_command("config")
    proc = sh(line, workdir)
    assert proc.returncode == 0, proc.stderr
    home = workdir / "home"
    shown = proc.stdout.replace(str(VENV), "/ABSOLUTE/PATH/.venv").replace(str(home), "/home/you")
    assert shown == shown_after(block, "json")
    entry = json.loads(proc.stdout)["mcpServers"]["mcp-resili"]
    # The client starts the server as configured; a person picks a task and gives up on it at once.
    server = StdioServerParameters(command=entry["command"], args=entry["args"], env=environment(home))
    with anyio.fail_after(60):
        async with Client(server) as client:
            task = (await client.list_prompts()).prompts[0].name
            await client.get_prompt(task)
            await client.call_tool("finish", {"status": "aborted", "summary": "by hand"})
    (trace,) = (home / ".local" / "state" / "mcp-resili" / "traces").iterdir()
    _, score_line = readme_command("score")
    scored = sh(score_line.replace("EPISODE", trace.stem), workdir)
    assert scored.returncode == 0, scored.stderr
    score = json.loads(scored.stdout)
    assert score["task"] == task and score["label"] == "failure"  # it gave up at once
