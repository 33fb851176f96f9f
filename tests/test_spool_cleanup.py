"""A served server's private trace spool does not outlive it: not after SIGTERM, nor after SIGKILL.

Without ``--trace-dir`` a server writes each episode's trace to a private temporary directory. A service
manager stops a server with SIGTERM, and the OOM killer with SIGKILL; before, both left the spool (and
its traces) in ``/tmp`` for good, one per server start. Each server here gets its own ``TMPDIR``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from mcp import Client
from servers import CLI_TIMEOUT, child_env, new_episode, running_http_server, serve_command

from mcp_resili.server.recorder import SPOOL_PREFIX, remove_dead_spools, spool_prefix

TINY = ("--suite", "tiny", "--faults", "none")


def spools(temp: Path) -> list[Path]:
    """The spool directories in ``temp``."""
    return sorted(temp.glob(f"{SPOOL_PREFIX}*"))


def send(stdin: IO[str], message: dict[str, Any]) -> None:
    stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    stdin.flush()


def answer(stdout: IO[str], request_id: int) -> dict[str, Any]:
    """The server's answer to ``request_id`` (skipping anything else it writes), within `CLI_TIMEOUT`.

    Read in a thread: a server that never answers fails the test instead of hanging the suite.
    """
    found: list[dict[str, Any]] = []

    def read() -> None:
        for line in stdout:
            message = json.loads(line)
            if message.get("id") == request_id:
                found.append(message)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(CLI_TIMEOUT)
    if not found:
        raise AssertionError(f"no answer to request {request_id} within {CLI_TIMEOUT} s")
    return found[0]


def start_stdio_server(temp: Path) -> subprocess.Popen[str]:
    """``mcp-resili serve`` over stdio with ``TMPDIR=temp``, after one tool call: its spool holds a trace."""
    process = subprocess.Popen(
        serve_command(*TINY),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(TMPDIR=str(temp)),
    )
    assert process.stdin is not None and process.stdout is not None
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    try:
        send(process.stdin, {"id": 1, "method": "initialize", "params": hello})
        assert "result" in answer(process.stdout, 1)
        send(process.stdin, {"method": "notifications/initialized"})
        call = {"name": "echo", "arguments": {"text": "hi"}}
        send(process.stdin, {"id": 2, "method": "tools/call", "params": call})
        assert answer(process.stdout, 2)["result"]["isError"] is False
    except BaseException:
        process.kill()
        process.communicate()
        raise
    return process


def stop(process: subprocess.Popen[str], how: signal.Signals) -> tuple[int, str]:
    """Send ``how`` to the server and reap it: its exit status and stderr."""
    process.send_signal(how)
    try:
        _, stderr = process.communicate(timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return process.returncode, stderr


def test_a_stdio_server_stopped_by_sigterm_removes_its_spool_and_exits_cleanly(tmp_path: Path) -> None:
    process = start_stdio_server(tmp_path)
    [spool] = spools(tmp_path)
    assert spool.name.startswith(spool_prefix(process.pid))
    assert [p.suffix for p in spool.iterdir()] == [".jsonl"]  # the episode's trace, written as it went
    status, stderr = stop(process, signal.SIGTERM)
    assert status == 0, stderr
    assert "Traceback" not in stderr
    assert spools(tmp_path) == []


@pytest.mark.anyio
async def test_an_http_server_stopped_by_sigterm_removes_its_spool(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    async with running_http_server(*TINY, workdir=tmp_path, TMPDIR=str(temp)) as server:
        async with Client(server.url) as client:
            result = await client.call_tool("echo", {"text": "hi"}, meta=new_episode("sigterm"))
            assert not result.is_error, result.content
        [spool] = spools(temp)
        assert any(spool.iterdir())
        server.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(CLI_TIMEOUT):
            while server.process.poll() is None:
                await anyio.sleep(0.05)
        assert server.process.returncode == 0, server.stderr()
    assert "Traceback" not in server.stderr()
    assert spools(temp) == []


def test_the_next_server_removes_the_spool_of_one_killed_outright_and_keeps_live_ones(tmp_path: Path) -> None:
    killed = start_stdio_server(tmp_path)
    [left] = spools(tmp_path)
    status, _ = stop(killed, signal.SIGKILL)
    assert status == -signal.SIGKILL and left.is_dir()  # SIGKILL leaves it: nothing could run
    # A live process's spool (this test's own pid) and names that are no spool of ours stay.
    live = tmp_path / f"{spool_prefix(os.getpid())}live"
    odd = tmp_path / f"{SPOOL_PREFIX}notapid-x"
    file_not_dir = tmp_path / f"{spool_prefix(killed.pid)}file"
    elsewhere = tmp_path / f"{SPOOL_PREFIX}1.{killed.pid}-x"  # the same pid in another PID namespace
    for directory in (live, odd, elsewhere):
        directory.mkdir()
    file_not_dir.write_text("not a spool")

    successor = start_stdio_server(tmp_path)
    try:
        assert not left.exists()
        assert live.is_dir() and odd.is_dir() and elsewhere.is_dir() and file_not_dir.is_file()
        [own] = [p for p in spools(tmp_path) if p.name.startswith(spool_prefix(successor.pid))]
        assert any(own.iterdir())
    finally:
        status, stderr = stop(successor, signal.SIGTERM)
    assert status == 0, stderr


def test_removing_dead_spools_names_what_it_removed_and_spares_a_symlink(tmp_path: Path) -> None:
    reaped = subprocess.Popen(["true"])  # a pid that has just ended
    reaped.wait()
    gone = tmp_path / f"{spool_prefix(reaped.pid)}abc"
    (gone / "inner").mkdir(parents=True)
    (gone / "inner" / "t.jsonl").write_text("{}\n")
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / f"{spool_prefix(reaped.pid)}link"
    link.symlink_to(target)
    assert remove_dead_spools(tmp_path) == [gone]
    assert not gone.exists() and link.is_symlink() and target.is_dir()


def test_sigterm_stops_like_ctrl_c_but_not_inside_the_tasks_of_a_loop_shutting_down() -> None:
    import asyncio

    from mcp_resili.cli.common import sigterm_stops_like_ctrl_c

    assert threading.current_thread() is threading.main_thread()  # only there are handlers set

    async def shutting_down() -> str:
        # As in `asyncio.run`'s shutdown: a loop runs its last tasks, Ctrl-C's handler is Python's again.
        signal.raise_signal(signal.SIGTERM)
        await asyncio.sleep(0)
        return "went on"

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with sigterm_stops_like_ctrl_c() as received:
            with pytest.raises(KeyboardInterrupt):  # no loop: as Ctrl-C
                signal.raise_signal(signal.SIGTERM)
            assert received.is_set()
            loop = asyncio.new_event_loop()
            try:
                assert loop.run_until_complete(shutting_down()) == "went on"
            finally:
                loop.close()
    finally:
        signal.signal(signal.SIGINT, before)
