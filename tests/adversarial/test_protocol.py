"""Protocol and logs (issue 37, holes 19-20): a request framed by both Content-Length
and Transfer-Encoding is refused and its connection closed (no request smuggled in
behind it), and nothing a client sends reaches the text log as a raw control character
or comes back as different bytes."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.harness import serve_process


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    log = tmp_path_factory.mktemp("logged") / "server.log"
    env = {"REWARDSERVE_LOG_LEVEL": "info", "REWARDSERVE_LOG_FORMAT": "text"}
    with serve_process(env=env, log_path=log) as (url, _):
        yield url, log


def exchange(url: str, raw: bytes, wait_s: float = 3.0) -> tuple[bytes, bool]:
    """What the server sends back on one connection, and whether it closed it."""
    with socket.create_connection(("127.0.0.1", urlsplit(url).port), timeout=wait_s) as s:
        s.sendall(raw)
        received, deadline = b"", time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                return received, False
            if not chunk:
                return received, True
            received += chunk
        return received, False


def test_a_request_framed_two_ways_is_refused_and_nothing_rides_behind_it(logged):
    url, _ = logged
    smuggled = (
        b"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    )
    received, closed = exchange(url, smuggled)
    assert received.startswith(b"HTTP/1.1 400"), received[:200]
    assert b'"type":"malformed_request"' in received, received  # the one table's 400
    assert received.count(b"HTTP/1.1") == 1 and closed, received


def test_nothing_a_client_sends_forges_a_log_line_or_changes_its_id(logged):
    url, log = logged
    forged = "/v1/%1b%5b31m%0d%0a2026-01-01%2000:00:00,000%20INFO%20rewardserve.requests:%20forged%07"
    received, _ = exchange(url, f"GET {forged} HTTP/1.1\r\nHost: 127.0.0.1\r\nconnection: close\r\n\r\n".encode())
    assert received.startswith(b"HTTP/1.1 404")
    odd = httpx.get(url + "/health", headers={"x-request-id": "caf\u00e9-\u2603".encode()}, timeout=5)
    assert odd.headers["x-request-id"].isascii() and len(odd.headers["x-request-id"]) == 32
    kept = httpx.get(url + "/health", headers={"x-request-id": "trainer-step-7"}, timeout=5)
    assert kept.headers["x-request-id"] == "trainer-step-7"
    time.sleep(0.5)
    text = log.read_bytes()
    assert b"forged" in text  # the line is there, escaped
    assert not any(c in text for c in (b"\x1b", b"\r", b"\x07")), text[-2000:]
    forged_lines = [line for line in text.splitlines() if b"forged" in line]
    assert len(forged_lines) == 1 and b"rewardserve.requests: request_id=" in forged_lines[0], forged_lines
