"""An independent reader of wsbridged's spool file (docs/spool.md), for the tests.

Prints one JSON object: {"records": [{"kind": "text"|"binary"|"delivered", "id": N, "payload": "..."}],
"end": offset where the readable records end, "size": file size}. Records are read in order
and the reading stops at the first one that is short or fails its CRC-32C. The checksum is
computed here in plain Python, from the polynomial, not by wsbridged's code.
"""

import json
import struct
import sys

POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected
TABLE = []
for n in range(256):
    c = n
    for _ in range(8):
        c = (c >> 1) ^ POLY if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283

KINDS = {1: "text", 2: "binary", 3: "delivered"}


def read(path):
    data = open(path, "rb").read()
    records = []
    if len(data) < 16:
        return {"records": records, "end": 0, "size": len(data)}
    if data[:8] != b"wsbspool" or struct.unpack_from("<I", data, 8)[0] != 1:
        raise SystemExit(f"{path}: not a version 1 spool")
    offset = 16
    while offset + 8 <= len(data):
        length, crc = struct.unpack_from("<II", data, offset)
        body = data[offset + 8 : offset + 8 + length]
        if length < 9 or len(body) < length or crc32c(body, crc32c(data[offset : offset + 4])) != crc:
            break
        kind, ident = struct.unpack_from("<BQ", body, 0)
        if kind not in KINDS:
            break
        records.append({"kind": KINDS[kind], "id": ident, "payload": body[9:].decode("utf-8", "replace")})
        offset += 8 + length
    return {"records": records, "end": offset, "size": len(data)}


if __name__ == "__main__":
    print(json.dumps(read(sys.argv[1])))
