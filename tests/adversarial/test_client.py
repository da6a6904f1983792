"""The client library against a broken or hostile server (issue 37, holes 14-16): a
server that drips its headers or body, a gzip bomb and an endless body, results out of
order, for items never sent, short, NaN or null, and a body that is not JSON. The
client runs in a process of its own (its time and peak memory read from outside); every
failure must be a RewardServeError, within its deadline and its memory."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import zlib
from contextlib import contextmanager

import pytest

DEADLINE_S = 2.5
CLIENT = r"""
import asyncio, json, sys, time
from rewardserve.client import AsyncRewardClient, RewardClient, RewardServeError
url, twin, modes = sys.argv[1], sys.argv[2], sys.argv[3:]
items = [{"id": "x", "response": "a"}, {"id": "y", "response": "bb"}, {"response": "ccc"}]


def peak_mb():
    # This process's own peak (ru_maxrss would count the test process it was forked from).
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024


for mode in modes:
    out = {"mode": mode}
    start = time.monotonic()
    try:
        if twin == "sync":
            with RewardClient(f"{url}/{mode}", deadline=%(deadline)s, max_retries=0) as client:
                results = client.score("m", items).results
        else:
            async def call():
                async with AsyncRewardClient(f"{url}/{mode}", deadline=%(deadline)s, max_retries=0) as client:
                    return (await client.score("m", items)).results
            results = asyncio.run(call())
        out["results"] = [[r.id, r.score] for r in results]
    except RewardServeError as exc:
        out["error"], out["message"] = type(exc).__name__, str(exc)
    except BaseException as exc:
        out["error"], out["message"] = "unexpected " + type(exc).__name__, repr(exc)[:300]
    out["seconds"] = time.monotonic() - start
    out["peak_mb"] = peak_mb()
    print(json.dumps(out), flush=True)
""" % {"deadline": DEADLINE_S}  # noqa: UP031 (the code holds f-strings: braces of its own)
GZIP_BOMB_BYTES = 256 * 1024 * 1024


def gzip_bomb() -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * (16 * 1024 * 1024)
    return b"".join(packer.compress(block) for _ in range(GZIP_BOMB_BYTES // len(block))) + packer.flush()


def read_request(conn: socket.socket) -> dict:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return json.loads(body)


def answer(results: list, first_score: bytes | None = None) -> bytes:
    body = json.dumps({"model": "m", "results": results, "usage": {"items": len(results)}}).encode()
    if first_score is not None:  # a value JSON has no literal for, or null
        body = body.replace(b'"score": 1.0', b'"score": ' + first_score, 1)
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body


def hostile(mode: str, conn: socket.socket, bomb: bytes) -> None:
    request = read_request(conn)
    ids = [item.get("id") for item in request["items"]]
    honest = [{"id": i, "score": float(len(item["response"])), "valid": True} for i, item in zip(ids, request["items"])]
    if mode == "drip_headers":
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for _ in range(120):
            conn.sendall(b"x")
            time.sleep(0.5)
    elif mode == "drip_body":
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{")
        for _ in range(120):
            conn.sendall(b" ")
            time.sleep(0.5)
    elif mode == "gzip_bomb":
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
            b"content-length: %d\r\n\r\n" % len(bomb) + bomb
        )
    elif mode == "endless":
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1500000000\r\n\r\n")
        chunk = b" " * (1024 * 1024)
        for _ in range(1500):
            conn.sendall(chunk)
    elif mode == "reversed":
        conn.sendall(answer(honest[::-1]))
    elif mode == "strangers":
        conn.sendall(answer([{**r, "id": f"other-{k}"} for k, r in enumerate(honest)]))
    elif mode == "short":
        conn.sendall(answer(honest[:-1]))
    elif mode in ("nan", "infinity", "null"):
        conn.sendall(answer(honest, {"nan": b"NaN", "infinity": b"Infinity", "null": b"null"}[mode]))
    elif mode == "malformed":
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\r\n{not json")


@contextmanager
def hostile_server():
    bomb = gzip_bomb()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        with conn:
            try:
                path = conn.recv(4096, socket.MSG_PEEK).split(b" ")[1].decode()
                hostile(path.strip("/").split("/")[0], conn, bomb)
            except OSError:
                pass

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


@pytest.fixture(scope="module")
def server():
    with hostile_server() as url:
        yield url


def calls(url: str, twin: str, *modes: str) -> dict[str, dict]:
    """What a client process got from each mode in turn (its peak memory so far with each)."""
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, url, twin, *modes], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    outs = [json.loads(line) for line in done.stdout.strip().splitlines() if line.startswith("{")]
    return {out["mode"]: out for out in outs}


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_dripping_server_cannot_hold_a_call_past_its_deadline(server, twin):
    for out in calls(server, twin, "drip_headers", "drip_body").values():
        assert out.get("error") == "APITimeoutError", out
        assert out["seconds"] < DEADLINE_S + 1.5, out


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_bomb_or_an_endless_body_is_cut_at_the_size_cap(server, twin):
    for out in calls(server, twin, "gzip_bomb", "endless").values():
        assert out.get("error") == "ResponseTooLargeError", out
        assert out["peak_mb"] < 400, out  # the cap is 64 MB; the bomb is 256 MB, the body 1.5 GB


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_results_are_matched_by_id_and_bad_ones_refused(server, twin):
    refused = {
        "strangers": "matches no item",
        "short": "2 results for 3 items",
        "nan": "not a finite number",
        "infinity": "not a finite number",
        "null": "not a finite number",
        "malformed": "not valid",
    }
    outs = calls(server, twin, "reversed", *refused)
    assert outs["reversed"]["results"] == [["x", 1.0], ["y", 2.0], [None, 3.0]], outs  # each on its own item
    for mode, says in refused.items():
        out = outs[mode]
        assert out.get("error") == "APIResponseValidationError" and says in out["message"], out
