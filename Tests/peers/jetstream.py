"""JetStream by its API over a plain NATS connection (no client library), for the fleet tests.

  jetstream.py --port P create-stream NAME SUBJECT... [--replicas N]
                                                        makes a file stream (prints its config)
  jetstream.py --port P messages NAME                   every message in it, one JSON line each:
                                                        {"seq", "subject", "headers", "data"}
"""
import argparse
import base64
import json
import socket
import sys
import time


class Client:
    def __init__(self, port):
        # A request nobody answers (a cluster still electing its leader) ends the script.
        self.conn = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buffer = b""
        self.line()  # INFO
        self.conn.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\nSUB _INBOX.jst 1\r\nPING\r\n')
        while self.line() != b"PONG":
            pass

    def fill(self):
        try:
            chunk = self.conn.recv(65536)
        except socket.timeout:
            sys.exit("no answer from the server within 5 s")
        if not chunk:
            sys.exit("the server closed the connection")
        self.buffer += chunk

    def line(self):
        while b"\r\n" not in self.buffer:
            self.fill()
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def request(self, subject, payload):
        body = json.dumps(payload).encode()
        self.conn.sendall(b"PUB %s _INBOX.jst %d\r\n%s\r\n" % (subject.encode(), len(body), body))
        deadline = time.monotonic() + 5
        while True:
            if time.monotonic() > deadline:
                sys.exit("no answer to %s within 5 s" % subject)
            line = self.line()
            if line == b"PING":
                self.conn.sendall(b"PONG\r\n")
                continue
            if not line.startswith(b"MSG ") and not line.startswith(b"HMSG "):
                continue
            size = int(line.split()[-1])
            while len(self.buffer) < size + 2:
                self.fill()
            data, self.buffer = self.buffer[:size], self.buffer[size + 2:]
            if line.startswith(b"HMSG "):
                head, data = data[:int(line.split()[-2])], data[int(line.split()[-2]):]
                if b"503" in head.split(b"\r\n")[0]:
                    sys.exit("no responders: JetStream is not ready")
            return json.loads(data)


def headers(text):
    out = {}
    for line in text.split("\r\n")[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            out[name.strip()] = value.strip()
    return out


parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("command", choices=["create-stream", "messages"])
parser.add_argument("name")
parser.add_argument("subjects", nargs="*")
parser.add_argument("--replicas", type=int, default=1)
args = parser.parse_args()
client = Client(args.port)
if args.command == "create-stream":
    config = {"name": args.name, "subjects": args.subjects, "storage": "file", "num_replicas": args.replicas, "duplicate_window": 120_000_000_000}
    answer = client.request("$JS.API.STREAM.CREATE." + args.name, config)
    if "error" in answer:
        sys.exit("create-stream: %s" % answer["error"])
    print(json.dumps(answer["config"]), flush=True)
else:
    info = client.request("$JS.API.STREAM.INFO." + args.name, {})
    if "error" in info:
        sys.exit("messages: %s" % info["error"])
    state = info["state"]
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        answer = client.request("$JS.API.STREAM.MSG.GET." + args.name, {"seq": seq})
        if "error" in answer:
            continue
        message = answer["message"]
        print(json.dumps({
            "seq": message["seq"],
            "subject": message["subject"],
            "headers": headers(base64.b64decode(message.get("hdrs", "")).decode()) if message.get("hdrs") else {},
            "data": base64.b64decode(message.get("data", "")).decode(errors="replace"),
        }), flush=True)
