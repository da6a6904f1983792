"""Several replicas: balancing, failover, deadlines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from rewardserve.client import APITimeoutError, RewardClient
from tests.harness import free_port, wait_ready


def ok(request: httpx.Request) -> dict:
    """A scoring answer to ``request``: each item's id back, as the service answers."""
    items = json.loads(request.content)["items"] if request.content else []
    return {
        "model": "m",
        "results": [{"id": item.get("id"), "score": 1.0, "valid": True} for item in items],
        "usage": {"items": len(items)},
    }


def test_round_robin_and_failover_on_scripted_replicas():
    seen = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        if request.url.host == "down":
            raise httpx.ConnectError("refused")
        return httpx.Response(200, json=ok(request))

    client = RewardClient(
        ["http://a", "http://down", "http://b"], http_client=httpx.Client(transport=httpx.MockTransport(handle))
    )
    for _ in range(6):
        assert client.score("m", [{"response": "x"}]).results[0].score == 1.0
    # "down" was tried once, failed over at once, then skipped while cooling down.
    assert seen.count("down") == 1 and seen.count("a") >= 2 and seen.count("b") >= 2


def test_deadline_bounds_the_whole_call(monkeypatch):
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            503, json={"error": {"type": "not_ready", "message": "busy"}}, headers={"retry-after": "1"}
        )

    client = RewardClient(
        "http://a", max_retries=10, deadline=1.5, http_client=httpx.Client(transport=httpx.MockTransport(handle))
    )
    start = time.monotonic()
    with pytest.raises(APITimeoutError, match="deadline"):
        client.score("m", [{"response": "x"}])
    assert time.monotonic() - start < 2.5


def _start(port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rewardserve.cli", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )


def test_failover_when_a_replica_is_killed_mid_run():
    ports = [free_port(), free_port()]
    procs = [_start(p) for p in ports]
    try:
        for port, proc in zip(ports, procs):
            wait_ready(f"http://127.0.0.1:{port}", proc, 120)
        client = RewardClient([f"http://127.0.0.1:{p}" for p in ports], max_retries=4, chunk_size=4, max_concurrency=4)
        items = [{"response": f"\\boxed{{{k}}}", "reference": str(k if k % 3 else k + 1)} for k in range(24)]
        expected = [0.0 if k % 3 == 0 else 1.0 for k in range(24)]
        results, errors, finished = [], [], []
        done = threading.Event()

        def run():
            while not done.is_set():
                try:
                    results.append([r.score for r in client.score("math", items).results])
                    finished.append(time.monotonic())
                except Exception as exc:  # noqa: BLE001 - the test counts them
                    errors.append(exc)

        def wait_for(calls: int, deadline: float) -> None:
            while len(finished) < calls and time.monotonic() < deadline and not errors:
                time.sleep(0.05)

        worker = threading.Thread(target=run)
        worker.start()
        # Counted in calls, not seconds: a loaded machine makes each call slower.
        wait_for(3, time.monotonic() + 60)
        killed_at = time.monotonic()
        procs[0].send_signal(signal.SIGKILL)
        wait_for(len(finished) + 4, time.monotonic() + 60)
        done.set()
        worker.join(timeout=120)
        assert not errors, errors
        assert all(r == expected for r in results)
        assert sum(t < killed_at for t in finished) >= 3  # calls before the kill...
        assert sum(t > killed_at for t in finished) >= 3  # ...and after it, all correct
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
