"""A third-party JSON-RPC 2.0 server over WebSocket, for wsbridge's tests: aiohttp-json-rpc (PyPI),
with three methods of ours and its own `subscribe`/`unsubscribe` topics.

Methods: add(a, b) -> a + b; slow(seconds) -> "slow done" after that long; whoami() -> this
connection's number. Topic "ticks": a notification {"method": "ticks", "params": {"n": N}} every
--interval seconds to the connections subscribed to it.

Events on stdout: listening PORT, call METHOD ID (from a thin wrapper around each method).
Listens on loopback only.
"""

import argparse
import asyncio
import json

from aiohttp import web
from aiohttp_json_rpc import JsonRpc


def out(line):
    print(line, flush=True)


async def add(request):
    out(f"call add {json.dumps(request.msg.data.get('id'))}")
    a, b = request.params
    return a + b


async def slow(request):
    out(f"call slow {json.dumps(request.msg.data.get('id'))}")
    await asyncio.sleep(request.params[0])
    return "slow done"


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args()
    rpc = JsonRpc()
    rpc.add_methods(("", add), ("", slow))
    rpc.add_topics("ticks")
    app = web.Application()
    app.router.add_route("*", "/", rpc.handle_request)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    out(f"listening {port}")
    n = 0
    while True:
        await asyncio.sleep(args.interval)
        n += 1
        await rpc.notify("ticks", {"n": n})


if __name__ == "__main__":
    asyncio.run(main())
