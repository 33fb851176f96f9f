"""Running the proxy until its client leaves."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio

from mcp_resili.faults import BasePlan
from mcp_resili.proxy.relay import ClientRelay
from mcp_resili.proxy.server import ProxyServer
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
    the upstream is shut down further SIGTERMs are ignored, so it never outlives the proxy. An upstream
    that cannot be started or reached, or does not answer, raises `UpstreamError` (one line saying
    why). One that closes its connection while the proxy serves does not stop the serving: the call
    in flight and every later one get an ``isError`` result saying so (stopping at once would cancel
    their answers, and a stdio client still holding our stdin would wait on nothing), and once the
    client leaves the same `UpstreamError` is raised.
    """
    relay = ClientRelay()
    options: dict[str, Any] = {
        "seed": seed,
        "trace_dir": trace_dir,
        "expose_faults": expose_faults,
        "time_scale": time_scale,
    }
    with _sigterm() as terminated:
        async with connect_upstream(target, **relay.client_options()) as upstream:
            try:
                with anyio.fail_after(CONNECT_TIMEOUT):
                    proxy = await ProxyServer.create(
                        upstream.client, plan, upstream=target, relay=relay, **options
                    )
            except TimeoutError:
                raise UpstreamError(f"the server {target!r} did not list its tools in time") from None
            await _serve_until_stopped(proxy, serve, terminated)
            if upstream.closed.is_set():
                raise upstream.lost()


async def _serve_until_stopped(
    proxy: ProxyServer, serve: Serve, terminated: Callable[[], Awaitable[None]]
) -> None:
    """Serve until the client leaves or SIGTERM."""
    async with anyio.create_task_group() as group:

        async def stop_after(task: Callable[[], Awaitable[object]]) -> None:
            await task()
            group.cancel_scope.cancel()

        group.start_soon(stop_after, lambda: serve(proxy))
        group.start_soon(stop_after, terminated)


@contextlib.contextmanager
def _sigterm() -> Iterator[Callable[[], Awaitable[None]]]:
    """A function returning at the first SIGTERM; while open, SIGTERM does not kill the process."""
    try:
        receiver = anyio.open_signal_receiver(signal.SIGTERM)
        signals = receiver.__enter__()
    except (ValueError, NotImplementedError):  # not the main thread, or no signals on this platform
        yield anyio.sleep_forever
        return

    async def first() -> None:
        async for _ in signals:
            return

    try:
        yield first
    finally:
        receiver.__exit__(None, None, None)
