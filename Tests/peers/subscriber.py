"""A wsbridge subscriber in Python, as a local app would write it (second-language client).

usage: subscriber.py SOCKET N  -- prints the hello, asks for status, then reads N messages.
"""
import json
import socket
import sys

path, wanted = sys.argv[1], int(sys.argv[2])
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(path)
lines = sock.makefile("r", encoding="utf-8")

hello = json.loads(lines.readline())
print(f"hello protocol={hello['protocol']} state={hello['state']}", flush=True)

sock.sendall(b'{"id": "py-status", "op": "status"}\n')
seqs = []
for line in lines:
    msg = json.loads(line)
    if msg["type"] == "reply" and msg["id"] == "py-status":
        print(f"status state={msg['result']['state']}", flush=True)
    elif msg["type"] == "message":
        seqs.append(msg["seq"])
        if len(seqs) == wanted:
            print(f"got {wanted} messages seq={','.join(map(str, seqs))}", flush=True)
            break
