#!/usr/bin/env python3
"""An app of wsbridged's WebSocket face, written with PyPI's `websockets` as any app would be.

Usage: ws_app.py URL [--unix PATH] [--origin ORIGIN] [--token TOKEN] [--rcvbuf BYTES] [--query Q]

--query: the request's query (`stream=ID&since=SEQ`: a resume). --cafile: the CA a wss:// face's
certificate is checked against. --subprotocol: one to offer (the one agreed is printed,
`subprotocol NAME`). --quote: each text message printed as a JSON string (a protocol's frames
hold newlines). `sendjson "TEXT"` on stdin sends TEXT given as a JSON string.

--rcvbuf: the socket's receive buffer (SO_RCVBUF, set before it connects), for an app whose
kernel holds little of what it does not read.

Prints one line per event: `open`, `position STREAM SEQ` (the face's Wsbridge-Stream and
Wsbridge-Seq headers: its first frame is message SEQ + 1), `message TEXT`, `binary HEX`, `closed CODE REASON`,
`refused STATUS BODY` (the upgrade was answered with an HTTP error). Reads commands on stdin, one
per line: `send TEXT`, `binary HEX`, `stop` (stop reading: the library's queue fills and it reads
the socket no more), `resume` (read again), `close`. Its stdin's end closes it.
"""

import argparse
import asyncio
import json
import socket
import ssl
import sys
from urllib.parse import urlparse

from websockets.asyncio.client import connect, unix_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus


QUOTE = False


def say(line):
    print(line, flush=True)


async def commands(ws, reading):
    reading = [reading]
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            await ws.close()
            return
        word, _, rest = line.rstrip("\n").partition(" ")
        if word == "send":
            await ws.send(rest)
        elif word == "sendjson":
            await ws.send(json.loads(rest))
        elif word == "binary":
            await ws.send(bytes.fromhex(rest))
        elif word == "stop":
            # No recv from now on: the library's queue (max_queue) fills and it stops reading
            # the socket.
            reading[0].cancel()
            say("stopped")
        elif word == "resume":
            reading[0] = asyncio.ensure_future(read(ws))
        elif word == "close":
            await ws.close()
            return


async def read(ws):
    try:
        async for message in ws:
            if isinstance(message, str):
                say(f"message {json.dumps(message) if QUOTE else message}")
            else:
                say(f"binary {message.hex()}")
    except ConnectionClosed:
        pass


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--unix")
    parser.add_argument("--origin")
    parser.add_argument("--token")
    parser.add_argument("--rcvbuf", type=int)
    parser.add_argument("--query")
    parser.add_argument("--cafile")
    parser.add_argument("--subprotocol")
    parser.add_argument("--quote", action="store_true")
    args = parser.parse_args()
    global QUOTE
    QUOTE = args.quote
    if args.query:
        args.url += "?" + args.query
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else None
    options = dict(additional_headers=headers, origin=args.origin, max_size=None, max_queue=16, ping_interval=None)
    if args.cafile:
        options["ssl"] = ssl.create_default_context(cafile=args.cafile)
    if args.subprotocol:
        options["subprotocols"] = [args.subprotocol]
    if args.rcvbuf and not args.unix:
        url = urlparse(args.url)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
        sock.connect((url.hostname, url.port))
        options["sock"] = sock
    try:
        if args.unix:
            ws = await unix_connect(args.unix, args.url, **options)
        else:
            ws = await connect(args.url, **options)
    except InvalidStatus as e:
        body = (e.response.body or b"").decode(errors="replace").strip()
        say(f"refused {e.response.status_code} {body}")
        return
    say("open")
    if ws.subprotocol:
        say(f"subprotocol {ws.subprotocol}")
    # Where its frames start on a raw face (a resume goes on from the last one it counted).
    if "Wsbridge-Stream" in ws.response.headers:
        say(f"position {ws.response.headers['Wsbridge-Stream']} {ws.response.headers['Wsbridge-Seq']}")
    reading = asyncio.ensure_future(read(ws))
    control = asyncio.ensure_future(commands(ws, reading))
    await ws.wait_closed()
    say(f"closed {ws.close_code} {ws.close_reason}")
    control.cancel()


asyncio.run(main())
