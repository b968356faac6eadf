#!/usr/bin/env python3
"""The Autobahn TestSuite's server cases (its fuzzing client) against wsbridged's WebSocket face.

The daemon's upstream is wsbridge-testserver, which echoes every message back, so what a case
sends through the face comes back to it as the upstream's message: the face's server side (the
upgrade, frames, fragments, UTF-8, pings, the close handshake) and the way through the daemon
are under test together. One case at a time, so the echo reaches only the case's connection.

Usage: face.py --bin DIR --python27 PY --cases 1-7,9,10 [--json summary.json]
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from run import arguments, case_ids, free_port, start_daemon, summarize, unblock_signals

AGENT = "wsbridged-face"


def start_upstream(bindir, workdir):
    log = open(os.path.join(workdir, "testserver.log"), "w")
    server = subprocess.Popen([f"{bindir}/wsbridge-testserver", "--port", "0", "--max-frame", str(64 << 20)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                              preexec_fn=unblock_signals)
    line = server.stdout.readline().split()
    if line[:1] != ["listening"]:
        raise RuntimeError("wsbridge-testserver did not start")
    # Its later events are not read: they go nowhere rather than fill a pipe.
    server.stdout.close()
    return server, int(line[1])


def start_face(bindir, workdir, upstream_port, face_port):
    daemon = start_daemon(bindir, workdir, f'url = "ws://127.0.0.1:{upstream_port}/"', f'socket = "{workdir}/wsbridged.sock"',
                          more=f'[local.websocket]\nlisten = "127.0.0.1:{face_port}"\n'
                               f'max_frame_size = 67108864\nmax_message_size = 67108864\n')
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", face_port), timeout=1).close()
            return daemon
        except OSError:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"wsbridged did not start: see {workdir}/wsbridged.log")
            time.sleep(0.02)


def main():
    args = arguments()

    workdir = tempfile.mkdtemp(prefix="wsbridge-autobahn-face-")
    outdir = os.path.abspath(os.path.join(args.reports, "servers"))
    shutil.rmtree(outdir, ignore_errors=True)
    face_port = free_port()
    upstream, upstream_port = start_upstream(args.bin, workdir)
    daemon = None
    try:
        daemon = start_face(args.bin, workdir, upstream_port, face_port)
        spec = os.path.join(workdir, "fuzzingclient.json")
        with open(spec, "w") as f:
            json.dump({"outdir": outdir, "servers": [{"agent": AGENT, "url": f"ws://127.0.0.1:{face_port}/"}],
                       "cases": case_ids(args.cases), "exclude-cases": [], "exclude-agent-cases": {}}, f)
        start = time.monotonic()
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(workdir, "fuzzingclient.log"), "w") as log:
            subprocess.run([args.python27, os.path.join(here, "fuzzingclient.py"), spec], stdout=log, stderr=subprocess.STDOUT,
                           cwd=workdir, preexec_fn=unblock_signals, check=True, timeout=1800)
        elapsed = time.monotonic() - start
        if daemon.poll() is not None:
            raise RuntimeError(f"wsbridged exited during the cases: see {workdir}/wsbridged.log")
    finally:
        if daemon:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait()
        upstream.kill()
        upstream.wait()
    failed = summarize(outdir, AGENT, "autobahn (server cases, the WebSocket face)", args.cases, elapsed, args.json,
                       shown=("OK", "INFORMATIONAL"))
    shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
