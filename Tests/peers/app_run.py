"""How the client-library apps of Tests/peers run: their coroutine to its end, and anything their
library raised printed as `error TYPE: TEXT` (the tests read it: an app must see none), then
exit 1."""

import asyncio
import sys


def run(main):
    try:
        asyncio.run(main)
    except Exception as error:
        print(f"error {type(error).__name__}: {error}", flush=True)
        sys.exit(1)
