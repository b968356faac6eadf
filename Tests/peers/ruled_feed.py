"""An exchange-style feed that enforces per-connection rules, as Binance publishes them, scaled
down (issue 44): Python `websockets` (asyncio server).

Streams are named s1, s2, ...; each carries --events-per-second events
{"stream":S,"data":{"u":N}} where N is the update id, taken from the clock (the same update id
on every connection at the same instant, every id sent once per connection from the subscribe
on: two connections overlapping deliver the same events, and a consumer can tell a gap from a
duplicate).

Rules, per connection unless said:
- --messages-per-second M (with a burst of M): a client message (text or binary; pings are
  answered by the library, uncounted) beyond it is a violation: printed, and the connection
  closed with 1008. Judged by when the messages arrived, as a server with time to spare judges
  them, not by when this process got to read them (a busy machine keeps it off the CPU, and then
  it reads a second's messages at once): each message arrived between the socket read before
  the one that brought it and that read, and it is a violation only when no arrival times within
  those bounds keep the rule (each message given the earliest time the rule allows);
- --max-streams K: a SUBSCRIBE that would hold more than K streams is answered
  {"error":{"code":-1,"msg":"max streams"},"id":N} and changes nothing;
- --lifetime T: the server closes every connection T seconds after it opened (1001), after
  sending {"event":"closing","in_ms":500} half a second before;
- --lag-even S: on the even-numbered connections (2, 4, ...) each stream stalls S seconds after
  its first event and stays S seconds behind (a renewal's new connection falls behind the old
  one, then the next one is ahead of it);
- --connect-attempts A --window W: upgrades beyond A in any W seconds (all connections) are
  refused with HTTP 429 (printed: refused); --refuse: every upgrade is refused so (HTTP 503).
Requests: {"method":"SUBSCRIBE"|"UNSUBSCRIBE","params":[S,...],"id":N} answered
{"result":null,"id":N}; {"method":"LIST_SUBSCRIPTIONS","id":N} answered with the list; {"method":"CUT"} closes the
connection that carried it (1012), as a server ending it without notice; {"method":"SLOW",
"id":N,"delay":S} is answered {"result":"slow","id":N} on its connection S seconds later, or with
"hold":true when the test writes `release N` to stdin (printed: answered C N); {"method":"NOTICE"}
sends that connection the closing notice (without closing).

Events on stdout: listening PORT, connected C, recv C TEXT, violation C WHAT, subscribed C S,
refused, closed C CODE.
"""

import argparse
import asyncio
import collections
import http
import json
import sys
import time

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import Opcode


class TimedConnection(ServerConnection):
    """Notes, for each data message, the interval it arrived in: after the socket read before the
    one that brought it, by that read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.previous_read = time.monotonic()
        self.read_interval = (self.previous_read, self.previous_read)
        self.arrivals = collections.deque()

    def data_received(self, data):
        now = time.monotonic()
        self.read_interval = (self.previous_read, now)
        self.previous_read = now
        super().data_received(data)

    def process_event(self, event):
        if getattr(event, "opcode", None) in (Opcode.TEXT, Opcode.BINARY):
            self.arrivals.append(self.read_interval)
        super().process_event(event)


class Rate:
    """The rule of M messages a second with a burst of M, as a virtual scheduling (GCRA): each
    message takes the earliest time within its arrival interval that keeps the rule; none is a
    violation."""

    def __init__(self, per_second, now):
        self.interval = 1 / per_second
        self.tolerance = (per_second - 1) * self.interval
        self.theoretical = now
        self.last = now

    def admit(self, earliest, latest):
        t = max(earliest, self.last, self.theoretical - self.tolerance)
        if t > latest + 1e-6:
            return False
        self.last = t
        self.theoretical = max(self.theoretical, t) + self.interval
        return True


def out(line):
    print(line, flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--messages-per-second", type=float, default=5)
    p.add_argument("--max-streams", type=int, default=20)
    p.add_argument("--lifetime", type=float, default=0)
    p.add_argument("--connect-attempts", type=int, default=0)
    p.add_argument("--window", type=float, default=300)
    p.add_argument("--events-per-second", type=float, default=10)
    p.add_argument("--refuse", action="store_true")
    p.add_argument("--lag-even", type=float, default=0)
    a = p.parse_args()
    attempts = collections.deque()
    counter = [0]

    def admit(connection, request):
        if a.refuse:
            out("refused")
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "not now\n")
        if a.connect_attempts <= 0:
            return None
        now = time.monotonic()
        while attempts and attempts[0] <= now - a.window:
            attempts.popleft()
        if len(attempts) >= a.connect_attempts:
            out("refused")
            return connection.respond(http.HTTPStatus.TOO_MANY_REQUESTS, "too many connection attempts\n")
        attempts.append(now)
        return None

    async def handler(ws):
        counter[0] += 1
        c = counter[0]
        out(f"connected {c}")
        streams = []
        rate = Rate(a.messages_per_second, time.monotonic())
        lag = a.lag_even if c % 2 == 0 else 0

        def clock(behind=0):
            return int((time.time() - behind) * a.events_per_second)

        # The next update id each stream sends on this connection: every id from the subscribe
        # on, none skipped however late the loop wakes.
        following = {}

        async def feed():
            while True:
                await asyncio.sleep(1 / a.events_per_second)
                live, late = clock(), clock(lag)
                for s in list(streams):
                    now = late if s in following else live
                    start = following.setdefault(s, now)
                    for u in range(start, now + 1):
                        await ws.send(json.dumps({"stream": s, "data": {"u": u}}))
                    following[s] = max(start, now + 1)

        async def lifetime():
            await asyncio.sleep(max(0, a.lifetime - 0.5))
            await ws.send(json.dumps({"event": "closing", "in_ms": 500}))
            await asyncio.sleep(0.5)
            await ws.close(1001, "connection lifetime reached")

        tasks = [asyncio.create_task(feed())]
        if a.lifetime > 0:
            tasks.append(asyncio.create_task(lifetime()))
        try:
            async for text in ws:
                earliest, latest = ws.arrivals.popleft()
                if not rate.admit(earliest, latest):
                    out(f"violation {c} more than {a.messages_per_second:g} messages per second")
                    await ws.close(1008, "too many messages")
                    break
                out(f"recv {c} {text}")
                try:
                    request = json.loads(text)
                except ValueError:
                    continue
                method, params, rid = request.get("method"), request.get("params") or [], request.get("id")
                if method == "SUBSCRIBE":
                    new = [s for s in params if s not in streams]
                    if len(streams) + len(new) > a.max_streams:
                        await ws.send(json.dumps({"error": {"code": -1, "msg": "max streams"}, "id": rid}))
                        continue
                    streams.extend(new)
                    for s in new:
                        out(f"subscribed {c} {s}")
                    await ws.send(json.dumps({"result": None, "id": rid}))
                elif method == "UNSUBSCRIBE":
                    streams[:] = [s for s in streams if s not in params]
                    for s in params:
                        following.pop(s, None)
                    await ws.send(json.dumps({"result": None, "id": rid}))
                elif method == "SLOW":
                    # Answered on this connection after `delay` seconds: a request in flight.
                    async def answer_later(rid, delay, hold):
                        if hold:
                            await released(rid).wait()
                        else:
                            await asyncio.sleep(delay)
                        await ws.send(json.dumps({"result": "slow", "id": rid}))
                        out(f"answered {c} {rid}")
                    tasks.append(asyncio.create_task(answer_later(rid, float(request.get("delay", 1)), bool(request.get("hold")))))
                elif method == "NOTICE":
                    # The server's notice that it will close this connection (it does not).
                    await ws.send(json.dumps({"event": "closing", "in_ms": 500}))
                elif method == "CUT":
                    # The test cuts this connection, as a server ending it without notice would.
                    await ws.close(1012, "cut")
                    break
                elif method == "LIST_SUBSCRIPTIONS":
                    await ws.send(json.dumps({"result": streams, "id": rid}))
        except ConnectionClosed:
            pass
        finally:
            for t in tasks:
                t.cancel()
            out(f"closed {c} {ws.close_code}")

    releases = {}

    def released(rid):
        return releases.setdefault(str(rid), asyncio.Event())

    async def commands():
        # `release N`: a held SLOW request N is answered now (the test has seen what it waited for).
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            words = line.split()
            if len(words) == 2 and words[0] == "release":
                released(words[1]).set()

    async def run():
        asyncio.create_task(commands())
        async with serve(
            handler, "127.0.0.1", a.port, process_request=admit, ping_interval=None, create_connection=TimedConnection
        ) as server:
            out(f"listening {server.sockets[0].getsockname()[1]}")
            await asyncio.Future()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
