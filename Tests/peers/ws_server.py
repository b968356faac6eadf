"""A third-party upstream for wsbridge's tests: Python `websockets` (asyncio server).

Speaks the same control protocol as wsbridge-testserver: commands on stdin, one per line
(send TEXT | close CODE [REASON] | drop | pings off | pings on | stall on | stall off | refuse on | refuse off |
oversize BYTES | ticker RATE | ticker off | flood COUNT SIZE | quit); events on stdout (listening PORT, upgrade ...,
connected N, message TEXT, closed CODE REASON, disconnected N).
Listens on loopback only unless --host says otherwise.
"""

import argparse
import asyncio
import sys
from http import HTTPStatus

from websockets.asyncio.server import serve, broadcast
from websockets.exceptions import ConnectionClosed

clients = set()
state = {"refuse": False, "ticker": None}


def out(line):
    print(line, flush=True)


def process_request(connection, request):
    auth = request.headers.get("Authorization", "-")
    protocols = request.headers.get("Sec-WebSocket-Protocol", "")
    out(f"upgrade path={request.path} authorization={auth} protocols={protocols} ua={request.headers.get('User-Agent', '-')}")
    if state["refuse"]:
        out("refused")
        return connection.respond(HTTPStatus.FORBIDDEN, "refused\n")
    return None


async def handler(ws):
    clients.add(ws)
    out(f"connected {len(clients)}")
    try:
        async for message in ws:
            if isinstance(message, str):
                out(f"message {message}")
            else:
                out(f"binary {len(message)}")
            await ws.send(message)
    except ConnectionClosed:
        pass
    finally:
        rcvd = ws.protocol.close_rcvd
        if rcvd is not None:
            out(f"closed {rcvd.code} {rcvd.reason}")
        clients.discard(ws)
        out(f"disconnected {len(clients)}")


async def ticker(rate):
    n = 0
    while True:
        await asyncio.sleep(1 / rate)
        n += 1
        broadcast(clients, f'{{"tick":{n}}}')


async def commands():
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        raw = await reader.readline()
        if not raw:
            return
        words = raw.decode().rstrip("\n").split(" ", 2)
        cmd, args = words[0], words[1:]
        if cmd == "quit":
            return
        elif cmd == "send":
            broadcast(clients, " ".join(args))
        elif cmd == "close":
            code = int(args[0]) if args else 1000
            reason = args[1] if len(args) > 1 else ""
            for ws in list(clients):
                asyncio.create_task(ws.close(code, reason))
        elif cmd == "drop":
            for ws in list(clients):
                ws.transport.abort()
        elif cmd == "pings":
            # websockets answers pings itself; stop reading to withhold pongs (a hung peer).
            for ws in list(clients):
                if args and args[0] == "off":
                    ws.transport.pause_reading()
                else:
                    ws.transport.resume_reading()
        elif cmd == "stall":
            # `stall on`: stop reading (a slow upstream); `stall off`: read again.
            for ws in list(clients):
                if args and args[0] == "off":
                    ws.transport.resume_reading()
                else:
                    ws.transport.pause_reading()
            out(f"stall {'off' if args and args[0] == 'off' else 'on'}")
        elif cmd == "refuse":
            state["refuse"] = not (args and args[0] == "off")
        elif cmd == "oversize":
            n = int(args[0]) if args else 17 << 20
            for ws in list(clients):
                await ws.send(b"a" * n)
        elif cmd == "ticker":
            if state["ticker"]:
                state["ticker"].cancel()
                state["ticker"] = None
            if args and args[0] != "off":
                state["ticker"] = asyncio.create_task(ticker(float(args[0])))
        elif cmd == "count":
            out(f"clients {len(clients)}")
        elif cmd == "flood":
            # `flood COUNT SIZE [RATE]`: COUNT messages of SIZE bytes as fast as the clients take
            # them (compressed when permessage-deflate was negotiated), then `{"end":"__end__"}`;
            # the benchmark's generator when deflate is on (wsbridge-bench cost).
            numbers = [int(x) for x in " ".join(args).split()]
            count, size = numbers[0], numbers[1] if len(numbers) > 1 else 100
            for i in range(count):
                head = f'{{"i":{i},"p":"'
                text = head + "x" * max(0, size - len(head) - 2) + '"}'
                for ws in list(clients):
                    await ws.send(text)
            for ws in list(clients):
                await ws.send('{"end":"__end__"}')
            out(f"flood done {count}")
        else:
            out(f"error unknown command '{cmd}'")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--subprotocol", action="append", default=[])
    opts = parser.parse_args()
    async with serve(
        handler,
        opts.host,
        opts.port,
        process_request=process_request,
        subprotocols=opts.subprotocol or None,
        max_size=1 << 24,
        ping_interval=None,
    ) as server:
        port = server.sockets[0].getsockname()[1]
        out(f"listening {port}")
        await commands()


if __name__ == "__main__":
    asyncio.run(main())
