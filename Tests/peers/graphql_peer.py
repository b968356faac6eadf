"""A GraphQL server over WebSocket (graphql-transport-ws), for wsbridge's tests: strawberry-graphql
served by uvicorn on loopback, path /graphql.

Schema: query `add(a, b)`; subscription `ticks(name)` yields {"name", "n"} every --interval
seconds, n counting from 1 per subscription. Events on stdout: listening PORT, subscribe NAME,
unsubscribe NAME (a subscription's generator ended), subscriptions N (live ones, all connections).
strawberry closes a connection with 4409 when a subscription id is used twice on it.
"""

import argparse
import asyncio
import socket
from typing import AsyncGenerator

import strawberry
import uvicorn
from strawberry.asgi import GraphQL
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL

live = {"n": 0}
interval = {"s": 0.05}


def out(line):
    print(line, flush=True)


@strawberry.type
class Tick:
    name: str
    n: int


@strawberry.type
class Query:
    @strawberry.field
    def add(self, a: int, b: int) -> int:
        return a + b


@strawberry.type
class Subscription:
    @strawberry.subscription
    async def ticks(self, name: str) -> AsyncGenerator[Tick, None]:
        live["n"] += 1
        out(f"subscribe {name}")
        out(f"subscriptions {live['n']}")
        n = 0
        try:
            while True:
                await asyncio.sleep(interval["s"])
                n += 1
                yield Tick(name=name, n=n)
        finally:
            live["n"] -= 1
            out(f"unsubscribe {name}")
            out(f"subscriptions {live['n']}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--interval", type=float, default=0.05)
    args = parser.parse_args()
    interval["s"] = args.interval
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    out(f"listening {sock.getsockname()[1]}")
    app = GraphQL(strawberry.Schema(query=Query, subscription=Subscription), subscription_protocols=[GRAPHQL_TRANSPORT_WS_PROTOCOL])
    config = uvicorn.Config(app, log_level="warning", ws="websockets-sansio")
    uvicorn.Server(config).run(sockets=[sock])


main()
