"""A NATS publisher on the server's client port (plain TCP, no client library): `--subjects`
subjects s.0 … s.N-1, each published `--count` times at `--rate` a second with payloads 0, 1, …
in order, then one message on `done`; it answers the server's PINGs meanwhile. Prints
`connected` once the server answered its CONNECT, and `published N` at the end."""
import argparse
import select
import socket
import time

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--subjects", type=int, default=10)
parser.add_argument("--rate", type=float, default=50.0)
parser.add_argument("--count", type=int, default=500)
args = parser.parse_args()

conn = socket.create_connection(("127.0.0.1", args.port))
buffer = b""


def read_until(token):
    global buffer
    while token not in buffer:
        chunk = conn.recv(65536)
        if not chunk:
            raise SystemExit("the server closed the connection")
        buffer += chunk
    buffer = buffer[buffer.index(token) + len(token):]


def answer_pings():
    global buffer
    while select.select([conn], [], [], 0)[0]:
        chunk = conn.recv(65536)
        if not chunk:
            raise SystemExit("the server closed the connection")
        buffer += chunk
    while b"PING\r\n" in buffer:
        buffer = buffer.replace(b"PING\r\n", b"", 1)
        conn.sendall(b"PONG\r\n")


read_until(b"\r\n")  # INFO
conn.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
read_until(b"PONG\r\n")
print("connected", flush=True)
start = time.monotonic()
for n in range(args.count):
    payload = str(n).encode()
    batch = b"".join(b"PUB s.%d %d\r\n%s\r\n" % (k, len(payload), payload) for k in range(args.subjects))
    conn.sendall(batch)
    answer_pings()
    delay = start + (n + 1) / args.rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
conn.sendall(b"PUB done 1\r\n.\r\nPING\r\n")
read_until(b"PONG\r\n")
print("published %d" % args.count, flush=True)
