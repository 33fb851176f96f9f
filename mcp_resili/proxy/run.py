"""Running the proxy until its client leaves."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from mcp_resili.faults import BasePlan
from mcp_resili.faults.rules import check_rule_tools
from mcp_resili.proxy.relay import ClientRelay
from mcp_resili.proxy.server import SHUTTING_DOWN, ProxyServer, check_plan
from mcp_resili.proxy.upstream import CONNECT_TIMEOUT, UpstreamError, connect_upstream

Serve = Callable[[ProxyServer], Awaitable[None]]


async def run_proxy(
    target: str,
    plan: BasePlan,
    serve: Serve,
    *,
    seed: int = 0,
    trace_dir: Path | None = None,
    expose_faults: bool = False,
    time_scale: float = 1.0,
) -> None:
    """Connect to ``target``, then ``serve`` the proxy until it returns (the client left) or SIGTERM.

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
    async with _sigterm() as terminations, connect_upstream(target, **relay.client_options()) as upstream:
        try:
            with anyio.fail_after(CONNECT_TIMEOUT):
                proxy = await ProxyServer.create(
                    upstream.client, plan, upstream=target, relay=relay, **options
                )
        except TimeoutError:
            raise UpstreamError(f"the server {target!r} did not list its tools in time") from None
        # A rule whose tool pattern matches none of the upstream's tools would never fire: refused.
        check_rule_tools(plan, proxy.tools, "(the proxy's --faults)", f"the upstream {target!r}")
        await _serve_until_stopped(proxy, serve, terminations)
        if upstream.closed.is_set():
            raise upstream.lost()


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
