"""Running the proxy until its client leaves."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup
from mcp import Client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_resili.faults import BasePlan
from mcp_resili.faults.base import FaultSpecError
from mcp_resili.faults.rules import check_rule_tools
from mcp_resili.proxy.relay import ClientRelay
from mcp_resili.proxy.server import SHUTTING_DOWN, ProxyServer, check_plan
from mcp_resili.proxy.sessions import MAX_SESSIONS, UpstreamSessions
from mcp_resili.proxy.upstream import CONNECT_TIMEOUT, UpstreamError, connect_upstream

Serve = Callable[[ProxyServer], Awaitable[None]]
#: Seconds the upstream may take to answer ``initialize`` (or its tool listing) at start, by default.
DEFAULT_CONNECT_TIMEOUT = 10.0
#: Seconds one forwarded request may wait for the upstream's answer, by default (``--call-timeout``).
DEFAULT_CALL_TIMEOUT = 120.0


async def run_proxy(
    target: str,
    plan: BasePlan,
    serve: Serve,
    *,
    seed: int = 0,
    trace_dir: Path | None = None,
    expose_faults: bool = False,
    time_scale: float = 1.0,
    shared_upstream: bool = False,
    connect_timeout: float = CONNECT_TIMEOUT,
    call_timeout: float | None = None,
    max_sessions: int = MAX_SESSIONS,
) -> None:
    """Connect to ``target``, then ``serve`` the proxy until it returns (the client left) or SIGTERM.

    Each client behind the proxy gets an upstream session of its own (`UpstreamSessions`: its
    capabilities, its era, its notifications), opened on its first request; the connection made at
    start only checks the upstream and learns its tools and era. ``shared_upstream`` keeps that one
    connection for every client instead. ``connect_timeout`` bounds the upstream's start (and each
    new session's); ``call_timeout`` every forwarded request (None: the client's own timeout).

    SIGTERM (which MCP clients send after closing stdin) stops serving like the client leaving; until
    the upstream is shut down further SIGTERMs are ignored, so it never outlives the proxy. An HTTP
    server in this process that takes SIGTERM itself (uvicorn) is left to stop in order, its sessions
    and lifespan ended (cancelled mid-way, it printed a traceback); a second SIGTERM stops it at once.
    At SIGTERM, and once stdin ends (a stdio client closed it), the requests still waiting on the
    upstream are given up (`ProxyServer.stop_waiting`): a hung upstream cannot hold the proxy up.

    A plan naming ``finish`` is refused before the upstream starts (`check_plan`). An upstream that
    cannot be started or reached, or does not answer, raises `UpstreamError` (one line saying why).
    One that closes its connection while the proxy serves does not stop the serving: the call in
    flight and every later one get an ``isError`` result saying so (stopping at once would cancel
    their answers, and a stdio client still holding our stdin would wait on nothing), and once the
    client leaves the same `UpstreamError` is raised.
    """
    check_plan(plan)
    relay = ClientRelay()
    options: dict[str, Any] = {
        "seed": seed,
        "trace_dir": trace_dir,
        "expose_faults": expose_faults,
        "time_scale": time_scale,
    }
    options["call_timeout"] = call_timeout
    if not shared_upstream:
        await _run_per_client(target, plan, serve, options, connect_timeout, max_sessions)
        return
    async with (
        _sigterm() as terminations,
        connect_upstream(target, read_timeout_seconds=connect_timeout, **relay.client_options()) as upstream,
    ):
        proxy = await _create(upstream.client, plan, target, connect_timeout, relay=relay, **options)
        await _serve_until_stopped(proxy, serve, terminations)
        if upstream.closed.is_set():
            raise upstream.lost()


async def _run_per_client(
    target: str,
    plan: BasePlan,
    serve: Serve,
    options: dict[str, Any],
    connect_timeout: float,
    max_sessions: int,
) -> None:
    """`run_proxy` with one upstream session per client (the probe made at start is closed once used)."""
    failure: UpstreamError | FaultSpecError | None = None
    async with _sigterm() as terminations:
        try:
            async with anyio.create_task_group() as group:
                sessions = await _start(target, plan, options, connect_timeout, max_sessions, group)
                try:
                    await _serve_until_stopped(sessions[1], serve, terminations)
                finally:
                    sessions[0].close_all()
                failure = sessions[0].lost
        except BaseExceptionGroup as group_error:  # the task group wraps what went wrong: one line
            one = next(
                (e for e in _leaves(group_error) if isinstance(e, UpstreamError | FaultSpecError)), None
            )
            if one is None:
                raise
            failure = one
    if failure is not None:
        raise failure


async def _start(
    target: str,
    plan: BasePlan,
    options: dict[str, Any],
    connect_timeout: float,
    max_sessions: int,
    group: TaskGroup,
) -> tuple[UpstreamSessions, ProxyServer]:
    """Check the upstream (a probe connection: its era, its tools), then build the per-client proxy."""
    async with connect_upstream(target, read_timeout_seconds=connect_timeout, mode="auto") as probe:
        sessions = UpstreamSessions(
            target,
            group,
            upstream_modern=probe.client.protocol_version in MODERN_PROTOCOL_VERSIONS,
            connect_timeout=connect_timeout,
            max_sessions=max_sessions,
        )
        proxy = await _create(probe.client, plan, target, connect_timeout, sessions=sessions, **options)
    return sessions, proxy


async def _create(
    client: Client, plan: BasePlan, target: str, connect_timeout: float, **options: Any
) -> ProxyServer:
    """The proxy over ``client``, its tools listed within ``connect_timeout`` and its rules checked."""
    try:
        with anyio.fail_after(connect_timeout):
            proxy = await ProxyServer.create(client, plan, upstream=target, **options)
    except TimeoutError:
        raise UpstreamError(f"the server {target!r} did not list its tools in time") from None
    # A rule whose tool pattern matches none of the upstream's tools would never fire: refused.
    check_rule_tools(plan, proxy.tools, "(the proxy's --faults)", f"the upstream {target!r}")
    return proxy


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for sub in error.exceptions for leaf in _leaves(sub)]
    return [error]


async def _serve_until_stopped(proxy: ProxyServer, serve: Serve, terminations: _Terminations) -> None:
    """Serve until the client leaves or SIGTERM."""
    async with anyio.create_task_group() as group:

        async def serve_then_stop() -> None:
            await serve(proxy)
            group.cancel_scope.cancel()

        async def stop_at_sigterm() -> None:
            await terminations.next()
            proxy.stop_waiting(SHUTTING_DOWN)  # its clients hear why, not a connection breaking
            if terminations.taken_elsewhere():
                # uvicorn (serving HTTP) took it too and stops in order: `serve` returns once it has.
                await terminations.next()
            group.cancel_scope.cancel()

        group.start_soon(serve_then_stop)
        group.start_soon(stop_at_sigterm)


class _Terminations:
    """The SIGTERMs this process receives while `_sigterm` is open."""

    def __init__(self, signals: AsyncIterator[int] | None) -> None:
        self._signals = signals
        #: Our own handler (the event loop's): another one in its place means someone else took SIGTERM.
        self._ours = signal.getsignal(signal.SIGTERM) if signals is not None else None

    async def next(self) -> None:
        """Return at the next SIGTERM (never, where signals cannot be received)."""
        if self._signals is None:
            await anyio.sleep_forever()
            return
        async for _ in self._signals:
            return

    def taken_elsewhere(self) -> bool:
        """Whether a handler of someone else's (an HTTP server's) receives SIGTERM in place of ours."""
        return self._signals is not None and signal.getsignal(signal.SIGTERM) is not self._ours


@contextlib.asynccontextmanager
async def _sigterm() -> AsyncIterator[_Terminations]:
    """`_Terminations`; while open, SIGTERM does not kill the process."""
    try:
        receiver = anyio.open_signal_receiver(signal.SIGTERM)
        signals = receiver.__enter__()
    except (ValueError, NotImplementedError):  # not the main thread, or no signals on this platform
        yield _Terminations(None)
        return
    try:
        yield _Terminations(signals)
    finally:
        receiver.__exit__(None, None, None)
