#!/usr/bin/env python3
"""The bridge a user would write instead of wsbridged: the benchmark's baseline.

One upstream WebSocket (Python `websockets`), a Unix socket, every message as one NDJSON line
with a seq, one bounded queue per subscriber that drops its oldest line when full, and one
writer task per subscriber. `--simple` is the bridge as most would first write it (an
asyncio.Queue and a write per line); the default batches: one write of everything queued.

Usage: python_bridge.py [--simple] ws://127.0.0.1:PORT/ /path/to/socket [QUEUE]
"""

import asyncio
import collections
import json
import sys
import time

import websockets

SIMPLE = "--simple" in sys.argv
ARGS = [a for a in sys.argv[1:] if a != "--simple"]
URL, SOCKET = ARGS[0], ARGS[1]
QUEUE = int(ARGS[2]) if len(ARGS) > 2 else 4096
subscribers = set()


class Subscriber:
    def __init__(self, writer):
        self.writer = writer
        self.queue = collections.deque(maxlen=QUEUE)  # full: append drops the oldest
        self.ready = asyncio.Event()

    def put(self, line):
        self.queue.append(line)
        self.ready.set()

    async def write_loop(self):
        while not self.writer.is_closing():
            await self.ready.wait()
            self.ready.clear()
            lines = list(self.queue)
            self.queue.clear()
            self.writer.write(b"".join(lines))
            await self.writer.drain()


class SimpleSubscriber:
    def __init__(self, writer):
        self.writer = writer
        self.queue = asyncio.Queue(maxsize=QUEUE)

    def put(self, line):
        if self.queue.full():
            self.queue.get_nowait()  # drop the oldest
        self.queue.put_nowait(line)

    async def write_loop(self):
        while not self.writer.is_closing():
            self.writer.write(await self.queue.get())
            await self.writer.drain()


async def serve(reader, writer):
    sub = SimpleSubscriber(writer) if SIMPLE else Subscriber(writer)
    subscribers.add(sub)
    writer.write(b'{"type":"hello","protocol":1}\n')
    task = asyncio.create_task(sub.write_loop())
    try:
        while await reader.read(65536):
            pass
    except ConnectionError:
        pass
    finally:
        subscribers.discard(sub)
        task.cancel()
        writer.close()


async def upstream():
    seq = 0
    async with websockets.connect(URL, max_size=None, compression=None) as ws:
        async for message in ws:
            seq += 1
            line = {"type": "message", "seq": seq, "ts": int(time.time() * 1000), "kind": "text", "data": message}
            data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
            for sub in subscribers:
                sub.put(data)


async def main():
    server = await asyncio.start_unix_server(serve, SOCKET)
    print("listening", flush=True)
    async with server:
        await upstream()


asyncio.run(main())
