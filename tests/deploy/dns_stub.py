"""A DNS server just big enough for nginx's `resolver` in the deployment tests: it
answers A queries for the names in a JSON file ({"name": ["127.0.0.2", ...]}), read again
for every query so a test can move a name to other addresses while nginx runs, and
NXDOMAIN for anything else.

    python tests/deploy/dns_stub.py ANSWERS.json   # prints its UDP port on 127.0.0.1

It runs as its own process so that a busy test process cannot make nginx's lookups
time out."""

from __future__ import annotations

import json
import socket
import struct
import sys
from pathlib import Path

A, IN = 1, 1
TTL = 1


def parse_question(packet: bytes) -> tuple[str, int, int, int]:
    """(name, type, class, end offset) of the query's one question."""
    labels, at = [], 12
    while packet[at]:
        size = packet[at]
        labels.append(packet[at + 1 : at + 1 + size].decode("ascii"))
        at += 1 + size
    qtype, qclass = struct.unpack("!HH", packet[at + 1 : at + 5])
    return ".".join(labels).lower().rstrip("."), qtype, qclass, at + 5


def answer(packet: bytes, answers: dict[str, list[str]]) -> bytes:
    (query_id,) = struct.unpack("!H", packet[:2])
    name, qtype, qclass, end = parse_question(packet)
    question = packet[12:end]
    addresses = answers.get(name)
    if addresses is None:  # NXDOMAIN
        return struct.pack("!HHHHHH", query_id, 0x8183, 1, 0, 0, 0) + question
    records = b""
    if qtype == A and qclass == IN:
        for address in addresses:
            # The name as a pointer to the question's (offset 12).
            records += struct.pack("!HHHIH", 0xC00C, A, IN, TTL, 4) + socket.inet_aton(address)
    count = len(addresses) if qtype == A and qclass == IN else 0
    return struct.pack("!HHHHHH", query_id, 0x8580, 1, count, 0, 0) + question + records


def main() -> None:
    path = Path(sys.argv[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    while True:
        packet, peer = sock.recvfrom(512)
        try:
            answers = {k.lower(): v for k, v in json.loads(path.read_text()).items()}
            sock.sendto(answer(packet, answers), peer)
        except Exception as exc:  # noqa: BLE001 - a malformed query or a half-written file
            print(f"dns_stub: {exc!r}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
