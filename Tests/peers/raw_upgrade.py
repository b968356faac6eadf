#!/usr/bin/env python3
"""A hostile upstream for one case: it accepts the WebSocket upgrade (a valid
Sec-WebSocket-Accept) with an extension parameter the client never offered, and sends a text
frame in the same write as the 101. Prints `listening PORT`, then `upgrade N` per connection.

Usage: raw_upgrade.py
"""

import base64
import hashlib
import socket
import sys

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def main():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    print(f"listening {server.getsockname()[1]}", flush=True)
    count = 0
    while True:
        conn, _ = server.accept()
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = conn.recv(4096)
            if not chunk:
                break
            request += chunk
        key = next((line.split(b":", 1)[1].strip() for line in request.split(b"\r\n")
                    if line.lower().startswith(b"sec-websocket-key:")), b"")
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Accept: " + accept + b"\r\n"
                     b"Sec-WebSocket-Extensions: permessage-deflate; server_no_ceontxt_takeover\r\n\r\n"
                     b"\x81\x05hello")
        count += 1
        print(f"upgrade {count}", flush=True)
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
