#!/usr/bin/env python3
"""The Autobahn TestSuite's client cases against wsbridged itself.

For every case the daemon's upstream is the case's URL and a subscriber on its Unix socket echoes
every message back through `send`, so the whole product is under test: the WebSocket client,
the local plane, and the way back. The daemon starts with its link closed
(upstream.connect_on_start = false) so the echo client is attached before the case begins,
and is stopped once the case has closed the link.

Usage: run.py --bin DIR --python27 PY --cases 1-7,9,10 [--json summary.json]
"""

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import websockets

HERE = os.path.dirname(os.path.abspath(__file__))
AGENT = "wsbridged"


def unblock_signals():
    """A parent may start us with signals blocked (a test runner does); children inherit that."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def case_ids(spec):
    """`1-7,9,10` -> Autobahn case patterns ["1.*", ..., "7.*", "9.*", "10.*"]; `all` -> ["*"]."""
    if spec == "all":
        return ["*"]
    patterns = []
    for part in spec.split(","):
        if "-" in part:
            a, b = part.split("-")
            patterns += [f"{n}.*" for n in range(int(a), int(b) + 1)]
        else:
            patterns.append(f"{part}.*" if "." not in part else part)
    return patterns


def arguments():
    """The command line both runners take (see their usage)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--python27", required=True)
    parser.add_argument("--cases", default="1-7,9,10")
    parser.add_argument("--reports", default=".build/autobahn-reports")
    parser.add_argument("--json")
    return parser.parse_args()


def start_daemon(bindir, workdir, upstream, local, backoff="", more=""):
    """wsbridged with the suite's sizes (64 MiB messages, 1 GiB queues), quiet, its log in
    `workdir`: `upstream` and `local` are more keys of those sections, `more` more sections."""
    config = os.path.join(workdir, "wsbridged.toml")
    with open(config, "w") as f:
        f.write(
            f'[upstream]\n{upstream}\nmax_message_size = 67108864\n{backoff}'
            f'[heartbeat]\ninterval = "60s"\n[reachability]\nenabled = false\n'
            f'[local]\n{local}\nsubscriber_queue_bytes = 1073741824\n{more}'
            f'[queue]\nmax_bytes = 1073741824\n[log]\nlevel = "warning"\n')
    with open(os.path.join(workdir, "wsbridged.log"), "a") as log:
        return subprocess.Popen([f"{bindir}/wsbridged", "--config", config], stdout=log, stderr=log, preexec_fn=unblock_signals)


def summarize(outdir, agent, title, cases, elapsed, json_path, shown):
    """Prints the counts by behaviour and each case not in `shown`; writes the summary to
    `json_path` (if given). Returns whether a case FAILED."""
    with open(os.path.join(outdir, "index.json")) as f:
        results = json.load(f)[agent]
    counts = {}
    for r in results.values():
        counts[r["behavior"]] = counts.get(r["behavior"], 0) + 1

    def key(c):
        return [int(x) for x in c.split(".")]
    print(f"{title}: {len(results)} cases ({cases}) in {elapsed:.0f} s: "
          + ", ".join(f"{counts[b]} {b}" for b in sorted(counts)))
    for case in sorted(results, key=key):
        r = results[case]
        if r["behavior"] not in shown:
            print(f"  {case}: {r['behavior']} (close: {r.get('behaviorClose')})")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"cases": cases, "seconds": round(elapsed), "counts": counts,
                       "results": {c: r["behavior"] for c, r in results.items()}}, f, indent=1)
    return bool(counts.get("FAILED"))


async def text_from(url):
    async with websockets.connect(url, max_size=None) as ws:
        return await ws.recv()


async def run_case(bindir, workdir, url, timeout):
    sock = os.path.join(workdir, "c.sock")
    if os.path.exists(sock):
        os.unlink(sock)
    daemon = start_daemon(bindir, workdir, f'url = "{url}"\nconnect_on_start = false',
                          f'socket = "{sock}"\nmax_line = 134217728', backoff='[backoff]\nbase = "60s"\ncap = "60s"\n')
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(sock):
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise RuntimeError("wsbridged did not start")
            await asyncio.sleep(0.005)
        # The path appears at bind(2), a moment before listen(2).
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(sock, limit=1 << 28)
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.005)
        writer.write(b'{"op":"connect"}\n')
        was_open = False

        async def echo():
            nonlocal was_open
            while True:
                line = await reader.readline()
                if not line:
                    return
                msg = json.loads(line)
                kind = msg.get("type")
                if kind == "message":
                    field = "text" if msg["kind"] == "text" else "binary"
                    writer.write(json.dumps({"op": "send", field: msg["data"]}).encode() + b"\n")
                elif kind == "state":
                    if msg["state"] == "open":
                        was_open = True
                    elif was_open or msg["state"] in ("backingOff", "idle"):
                        return  # the case closed the link (or the link never opened)

        await asyncio.wait_for(echo(), timeout)
        writer.close()
    except asyncio.TimeoutError:
        pass
    finally:
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()


async def main():
    args = arguments()

    port = free_port()
    workdir = tempfile.mkdtemp(prefix="wsbridge-autobahn-")
    outdir = os.path.abspath(os.path.join(args.reports, "clients"))
    shutil.rmtree(outdir, ignore_errors=True)
    spec = os.path.join(workdir, "fuzzingserver.json")
    with open(spec, "w") as f:
        json.dump({"url": f"ws://127.0.0.1:{port}", "outdir": outdir, "cases": case_ids(args.cases),
                   "exclude-cases": [], "exclude-agent-cases": {}}, f)
    # Its output goes to a file: a pipe nobody reads would fill up and stop the server.
    log_path = os.path.join(workdir, "fuzzingserver.log")
    server = subprocess.Popen([args.python27, os.path.join(HERE, "fuzzingserver.py"), spec],
                              stdout=open(log_path, "w"), stderr=subprocess.STDOUT, cwd=workdir,
                              preexec_fn=unblock_signals)
    try:
        deadline = time.monotonic() + 60
        while "\nlistening" not in open(log_path).read():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fuzzing server did not start: see {log_path}")
            await asyncio.sleep(0.05)
        base = f"ws://127.0.0.1:{port}"
        count = int(await text_from(f"{base}/getCaseCount"))
        start = time.monotonic()
        for i in range(1, count + 1):
            await run_case(args.bin, workdir, f"{base}/runCase?case={i}&agent={AGENT}", timeout=120)
            if i % 50 == 0:
                print(f"autobahn: {i}/{count} cases, {time.monotonic() - start:.0f} s", flush=True)
        async with websockets.connect(f"{base}/updateReports?agent={AGENT}") as ws:
            try:
                await ws.recv()
            except websockets.ConnectionClosed:
                pass
        elapsed = time.monotonic() - start
    finally:
        server.kill()
        server.wait()
    failed = summarize(outdir, AGENT, "autobahn", args.cases, elapsed, args.json, shown=("OK",))
    shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
