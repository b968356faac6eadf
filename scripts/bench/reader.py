#!/usr/bin/env python3
"""A subscriber as a Python user would write it, for the latency benchmark: N connections to
a bridge's Unix socket in one asyncio process, counting message lines, checking seq, and
taking each message's latency from the generator's send stamp (`\\"t\\":` + 10^19 + CLOCK_MONOTONIC ns).
Prints `ready` once connected, then one JSON line like wsbridge-reader's.

Usage: reader.py SOCKET CONNECTIONS
"""

import asyncio
import json
import re
import sys
import time

SOCKET, CONNECTIONS = sys.argv[1], int(sys.argv[2])
SEQ = re.compile(rb'^\{"type":"message","seq":(\d+)')
STAMP = re.compile(rb'\\"t\\":(\d+)')
totals = {"messages": 0, "lost": 0, "gaps": 0, "ended": 0, "first_ns": 0, "last_ns": 0}
latencies = []


async def read(reader, done):
    last = None
    while line := await reader.readline():
        now = time.monotonic_ns()
        m = SEQ.match(line)
        if not m:
            if b'"type":"dropped"' in line:
                totals["lost"] += json.loads(line)["count"]
                last = json.loads(line)["to"]
            continue
        seq = int(m.group(1))
        totals["messages"] += 1
        if last is not None and seq > last + 1:
            totals["gaps"] += seq - last - 1
        last = seq
        t = STAMP.search(line)
        sent = int(t.group(1)) - 10**19 if t else 0
        if 0 < sent < 10**19:
            latencies.append((now - sent) // 1000)
        totals["first_ns"] = totals["first_ns"] or now
        totals["last_ns"] = now
        if b"__end__" in line:
            totals["ended"] += 1
            break
    done()


async def main():
    finished = asyncio.Event()
    left = [CONNECTIONS]

    def done():
        left[0] -= 1
        if left[0] == 0:
            finished.set()

    kept = []  # a dropped StreamWriter closes its connection; a dropped task may be collected
    for _ in range(CONNECTIONS):
        reader, writer = await asyncio.open_unix_connection(SOCKET, limit=1 << 20)
        kept += [writer, asyncio.create_task(read(reader, done))]
    print("ready", flush=True)
    await finished.wait()
    latencies.sort()
    pick = lambda p: latencies[min(len(latencies) - 1, int(len(latencies) * p))] if latencies else 0
    result = dict(totals, connections=CONNECTIONS, latency_count=len(latencies))
    result.update(p50_us=pick(0.5), p99_us=pick(0.99), p999_us=pick(0.999), max_us=latencies[-1] if latencies else 0)
    print(json.dumps(result), flush=True)


asyncio.run(main())
