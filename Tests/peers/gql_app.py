"""A GraphQL app written with gql (PyPI), unmodified: graphql-transport-ws over `websockets`,
for wsbridge's WebSocket face tests. Only the URL points at the daemon.

Usage: gql_app.py URL NAME. It subscribes to `ticks(name: NAME)` (gql numbers its operations
from 1 on each connection, so every app uses the same ids), runs the query `add(a: 2, b: 3)`
once the first event came, and prints: `open`, `event NAME N` per event, `answer SUM`,
`error TEXT` for anything the library raised (then exits 1).
"""

import asyncio
import sys

from gql import Client, gql
from gql.transport.websockets import WebsocketsTransport
from app_run import run


def out(line):
    print(line, flush=True)


async def main(url, name):
    transport = WebsocketsTransport(url=url, subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL], keep_alive_timeout=None)
    async with Client(transport=transport, fetch_schema_from_transport=False) as session:
        out("open")
        subscription = gql("subscription ($name: String!) { ticks(name: $name) { name n } }")
        asked = False
        async for result in session.subscribe(subscription, variable_values={"name": name}):
            tick = result["ticks"]
            out(f"event {tick['name']} {tick['n']}")
            if not asked:
                asked = True
                answer = await session.execute(gql("{ add(a: 2, b: 3) }"))
                out(f"answer {answer['add']}")


if __name__ == "__main__":
    run(main(sys.argv[1], sys.argv[2]))
