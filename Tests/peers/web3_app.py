"""An Ethereum app written with web3.py (PyPI), unmodified: AsyncWeb3 over its WebSocketProvider,
for wsbridge's WebSocket face tests. Only the URL points at the daemon.

Usage: web3_app.py URL. It subscribes to newHeads (web3 numbers its requests from 0 on each
connection, so every app uses the same ids), asks eth_chainId, sends a batch of 10
eth_getBalance calls for addresses 1 to 10 (one JSON-RPC batch, answered as one array), then
prints each head. Prints: `subscribed ID`, `chain N`, `batch B1 B2 …` (the balances in the
order the answers came), `head ID N` per event, `error TEXT` for anything the library raised
(then exits 1).
"""

import asyncio
import sys

from web3 import AsyncWeb3, WebSocketProvider
from app_run import run


def out(line):
    print(line, flush=True)


async def main(url):
    async with AsyncWeb3(WebSocketProvider(url)) as w3:
        subscription = await w3.eth.subscribe("newHeads")
        out(f"subscribed {subscription}")
        out(f"chain {await w3.eth.chain_id}")
        async with w3.batch_requests() as batch:
            for i in range(1, 11):
                batch.add(w3.eth.get_balance(AsyncWeb3.to_checksum_address("0x%040x" % i)))
            balances = await batch.async_execute()
        out("batch " + " ".join(str(b) for b in balances))
        async for message in w3.socket.process_subscriptions():
            out(f"head {message['subscription']} {int(message['result']['number'])}")


if __name__ == "__main__":
    run(main(sys.argv[1]))
