#!/usr/bin/env python3
"""Readers of wsbridged's WebSocket face for `wsbridge-bench cost --face websocket`: CONNECTIONS
apps of PyPI's `websockets` on the face's Unix socket, each reading until it has COUNT messages.
Prints `ready` once all are connected, then `{"messages": N}` when every one has its COUNT.

Usage: ws_readers.py --unix PATH --connections N --count COUNT
"""

import argparse
import asyncio
import json

from websockets.asyncio.client import unix_connect


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--unix", required=True)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--count", type=int, required=True)
    args = parser.parse_args()
    apps = [await unix_connect(args.unix, "ws://localhost/", max_size=None, ping_interval=None) for _ in range(args.connections)]
    print("ready", flush=True)

    async def read(ws):
        n = 0
        while n < args.count:
            await ws.recv()
            n += 1
        return n

    total = sum(await asyncio.gather(*(read(ws) for ws in apps)))
    print(json.dumps({"messages": total}), flush=True)
    for ws in apps:
        await ws.close()


asyncio.run(main())
