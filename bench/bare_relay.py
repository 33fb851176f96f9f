"""The least a Python model-API proxy can do: aiohttp in, aiohttp out, bytes relayed as they come.

The reference `bench/llm_proxy_overhead.py` sets the gateway's CPU against: no decision, no ledger,
no fault machinery, on the same event loop as the gateway (uvloop, when installed).
Run: ``python bench/bare_relay.py UPSTREAM`` (prints ``... at URL`` on stderr).
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp
from aiohttp import web

_DROPPED = {"host", "content-length", "accept-encoding", "connection", "transfer-encoding", "keep-alive"}


async def main(upstream: str) -> None:
    session = aiohttp.ClientSession(
        auto_decompress=False, skip_auto_headers=("User-Agent", "Accept-Encoding")
    )

    async def relay(request: web.BaseRequest) -> web.StreamResponse:
        body = await request.read()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _DROPPED]
        async with session.request(
            request.method, upstream + request.raw_path, data=body, headers=headers
        ) as r:
            back = {k: v for k, v in r.headers.items() if k.lower() not in _DROPPED}
            response = web.StreamResponse(status=r.status, headers=back)
            await response.prepare(request)
            async for chunk in r.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    server = await asyncio.get_running_loop().create_server(web.Server(relay), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"relaying {upstream} at http://127.0.0.1:{port}", file=sys.stderr, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:  # the gateway then runs on asyncio's loop too
        asyncio.run(main(sys.argv[1]))
    else:
        uvloop.run(main(sys.argv[1]))
