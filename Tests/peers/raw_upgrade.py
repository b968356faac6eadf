#!/usr/bin/env python3
"""A hostile upstream: it accepts the WebSocket upgrade (a valid Sec-WebSocket-Accept) with
a flaw, and sends a text frame in the same write as the 101. Prints `listening PORT`, then
`upgrade N` per connection.

Usage: raw_upgrade.py [bad-extension | http-1.0]
  bad-extension (the default): an extension parameter the client never offered
  http-1.0: the status line is HTTP/1.0 101 (RFC 6455 4.1 asks for HTTP/1.1)
"""

import base64
import hashlib
import socket
import sys

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else "bad-extension"
    if case == "bad-extension":
        version = b"HTTP/1.1"
        extension = b"Sec-WebSocket-Extensions: permessage-deflate; server_no_ceontxt_takeover\r\n"
    elif case == "http-1.0":
        version = b"HTTP/1.0"
        extension = b""
    else:
        sys.exit(f"raw_upgrade.py: unknown case {case!r}; use bad-extension or http-1.0")
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
        conn.sendall(version + b" 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Accept: " + accept + b"\r\n" + extension + b"\r\n"
                     b"\x81\x05hello")
        count += 1
        print(f"upgrade {count}", flush=True)
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
