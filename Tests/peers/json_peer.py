"""A Home-Assistant-style JSON server over WebSocket, for wsbridge's tests of upstream.protocol = "json".

Every client message carries an "id" that must be higher than the last one on the connection
(as Home Assistant demands): a lower or equal one is answered with an error result and the
connection closed with 4002. Messages:
  {"id":N,"type":"subscribe_events","event_type":T} -> {"id":N,"type":"result","success":true},
      then {"id":N,"type":"event","event":{"event_type":T,"n":K}} every --interval seconds, K
      counting per subscription from 1 (the server numbers them: a consumer can count gaps);
      event_type "forbidden" is not allowed: the connection is closed with 4403 (a well-formed
      message the server answers by closing);
  {"id":N,"type":"unsubscribe_events","subscription":M} -> result; the subscription ends;
  {"id":N,"type":"echo","value":V} -> {"id":N,"type":"result","success":true,"result":V};
  {"id":N,"type":"slow","seconds":S} -> the echo's answer after S seconds;
  {"id":N,"type":"stats"} -> result {"pongs":P,"connections":C,"subscriptions":S}.
The server pings {"ping":K} every --ping-interval seconds and closes the connection with 4000
when a ping is not answered {"pong":K} within --ping-deadline seconds. Every second it sends a
broadcast {"id":"BTC","price":P}, whose "id" is data, not an answer.

Events on stdout, one per line: listening PORT, connected, disconnected, call TYPE ID, subscribe TYPE,
unsubscribe ID, pong K, closed CODE REASON. Listens on loopback only.
"""

import argparse
import asyncio
import json

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

STATS = {"pongs": 0, "connections": 0}


def out(line):
    print(line, flush=True)


async def events(ws, sub_id, event_type, interval):
    n = 0
    try:
        while True:
            await asyncio.sleep(interval)
            n += 1
            await ws.send(json.dumps({"id": sub_id, "type": "event", "event": {"event_type": event_type, "n": n}}))
    except (ConnectionClosed, asyncio.CancelledError):
        pass


async def handler(ws, args):
    STATS["connections"] += 1
    out("connected")
    subscriptions = {}
    last_id = 0
    pongs = {}
    tasks = set()

    async def pinger():
        k = 0
        try:
            while True:
                await asyncio.sleep(args.ping_interval)
                k += 1
                pongs[k] = asyncio.get_running_loop().create_future()
                await ws.send(json.dumps({"ping": k}))
                try:
                    await asyncio.wait_for(pongs[k], args.ping_deadline)
                except asyncio.TimeoutError:
                    out(f"closed 4000 no pong to ping {k}")
                    await ws.close(4000, f"no pong to ping {k}")
                    return
        except (ConnectionClosed, asyncio.CancelledError):
            pass

    async def broadcaster():
        price = 100
        try:
            while True:
                await asyncio.sleep(1)
                price += 1
                await ws.send(json.dumps({"id": "BTC", "price": price}))
        except (ConnectionClosed, asyncio.CancelledError):
            pass

    async def answer(message):
        msg_id = message["id"]
        kind = message.get("type")
        out(f"call {kind} {msg_id}")
        if kind == "subscribe_events" and message.get("event_type") == "forbidden":
            out("closed 4403 forbidden event type")
            await ws.close(4403, "forbidden event type")
        elif kind == "subscribe_events":
            event_type = message.get("event_type", "any")
            subscriptions[msg_id] = asyncio.create_task(events(ws, msg_id, event_type, args.interval))
            out(f"subscribe {event_type}")
            await ws.send(json.dumps({"id": msg_id, "type": "result", "success": True, "result": None}))
        elif kind == "unsubscribe_events":
            task = subscriptions.pop(message.get("subscription"), None)
            if task:
                task.cancel()
            out(f"unsubscribe {message.get('subscription')}")
            await ws.send(json.dumps({"id": msg_id, "type": "result", "success": task is not None}))
        elif kind == "echo":
            await ws.send(json.dumps({"id": msg_id, "type": "result", "success": True, "result": message.get("value")}))
        elif kind == "slow":
            await asyncio.sleep(message.get("seconds", 1))
            await ws.send(json.dumps({"id": msg_id, "type": "result", "success": True, "result": "slow done"}))
        elif kind == "stats":
            result = dict(STATS, subscriptions=len(subscriptions))
            await ws.send(json.dumps({"id": msg_id, "type": "result", "success": True, "result": result}))
        else:
            await ws.send(json.dumps({"id": msg_id, "type": "result", "success": False, "error": {"code": "unknown_command"}}))

    tasks.add(asyncio.create_task(pinger()))
    tasks.add(asyncio.create_task(broadcaster()))
    try:
        async for text in ws:
            message = json.loads(text)
            if "pong" in message:
                k = message["pong"]
                if k in pongs and not pongs[k].done():
                    pongs[k].set_result(True)
                    STATS["pongs"] += 1
                    out(f"pong {k}")
                continue
            msg_id = message.get("id")
            if not isinstance(msg_id, int) or msg_id <= last_id:
                await ws.send(json.dumps({"id": msg_id, "type": "result", "success": False, "error": {"code": "id_reuse", "message": "Identifier values have to increase."}}))
                out(f"closed 4002 id {msg_id} after {last_id}")
                await ws.close(4002, "Identifier values have to increase")
                return
            last_id = msg_id
            tasks.add(asyncio.create_task(answer(message)))
    except ConnectionClosed:
        pass
    finally:
        for task in list(tasks) + list(subscriptions.values()):
            task.cancel()
        out("disconnected")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--ping-interval", type=float, default=0.2)
    parser.add_argument("--ping-deadline", type=float, default=0.5)
    args = parser.parse_args()
    async with serve(lambda ws: handler(ws, args), "127.0.0.1", args.port) as server:
        port = server.sockets[0].getsockname()[1]
        out(f"listening {port}")
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main())
