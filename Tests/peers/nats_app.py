"""A NATS app written with nats-py (PyPI), unmodified, over ws://, for wsbridge's WebSocket
face tests. Only the URL points at the daemon.

Usage: nats_app.py URL NAME. It subscribes to `feed.>` (sid 1: nats-py numbers its
subscriptions from 1 on each connection, so every app uses the same sids), joins queue group
`workers` on `jobs` (sid 2), serves requests on `svc.NAME` (sid 3), then asks `svc.NAME`
itself 3 times (request/reply through the daemon, its reply inbox its own), then prints what
comes. Prints: `open`, `feed SUBJECT DATA`, `job DATA`, `reply DATA`, `error TEXT` for anything
the library raised (then exits 1).
"""

import asyncio
import sys

import nats
from app_run import run


def out(line):
    print(line, flush=True)


async def main(url, name):
    async def errored(error):
        out(f"error {type(error).__name__}: {error}")

    nc = await nats.connect(url, error_cb=errored, allow_reconnect=False, name=name)
    out("open")

    async def feed(msg):
        out(f"feed {msg.subject} {msg.data.decode()}")

    async def job(msg):
        out(f"job {msg.data.decode()}")

    async def serve(msg):
        await msg.respond(f"{name} served {msg.data.decode()}".encode())

    await nc.subscribe("feed.>", cb=feed)
    await nc.subscribe("jobs", queue="workers", cb=job)
    await nc.subscribe(f"svc.{name}", cb=serve)
    await nc.flush()
    out("subscribed")
    for i in range(3):
        reply = await nc.request(f"svc.{name}", f"{name}-{i}".encode(), timeout=5)
        out(f"reply {reply.data.decode()}")
    await asyncio.Future()


if __name__ == "__main__":
    run(main(sys.argv[1], sys.argv[2]))
