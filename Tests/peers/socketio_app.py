"""A Socket.IO app written with python-socketio's AsyncClient (PyPI), unmodified, on the
websocket transport, for wsbridge's WebSocket face tests. Only the URL points at the daemon.

Usage: socketio_app.py URL NAME [--join ROOM]. It connects, joins ROOM if asked (an emit with
an ack), then emits `add` with an ack 5 times (python-socketio numbers acks from 0 on each
connection, so every app uses the same ids) and prints each answer, then prints each `tick`
event as it comes. Prints: `open SID`, `joined ROOM`, `answer SUM`, `tick ROOM N`,
`disconnected`, `error TEXT` for anything the library raised (then exits 1).
"""

import argparse
import asyncio

import socketio
from app_run import run


def out(line):
    print(line, flush=True)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("--join")
    args = parser.parse_args()
    sio = socketio.AsyncClient(reconnection=False)

    @sio.on("tick")
    async def tick(data):
        out(f"tick {data['room']} {data['n']}")

    @sio.event
    async def disconnect(*_):
        out("disconnected")

    await sio.connect(args.url, transports=["websocket"])
    out(f"open {sio.sid}")
    if args.join:
        await sio.call("join", args.join, timeout=10)
        out(f"joined {args.join}")
    base = 1000 if args.name == "a" else 2000 if args.name == "b" else 3000
    for i in range(5):
        out(f"answer {await sio.call('add', (base, i), timeout=10)}")
    await sio.wait()


if __name__ == "__main__":
    run(main())
