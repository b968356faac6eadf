"""A JSON-RPC 2.0 server over WebSocket with Ethereum-style subscriptions, for wsbridge's tests.

Methods: add(a, b) -> a + b; slow(seconds) -> answers after that long; eth_subscribe(["ticks"])
-> a subscription id the server assigns (new on every connection), then eth_subscription
notifications {"subscription": ID, "result": {"n": N}} every --interval seconds, N counting per
subscription from 1 (eth_subscribe(["newHeads"]): the result a block header whose "number" is N
in hex, as web3 reads it); eth_unsubscribe([ID]) -> true. For web3.py: eth_chainId -> 0x539,
eth_getBalance([ADDRESS, ...]) -> the address's last 8 hex digits as the balance (a caller can
tell the answers apart). A call whose id is already in flight on the
same connection is answered with an error (-32600), as a strict server would.

Events on stdout, one per line: listening PORT, connected, disconnected, call METHOD ID,
subscribe ID, unsubscribe ID, subscriptions N (the live ones on this connection after each
change). Listens on loopback only.
"""

import argparse
import asyncio
import json
import secrets

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed


def out(line):
    print(line, flush=True)


def head(n):
    return {"number": hex(n), "hash": "0x%064x" % n, "parentHash": "0x%064x" % (n - 1), "timestamp": hex(1700000000 + n)}


async def ticks(ws, sub_id, interval, kind):
    n = 0
    try:
        while True:
            await asyncio.sleep(interval)
            n += 1
            result = head(n) if kind == "newHeads" else {"n": n}
            await ws.send(json.dumps({"jsonrpc": "2.0", "method": "eth_subscription", "params": {"subscription": sub_id, "result": result}}))
    except (ConnectionClosed, asyncio.CancelledError):
        pass


async def handler(ws, interval):
    out("connected")
    subscriptions = {}
    in_flight = set()

    async def answer(message):
        call_id = message.get("id")
        method = message.get("method")
        params = message.get("params") or []
        out(f"call {method} {json.dumps(call_id)}")
        key = json.dumps(call_id)
        if key in in_flight:
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": call_id, "error": {"code": -32600, "message": "id already in flight"}}))
            return
        in_flight.add(key)
        try:
            if method == "add":
                result = params[0] + params[1]
            elif method == "slow":
                await asyncio.sleep(params[0])
                result = "slow done"
            elif method == "eth_subscribe":
                sub_id = "0x" + secrets.token_hex(8)
                subscriptions[sub_id] = asyncio.create_task(ticks(ws, sub_id, interval, params[0] if params else "ticks"))
                out(f"subscribe {sub_id}")
                out(f"subscriptions {len(subscriptions)}")
                result = sub_id
            elif method == "eth_chainId":
                result = "0x539"
            elif method == "eth_getBalance":
                result = hex(int(params[0][-8:], 16))
            elif method == "eth_unsubscribe":
                task = subscriptions.pop(params[0], None)
                if task:
                    task.cancel()
                out(f"unsubscribe {params[0]}")
                out(f"subscriptions {len(subscriptions)}")
                result = task is not None
            else:
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": call_id, "error": {"code": -32601, "message": "no such method"}}))
                return
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": call_id, "result": result}))
        finally:
            in_flight.discard(key)

    tasks = set()
    try:
        async for raw in ws:
            message = json.loads(raw)
            if "id" in message:
                task = asyncio.create_task(answer(message))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
    except ConnectionClosed:
        pass
    finally:
        for task in list(subscriptions.values()) + list(tasks):
            task.cancel()
        out("disconnected")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--interval", type=float, default=0.05)
    args = parser.parse_args()
    async with serve(lambda ws: handler(ws, args.interval), "127.0.0.1", args.port) as server:
        port = server.sockets[0].getsockname()[1]
        out(f"listening {port}")
        await asyncio.Future()


asyncio.run(main())
