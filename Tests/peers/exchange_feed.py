"""An exchange-style feed for wsbridge's session tests: Python `websockets` (asyncio server).

The feed is one numbered log: message N (N = 1, 2, ...) is
{"type":"trade","channel":C,"offset":N} with C = channels[(N - 1) % len(channels)], and the
log grows at --rate messages per second from the instant stored in --state (created on the
first start), so a server killed with SIGKILL and started again continues the same log.

Per connection, like a real exchange:
- nothing but {"op":"auth","token":T} is accepted until it is answered {"type":"authed"} (or
  --auth-reply, which leaves the connection unauthenticated): any
  other message first, or a wrong token, is a violation (printed) and the connection is closed
  with 1008;
- {"op":"resume","after":N} (N may be null: from the start) sets where delivery begins;
  without it, a connection gets only new messages;
- {"op":"subscribe","channel":C} / {"op":"unsubscribe","channel":C};
- the log is delivered in offset order, filtered by the channels subscribed, once the
  connection has been quiet for 20 ms after its last request (so subscriptions that arrive
  together all apply from the resume point).

Commands on stdin: close CODE [REASON] (every connection) | drop (abort TCP, no close frame) |
quit. Events on stdout: listening PORT, connected, recv TEXT, authed, violation WHAT,
disconnected.
"""

import argparse
import asyncio
import json
import os
import sys
import time

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

clients = set()
AUTHED = '{"type":"authed"}'


def out(line):
    print(line, flush=True)


class Feed:
    def __init__(self, state_path, rate, channels):
        if os.path.exists(state_path):
            with open(state_path) as f:
                self.t0 = float(f.read())
        else:
            self.t0 = time.time()
            with open(state_path + ".tmp", "w") as f:
                f.write(repr(self.t0))
            os.rename(state_path + ".tmp", state_path)
        self.rate = rate
        self.channels = channels

    def head(self):
        return int((time.time() - self.t0) * self.rate)

    def channel(self, n):
        return self.channels[(n - 1) % len(self.channels)]

    def message(self, n):
        return json.dumps({"type": "trade", "channel": self.channel(n), "offset": n}, separators=(",", ":"))


async def handler(ws, feed, token, auth_reply):
    clients.add(ws)
    out("connected")
    authed = False
    position = None  # the last offset delivered (or resumed after)
    subscribed = set()
    last_request = time.monotonic()
    try:
        while True:
            try:
                text = await asyncio.wait_for(ws.recv(), timeout=0.005)
            except asyncio.TimeoutError:
                text = None
            if text is not None:
                last_request = time.monotonic()
                out(f"recv {text}")
                try:
                    request = json.loads(text)
                except ValueError:
                    request = {}
                op = request.get("op") if isinstance(request, dict) else None
                if not authed:
                    if op != "auth":
                        out(f"violation before-auth {text}")
                        await ws.close(1008, "authenticate first")
                        return
                    if request.get("token") != token:
                        out("violation bad-token")
                        await ws.close(1008, "bad token")
                        return
                    await ws.send(auth_reply)
                    if auth_reply == AUTHED:
                        authed = True
                        out("authed")
                    continue
                if op == "resume":
                    after = request.get("after")
                    position = 0 if after is None else int(after)
                elif op == "subscribe":
                    subscribed.add(request.get("channel"))
                elif op == "unsubscribe":
                    subscribed.discard(request.get("channel"))
                continue
            if not authed or not subscribed or time.monotonic() - last_request < 0.02:
                continue
            head = feed.head()
            if position is None:
                position = head
            batch = [feed.message(n) for n in range(position + 1, head + 1) if feed.channel(n) in subscribed]
            position = head
            for m in batch:
                await ws.send(m)
    except ConnectionClosed:
        pass
    finally:
        clients.discard(ws)
        out("disconnected")


async def commands(stop):
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except (OSError, ValueError):
        # stdin is not a pipe (a terminal or /dev/null): serve without commands.
        await stop
        return
    while True:
        line = await reader.readline()
        if not line:
            # stdin closed: keep serving (the test may hold no pipe open)
            await stop
            return
        words = line.decode().strip().split(" ", 2)
        if words[0] == "close":
            code = int(words[1])
            reason = words[2] if len(words) > 2 else ""
            for ws in list(clients):
                await ws.close(code, reason)
        elif words[0] == "drop":
            for ws in list(clients):
                ws.transport.abort()
        elif words[0] == "quit":
            stop.set_result(None)
            return


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--state", required=True)
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--channels", default="s,a,b")
    parser.add_argument("--token", default="t0ken")
    parser.add_argument("--auth-reply", default=AUTHED, help="the answer to auth; anything but the default leaves the session unauthenticated")
    args = parser.parse_args()
    feed = Feed(args.state, args.rate, args.channels.split(","))
    stop = asyncio.get_running_loop().create_future()
    async with serve(lambda ws: handler(ws, feed, args.token, args.auth_reply), "127.0.0.1", args.port) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        out(f"listening {port}")
        await commands(stop)


if __name__ == "__main__":
    asyncio.run(main())
