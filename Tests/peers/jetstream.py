"""JetStream by its API over a plain NATS connection (no client library), for the fleet tests.

  jetstream.py --port P create-stream NAME SUBJECT... [--replicas N]
                                                        makes a file stream (prints its config)
  jetstream.py --port P messages NAME                   every message in it, one JSON line each:
                                                        {"seq", "subject", "headers", "data"}
  jetstream.py --port P info NAME                       the stream's info (config, state, cluster)
  jetstream.py --port P purge NAME                      purges it (prints the answer)
  jetstream.py --port P publish NAME SUBJECT TEXT       publishes TEXT on SUBJECT, no headers (prints
                                                        JetStream's acknowledgement)
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
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
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
parser.add_argument("command", choices=["create-stream", "messages", "info", "purge", "publish"])
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
elif args.command in ("info", "purge"):
    answer = client.request("$JS.API.STREAM.%s.%s" % (args.command.upper(), args.name), {})
    if "error" in answer:
        sys.exit("%s: %s" % (args.command, answer["error"]))
    print(json.dumps(answer), flush=True)
elif args.command == "publish":
    subject, text = args.subjects
    answer = client.request(subject, text.encode())
    if "error" in answer:
        sys.exit("publish: %s" % answer["error"])
    print(json.dumps(answer), flush=True)
else:
    info = client.request("$JS.API.STREAM.INFO." + args.name, {})
    if "error" in info:
        sys.exit("messages: %s" % info["error"])
    state = info["state"]

    def get(seq):
        """A message by its seq; a request left unanswered (a node restarting, a leader moving)
        is asked again on a new connection, so the listing is never cut short."""
        global client
        for attempt in range(10):
            try:
                return client.request("$JS.API.STREAM.MSG.GET." + args.name, {"seq": seq})
            except SystemExit as e:
                if attempt == 9:
                    raise
                print("seq %d: %s; asking again" % (seq, e), file=sys.stderr, flush=True)
                time.sleep(0.5)
                try:
                    client = Client(args.port)
                except SystemExit:
                    pass

    for seq in range(state["first_seq"], state["last_seq"] + 1):
        answer = get(seq)
        if "error" in answer:
            continue
        message = answer["message"]
        hdrs = headers(base64.b64decode(message.get("hdrs", "")).decode()) if message.get("hdrs") else {}
        data = base64.b64decode(message.get("data", ""))
        if "Wsbridge-Batch" in hdrs:
            # A bridge's batch (docs/fleet.md, "Batches"): each of its messages on a line of its
            # own, with its number, and its seq counted back from the batch's last (the tests
            # that list batches have no protocol, whose messages for one app leave seqs out).
            count, at, parts = int(hdrs["Wsbridge-Batch"]), 0, []
            while at < len(data):
                length = int.from_bytes(data[at + 1:at + 5], "big")
                parts.append(data[at + 5:at + 5 + length])
                at += 5 + length
            last = int(hdrs["Wsbridge-Seq"])
            for i, part in enumerate(parts):
                own = dict(hdrs, **{"Wsbridge-Seq": str(last - (count - 1 - i)), "Wsbridge-Number": str(int(hdrs["Wsbridge-Number"]) + i)})
                print(json.dumps({"seq": message["seq"], "subject": message["subject"], "headers": own,
                                  "data": part.decode(errors="replace")}), flush=True)
            continue
        print(json.dumps({
            "seq": message["seq"],
            "subject": message["subject"],
            "headers": hdrs,
            "data": data.decode(errors="replace"),
        }), flush=True)
