#!/usr/bin/env python3
"""The WebSocket relay a user would write instead of wsbridged's WebSocket face: the benchmark's
baseline for the face. One upstream WebSocket and a WebSocket server on a Unix socket, both PyPI's
`websockets`; every upstream message relayed to every client as it came, with
`websockets.broadcast` (the library's own fan-out: it skips a client whose buffer is full rather
than wait for it).

Usage: python_ws_relay.py ws://127.0.0.1:PORT/ /path/to/socket
"""

import asyncio
import os
import sys

import websockets
from websockets.asyncio.client import connect
from websockets.asyncio.server import broadcast, unix_serve

URL, SOCKET = sys.argv[1], sys.argv[2]
clients = set()


async def client(ws):
    clients.add(ws)
    try:
        await ws.wait_closed()
    finally:
        clients.discard(ws)


async def main():
    if os.path.exists(SOCKET):
        os.unlink(SOCKET)
    async with unix_serve(client, SOCKET, max_size=None, ping_interval=None):
        async with connect(URL, max_size=None, ping_interval=None, compression=None) as upstream:
            async for message in upstream:
                broadcast(clients, message)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except (KeyboardInterrupt, websockets.ConnectionClosed):
        pass
