"""A Socket.IO 5 server (python-socketio on aiohttp, Engine.IO 4), for wsbridge's tests.

Events with an ack: add(a, b) -> a + b; slow(seconds) -> "slow done" after that long. Rooms:
join(room) and leave(room); every --interval seconds each room with members gets
tick {"room": ROOM, "n": N}, N counting per room from 1 in this process. A client whose auth is
not --token (when given) is refused (44).

Events on stdout, one per line: listening PORT, connected SID, disconnected SID, call EVENT,
join ROOM, leave ROOM, members ROOM N (after each change), pong (each Engine.IO pong the server
receives). Listens on loopback only.
"""

import argparse
import asyncio
import logging

import socketio
from aiohttp import web


def out(line):
    print(line, flush=True)


class PongLog(logging.Handler):
    """Engine.IO logs every packet it receives: a line per pong."""

    def emit(self, record):
        if "Received packet PONG" in record.getMessage():
            out("pong")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--ping-interval", type=float, default=2)
    parser.add_argument("--ping-timeout", type=float, default=2)
    parser.add_argument("--token")
    args = parser.parse_args()

    engine_log = logging.getLogger("engineio.peer")
    engine_log.setLevel(logging.INFO)
    engine_log.addHandler(PongLog())
    engine_log.propagate = False
    sio = socketio.AsyncServer(
        async_mode="aiohttp", ping_interval=args.ping_interval, ping_timeout=args.ping_timeout, engineio_logger=engine_log, logger=False
    )
    app = web.Application()
    sio.attach(app)
    members = {}

    @sio.event
    async def connect(sid, environ, auth=None):
        if args.token is not None and (not isinstance(auth, dict) or auth.get("token") != args.token):
            raise socketio.exceptions.ConnectionRefusedError("not authorized")
        out(f"connected {sid}")

    @sio.event
    async def disconnect(sid, *rest):
        for room, sids in members.items():
            sids.discard(sid)
        out(f"disconnected {sid}")

    @sio.event
    async def add(sid, a, b):
        out("call add")
        return a + b

    @sio.event
    async def slow(sid, seconds):
        out("call slow")
        await asyncio.sleep(seconds)
        return "slow done"

    @sio.event
    async def join(sid, room):
        await sio.enter_room(sid, room)
        members.setdefault(room, set()).add(sid)
        out(f"join {room}")
        out(f"members {room} {len(members[room])}")

    @sio.event
    async def leave(sid, room):
        await sio.leave_room(sid, room)
        members.setdefault(room, set()).discard(sid)
        out(f"leave {room}")
        out(f"members {room} {len(members[room])}")

    async def ticker():
        counts = {}
        while True:
            await asyncio.sleep(args.interval)
            for room, sids in list(members.items()):
                if sids:
                    counts[room] = counts.get(room, 0) + 1
                    await sio.emit("tick", {"room": room, "n": counts[room]}, room=room)

    async def start(_app):
        _app["ticker"] = asyncio.create_task(ticker())

    app.on_startup.append(start)

    async def run():
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        out(f"listening {port}")
        await asyncio.Event().wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
