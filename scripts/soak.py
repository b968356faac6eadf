#!/usr/bin/env python3
"""Everything at once against a real wsbridged, for minutes: stability over time, not one test.

The soak runs the daemon (durable spool on, systemd's NOTIFY_SOCKET watched) against the test
server with a ticker, readers that check every seq, and all of this at once: link cuts (short
drops and outages of a few seconds while the server refuses), client churn, a stalled
subscriber, a flooding non-reader, sends at a steady rate (queued and spooled while the link is
down), a sticky key (sent again on every open), and a SIGHUP reload every few seconds. It prints
RSS, fds, threads, CPU and deliveries at every sample, and at the end the slope of RSS over the
last half, lost queued sends, unannounced gaps and unacknowledged reloads.

`--reloads N` runs the other proof instead: N SIGHUP reloads while 100 subscribers (in
wsbridge-reader processes) read a 10k msg/s flood; no unannounced gap, no fd or memory growth,
every reload acknowledged to systemd (RELOADING=1, then READY=1).

Usage: scripts/soak [MINUTES] [--json FILE] [--png FILE] | scripts/soak --reloads N [--json FILE]
"""

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from harness import (Bystander, Daemon, Generator, cpu_ticks, fd_count, finish, open_client, proc_status,  # noqa: E402
                     rss_kib, run, ticks)

TICKS = os.sysconf("SC_CLK_TCK")
# The reload storm's bound on RSS growth over the warm-up flood's.
RSS_GROWTH_MIB = 16


class Notifications:
    """systemd's side of NOTIFY_SOCKET: counts reloads begun (RELOADING=1) and the READY=1 that
    acknowledges each."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setblocking(False)
        self.reloading = 0
        self.acknowledged = 0
        self.pending = False
        self.changed = asyncio.Event()
        asyncio.get_running_loop().add_reader(self.sock, self.read)

    async def begun(self, count, timeout=10):
        """Waits until `count` reloads have begun (RELOADING=1), or the timeout."""
        deadline = time.monotonic() + timeout
        while self.reloading < count and time.monotonic() < deadline:
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                return

    def read(self):
        while True:
            try:
                data = self.sock.recv(65536).decode(errors="replace")
            except BlockingIOError:
                return
            fields = data.split("\n")
            if "RELOADING=1" in fields:
                self.reloading += 1
                self.pending = True
            if "READY=1" in fields and self.pending:
                self.acknowledged += 1
                self.pending = False
            self.changed.set()

    async def settle(self, reloads, timeout=30):
        deadline = time.monotonic() + timeout
        while self.acknowledged < reloads and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def close(self):
        asyncio.get_running_loop().remove_reader(self.sock)
        self.sock.close()


class Upstream:
    """What the test server received from the daemon: the soak's sends and the sticky text."""

    def __init__(self):
        self.received = []
        self.sticky = 0
        self.opens = 0

    def line(self, line):
        if line.startswith("message soak-"):
            text = line[len("message "):]
            if text == "soak-sticky":
                self.sticky += 1
            else:
                self.received.append(int(text[len("soak-"):]))
            return True
        if line.startswith("connected "):
            self.opens += 1
        return False


async def request(path, body, timeout=10):
    reader, writer = await open_client(path)
    writer.write(b'{"id":"u","op":"unsubscribe"}\n')
    writer.write(json.dumps({"id": "r", **body}).encode() + b"\n")
    await writer.drain()
    try:
        while True:
            msg = json.loads(await asyncio.wait_for(reader.readline(), timeout))
            if msg.get("type") == "reply" and msg.get("id") == "r":
                return msg
    finally:
        writer.close()


async def settled_fds(path, pid, timeout=60):
    """The daemon's fds once it counts no client but the one asking (the readers that left are
    closed, their fds with them), counted while that one is still connected: each count has
    exactly one client's fd in it."""
    reader, writer = await open_client(path)
    writer.write(b'{"id":"u","op":"unsubscribe"}\n')
    deadline = time.monotonic() + timeout
    try:
        while True:
            writer.write(b'{"id":"s","op":"status"}\n')
            await writer.drain()
            while True:
                msg = json.loads(await asyncio.wait_for(reader.readline(), timeout))
                if msg.get("type") == "reply" and msg.get("id") == "s":
                    break
            if msg["result"]["clients"] <= 1 or time.monotonic() > deadline:
                return fd_count(pid)
            await asyncio.sleep(0.05)
    finally:
        writer.close()


class Sender:
    """Sends `soak-N` at a steady rate on one connection and keeps what each reply said."""

    def __init__(self):
        self.statuses = {}
        self.next = 0

    async def run(self, path, rate, stop):
        reader, writer = await open_client(path)
        writer.write(b'{"id":"u","op":"unsubscribe"}\n')
        await writer.drain()

        async def replies():
            while True:
                line = await reader.readline()
                if not line:
                    return
                msg = json.loads(line)
                if msg.get("type") == "reply" and msg.get("id", "").startswith("s"):
                    n = int(msg["id"][1:])
                    self.statuses[n] = msg["result"]["status"] if msg["ok"] else msg["error"]["code"]

        task = asyncio.create_task(replies())
        while not stop.is_set():
            n = self.next
            self.next += 1
            writer.write(json.dumps({"id": f"s{n}", "op": "send", "text": f"soak-{n}"}).encode() + b"\n")
            await asyncio.wait_for(writer.drain(), 30)
            await asyncio.sleep(1 / rate)
        deadline = time.monotonic() + 60
        while len(self.statuses) < self.next and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        task.cancel()
        writer.close()


async def churn(path, stop, counts):
    while not stop.is_set():
        reader, writer = await open_client(path, read_hello=False)
        hello = json.loads(await reader.readline())
        counts["churned"] += 1
        counts["refused"] += hello["type"] != "hello"
        writer.close()
        await asyncio.sleep(0.05)


async def stalled(path, stop):
    """Subscribes and never reads; a new one every 20 s."""
    while not stop.is_set():
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        try:
            await asyncio.wait_for(stop.wait(), 20)
        except asyncio.TimeoutError:
            pass
        sock.close()


async def flooder(path, stop):
    """Writes status requests as fast as the socket takes them and never reads a reply."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    sock.setblocking(False)
    chunk = b'{"op":"status"}\n' * 4096
    while not stop.is_set():
        try:
            sock.send(chunk)
            await asyncio.sleep(0)
        except BlockingIOError:
            await asyncio.sleep(0.05)
    sock.close()


async def cuts(gen, stop, every, counts):
    """Alternately a drop (the daemon reconnects at once) and an outage of 3 s."""
    async for _ in ticks(stop, every):
        counts["cuts"] += 1
        if counts["cuts"] % 2:
            gen.command("drop")
        else:
            gen.command("refuse on")
            gen.command("drop")
            await asyncio.sleep(3)
            gen.command("refuse off")


async def reloads(d, config, stop, every, counts):
    """SIGHUP every few seconds, the file changed each time (queue.max_messages 10000/10001)."""
    async for _ in ticks(stop, every):
        with open(config) as f:
            text = f.read()
        flip = "max_messages = 10001" if "max_messages = 10000" in text else "max_messages = 10000"
        with open(config, "w") as f:
            f.write(text.replace("max_messages = 10000", flip).replace("max_messages = 10001", flip))
        os.kill(d.pid, signal.SIGHUP)
        counts["reloads"] += 1


def slope(points):
    """Least-squares slope of (minute, value) points."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


async def soak(args, workdir):
    minutes = args.minutes
    upstream = Upstream()
    gen = Generator(args.bin, on_line=upstream.line)
    notify = Notifications(os.path.join(workdir, "notify.sock"))
    spool = os.path.join(workdir, "spool")
    os.mkdir(spool)
    extra = (f'[queue]\nmax_messages = 10000\nspool = "{spool}"\nfsync = "batch"\n'
             '[backoff]\nbase = "100ms"\ncap = "1s"\n')
    d = Daemon(args.bin, workdir, gen.port, extra=extra, env={**os.environ, "NOTIFY_SOCKET": notify.path})
    config = os.path.join(workdir, "wsbridged.toml")
    stop = asyncio.Event()
    counts = {"churned": 0, "refused": 0, "cuts": 0, "reloads": 0}
    samples = []
    tasks = []
    try:
        gen.wait_for("connected 1")
        readers = [Bystander(latency=False) for _ in range(4)]
        for r in readers:
            r.task = asyncio.create_task(r.run(d.socket))
        sticky = await request(d.socket, {"op": "send", "text": "soak-sticky", "sticky": "soak", "scope": "daemon"})
        assert sticky["ok"], sticky
        opens_at_sticky = upstream.opens
        gen.command(f"ticker {args.rate or 500} 200")
        await asyncio.sleep(1)
        fds_start = fd_count(d.pid)
        sender = Sender()
        tasks = [
            asyncio.create_task(sender.run(d.socket, 50, stop), name="sender"),
            asyncio.create_task(churn(d.socket, stop, counts), name="churn"),
            asyncio.create_task(stalled(d.socket, stop), name="stalled subscriber"),
            asyncio.create_task(flooder(d.socket, stop), name="flooding non-reader"),
            asyncio.create_task(cuts(gen, stop, 20, counts), name="link cuts"),
            asyncio.create_task(reloads(d, config, stop, 3, counts), name="reloads"),
        ]
        interval = 60 if minutes >= 5 else 10
        start = time.monotonic()
        ticks, delivered = cpu_ticks(d.pid), 0
        print(f"soak: wsbridged pid {d.pid}, {minutes} min, a sample every {interval} s", flush=True)
        print("| minute | RSS MiB | fds | threads | CPU % | deliveries | link cuts | reloads |", flush=True)
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)
        while time.monotonic() - start < minutes * 60:
            await asyncio.sleep(interval)
            if d.proc.poll() is not None:
                raise RuntimeError(f"wsbridged exited with {d.proc.returncode}: see {d.log.name}")
            now_ticks, now_delivered = cpu_ticks(d.pid), sum(r.count for r in readers)
            sample = {
                "minute": round((time.monotonic() - start) / 60, 2),
                "rss_kib": rss_kib(d.pid),
                "fds": fd_count(d.pid),
                "threads": proc_status(d.pid, "Threads"),
                "cpu_percent": round(100 * (now_ticks - ticks) / (interval * TICKS), 1),
                "deliveries": now_delivered - delivered,
                "cuts": counts["cuts"],
                "reloads": counts["reloads"],
            }
            ticks, delivered = now_ticks, now_delivered
            samples.append(sample)
            print(f"| {sample['minute']} | {sample['rss_kib'] / 1024:.1f} | {sample['fds']} | {sample['threads']} | "
                  f"{sample['cpu_percent']} | {sample['deliveries']} | {sample['cuts']} | {sample['reloads']} |", flush=True)
        stop.set()
        # Each part ends within seconds of stop (the sender waits up to 60 s for its last
        # replies); one that does not is a finding, named, not a hang.
        _, pending = await asyncio.wait(tasks, timeout=90)
        stuck = sorted(t.get_name() for t in pending)
        for t in pending:
            t.cancel()
        failed = sorted(f"{t.get_name()}: {t.exception()!r}" for t in tasks if t.done() and not t.cancelled() and t.exception())
        gen.command("refuse off")
        # The queue drains once the link is open; then the server has every queued send.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = (await request(d.socket, {"op": "status"}))["result"]
            if status["state"] == "open" and status["queue"]["messages"] == 0:
                break
            await asyncio.sleep(0.2)
        gen.command("ticker off")
        queued = {n for n, s in sender.statuses.items() if s == "queued"}
        sent = {n for n, s in sender.statuses.items() if s == "sent"}
        deadline = time.monotonic() + 30
        while not queued <= set(upstream.received) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        last, deadline = -1, time.monotonic() + 60
        while sum(r.count for r in readers) != last and time.monotonic() < deadline:
            last = sum(r.count for r in readers)
            await asyncio.sleep(0.5)
        await notify.settle(counts["reloads"])
        await asyncio.sleep(0.5)
        received = set(upstream.received)
        # Queued sends go out in order, ahead of later ones: received in increasing order, but
        # for a send on the wire when a link was cut (sent, then lost with that connection).
        order = [n for n in upstream.received if n in queued]
        half = [(s["minute"], s["rss_kib"]) for s in samples if s["minute"] >= minutes / 2]
        result = {
            "minutes": minutes,
            "samples": samples,
            "rss_slope_kib_per_min_last_half": round(slope(half), 1),
            "fds_start": fds_start,
            "fds_end": fd_count(d.pid),
            "deliveries": sum(r.count for r in readers),
            "announced_drops": sum(r.dropped for r in readers),
            "unannounced_gaps": sum(r.out_of_order for r in readers),
            "sends": sender.next,
            "sent": len(sent),
            "queued": len(queued),
            "refused_sends": {s: list(sender.statuses.values()).count(s) for s in set(sender.statuses.values()) - {"sent", "queued"}},
            "lost_queued": len(queued - received),
            "queued_out_of_order": sum(1 for a, b in zip(order, order[1:]) if b < a),
            "lost_sent_at_cuts": len(sent - received),
            "link_cuts": counts["cuts"],
            "link_opens": upstream.opens,
            "sticky_sent": upstream.sticky,
            "sticky_expected": 1 + upstream.opens - opens_at_sticky,
            "churned_clients": counts["churned"],
            "churn_refused": counts["refused"],
            "reloads": counts["reloads"],
            "reloads_acknowledged": notify.acknowledged,
            "parts_stuck": stuck,
            "parts_failed": failed,
        }
        for r in readers:
            r.writer.close()
            r.task.cancel()
        return result
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        notify.close()
        d.stop()
        gen.stop()


def soak_problems(r):
    problems = []
    if r["parts_stuck"] or r["parts_failed"]:
        problems.append(f"parts that did not end: {r['parts_stuck']}; that failed: {r['parts_failed']}")
    if r["lost_queued"]:
        problems.append(f"{r['lost_queued']} queued sends never reached the upstream")
    if r["queued_out_of_order"]:
        problems.append(f"{r['queued_out_of_order']} queued sends arrived out of order")
    if r["unannounced_gaps"]:
        problems.append(f"{r['unannounced_gaps']} seq gaps no dropped line announced")
    if r["reloads_acknowledged"] != r["reloads"]:
        problems.append(f"{r['reloads']} reloads, {r['reloads_acknowledged']} acknowledged with READY=1")
    if r["fds_end"] > r["fds_start"] + 2:
        problems.append(f"fds {r['fds_start']} -> {r['fds_end']}")
    if r["churn_refused"]:
        problems.append(f"{r['churn_refused']} churned clients refused")
    if r["sticky_sent"] != r["sticky_expected"]:
        problems.append(f"the sticky text went {r['sticky_sent']} times for {r['sticky_expected']} opens")
    if not r["deliveries"] or not r["queued"] or not r["link_cuts"]:
        problems.append("the soak did not exercise what it should (no deliveries, queued sends or cuts)")
    # A leak shows as a steady climb once start-up is over; a short run only catches a gross one.
    # Under a sanitizer RSS says nothing (AddressSanitizer's quarantine).
    # 64 KiB/min over a long run: a TOMLKit parse per reload (3.8 KB, 20 a minute) read 110.
    bound = 64 if r["minutes"] >= 10 else 8192
    if r["rss_slope_kib_per_min_last_half"] > bound and not os.environ.get("WSBRIDGE_SANITIZER"):
        problems.append(f"RSS climbs {r['rss_slope_kib_per_min_last_half']} KiB/min over the last half (bound {bound})")
    return problems


class ReaderProcess:
    """wsbridge-reader: subscribers in a process of their own, counting every seq."""

    def __init__(self, bindir, path, connections):
        self.proc = subprocess.Popen([f"{bindir}/wsbridge-reader", "--socket", path, "--connections", str(connections)],
                                     stdout=subprocess.PIPE, text=True)

    def ready(self):
        """Blocks until every connection has its hello (run it off the event loop)."""
        line = self.proc.stdout.readline().strip()
        assert line == "ready", line

    def result(self):
        line = self.proc.stdout.readline()
        self.proc.wait()
        return json.loads(line)


async def reload_storm(args, workdir):
    """`--reloads N`: N reloads, 0.1 s apart, while 100 subscribers read a 10k msg/s flood."""
    gen = Generator(args.bin)
    notify = Notifications(os.path.join(workdir, "notify.sock"))
    d = Daemon(args.bin, workdir, gen.port, env={**os.environ, "NOTIFY_SOCKET": notify.path})
    rate, spacing = args.rate or 10_000, 0.1

    async def stall(readers, after):
        """Every reader stops for a second, `after` seconds in: all 100 subscribers lag at once
        and drop (announced), as a busy machine makes them do now and then; the daemon must give
        that memory back once they caught up."""
        await asyncio.sleep(after)
        for r in readers:
            r.proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(1)
        for r in readers:
            r.proc.send_signal(signal.SIGCONT)

    async def flood(reloads):
        readers = [ReaderProcess(args.bin, d.socket, 50) for _ in range(2)]
        loop = asyncio.get_running_loop()
        for r in readers:
            await loop.run_in_executor(None, r.ready)
        count = int(rate * (reloads * spacing + 2))
        gen.command(f"flood {count} 100 {rate}")
        stalled = asyncio.ensure_future(stall(readers, 0.2))
        begun = notify.reloading
        for i in range(reloads):
            await asyncio.sleep(spacing)
            os.kill(d.pid, signal.SIGHUP)
            # Two SIGHUPs pending at once are one signal (POSIX merges them): on a loaded
            # machine the next goes only once this one's reload has begun.
            await notify.begun(begun + i + 1)
        await stalled
        results = [await loop.run_in_executor(None, r.result) for r in readers]
        await loop.run_in_executor(None, gen.wait_for, "flood done", 120)
        return count, results

    try:
        gen.wait_for("connected 1")
        # A first flood without reloads (its readers stalled once too) warms the daemon up; its
        # fds and RSS are the baseline.
        await flood(0)
        fds_before, rss_before = await settled_fds(d.socket, d.pid), rss_kib(d.pid)
        count, results = await flood(args.reloads)
        await notify.settle(args.reloads)
        fds_after = await settled_fds(d.socket, d.pid)
        # The daemon gives a lag's memory back once every laggard caught up, at most once a
        # second: RSS is read until it is back within the bound (or 10 s passed; under a
        # sanitizer RSS says nothing).
        deadline = time.monotonic() + (0 if os.environ.get("WSBRIDGE_SANITIZER") else 10)
        while (rss_kib(d.pid) - rss_before) / 1024 > RSS_GROWTH_MIB and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        return {
            "reloads": args.reloads,
            "rate": rate,
            "reloads_begun": notify.reloading,
            "reloads_acknowledged": notify.acknowledged,
            "subscribers": sum(r["connections"] for r in results),
            "messages_per_subscriber": count,
            "delivered": sum(r["messages"] for r in results),
            "announced_drops": sum(r["lost"] for r in results),
            "unannounced_gaps": sum(r["gaps"] for r in results),
            "fds_before": fds_before,
            "fds_after": fds_after,
            "rss_before_kib": rss_before,
            "rss_after_kib": rss_kib(d.pid),
            "alive": d.proc.poll() is None,
        }
    finally:
        notify.close()
        d.stop()
        gen.stop()


def storm_problems(r):
    problems = []
    if r["reloads_acknowledged"] != r["reloads"] or r["reloads_begun"] != r["reloads"]:
        problems.append(f"{r['reloads']} SIGHUPs: {r['reloads_begun']} reloads begun, {r['reloads_acknowledged']} acknowledged")
    if r["unannounced_gaps"]:
        problems.append(f"{r['unannounced_gaps']} unannounced gaps")
    if r["fds_after"] != r["fds_before"]:
        problems.append(f"fds {r['fds_before']} -> {r['fds_after']}")
    growth = (r["rss_after_kib"] - r["rss_before_kib"]) / 1024
    if growth > RSS_GROWTH_MIB and not os.environ.get("WSBRIDGE_SANITIZER"):
        problems.append(f"RSS grew {growth:.1f} MiB")
    if not r["alive"]:
        problems.append("wsbridged exited")
    return problems


def chart(result, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("soak: --png needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return
    samples = result["samples"]
    minutes = [s["minute"] for s in samples]
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    axes[0].plot(minutes, [s["rss_kib"] / 1024 for s in samples], marker=".")
    axes[0].set_ylabel("RSS MiB")
    axes[0].set_ylim(bottom=0)
    axes[1].plot(minutes, [s["fds"] for s in samples], marker=".", label="fds")
    axes[1].plot(minutes, [s["threads"] for s in samples], marker=".", label="threads")
    axes[1].set_ylim(bottom=0)
    axes[1].legend()
    axes[2].plot(minutes, [s["cpu_percent"] for s in samples], marker=".")
    axes[2].set_ylabel("CPU %")
    axes[2].set_xlabel("minute")
    axes[2].set_ylim(bottom=0)
    fig.suptitle(f"wsbridged soak, {result['minutes']} min: {result['link_cuts']} link cuts, "
                 f"{result['reloads']} reloads, {result['churned_clients']} churned clients")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


async def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("minutes", nargs="?", type=float, default=30)
    parser.add_argument("--bin", default=os.path.join(here, "..", ".build", "release"))
    parser.add_argument("--rate", type=int, help="upstream messages per second (soak: 500; reloads: 10000)")
    parser.add_argument("--reloads", type=int, help="run the reload storm with this many reloads instead")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--png", help="draw RSS, fds, threads and CPU over time here (needs matplotlib)")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="wsbridge-soak-")
    if args.reloads:
        result = await reload_storm(args, workdir)
        problems = storm_problems(result)
        print(json.dumps(result, indent=1))
    else:
        result = await soak(args, workdir)
        problems = soak_problems(result)
        print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
        if args.png:
            chart(result, args.png)
    return finish("soak", {"result": result}, problems, args.json, workdir, "nothing lost, nothing grew")


if __name__ == "__main__":
    run(main)
