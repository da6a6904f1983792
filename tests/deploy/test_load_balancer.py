"""Two real replicas behind a real nginx (deploy/nginx.conf, ports templated) on
127.0.0.1: a replica SIGKILLed mid-run loses no request; a replica SIGTERMed drains."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.deploy.test_files import render_nginx
from tests.harness import free_port, wait_ready

REQUESTS = 1000
CALLERS = 16

pytestmark = pytest.mark.long(30)


class Stack:
    """Replicas and nginx, as processes; everything is stopped on exit."""

    def __init__(self, model_dir: Path, workdir: Path, replicas: int = 2):
        self.ports = [free_port() for _ in range(replicas)]
        env = {
            **os.environ,
            "REWARDSERVE_DRAIN_SECONDS": "2",
            "REWARDSERVE_LOG_LEVEL": "warning",
            "REWARDSERVE_COMPILE": "false",
        }
        self.replicas = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rewardserve.cli",
                    "serve",
                    "--port",
                    str(p),
                    "--model",
                    f"rm={model_dir}",
                    "--no-builtin-rules",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for p in self.ports
        ]
        for port, proc in zip(self.ports, self.replicas):
            wait_ready(f"http://127.0.0.1:{port}", proc, 120)
        listen = free_port()
        conf = render_nginx(self.ports, listen, workdir)
        self.nginx = subprocess.Popen(
            ["nginx", "-c", str(conf), "-p", str(workdir), "-g", "daemon off; user root;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its workers in its group: stopped with it, never orphaned
        )
        self.url = f"http://127.0.0.1:{listen}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/nginx-health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)

    def close(self) -> None:
        for proc in self.replicas:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        # SIGTERM: nginx's master stops its workers (a SIGKILL to the master alone would
        # leave them running, holding the port); the group's SIGKILL if it does not.
        self.nginx.terminate()
        try:
            self.nginx.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.nginx.pid, signal.SIGKILL)
        self.nginx.wait(timeout=30)


@pytest.fixture
def stack(qwen3_rm, tmp_path):
    s = Stack(qwen3_rm, tmp_path)
    yield s
    s.close()


ITEMS = [{"prompt": f"question {k}", "response": f"answer number {k} " * (1 + k % 5)} for k in range(20)]


def drive(url: str, on_progress, model: str = "rm", items: list[dict] = ITEMS) -> tuple[list[int], list[float | None]]:
    """REQUESTS single-item scoring requests from CALLERS threads, each with its own
    RewardClient (what trainers use); returns statuses and scores in request order.

    nginx retries a request on the other replica when the dead one refused or dropped
    it before answering; when a replica dies between writing a response's headers and
    its body, nginx has already passed the headers on and cannot retry, so the client
    sees a cut connection and retries it itself (scoring is idempotent)."""
    from rewardserve.client import RewardClient
    from rewardserve.client.errors import APIStatusError

    statuses: list[int] = [0] * REQUESTS
    scores: list[float | None] = [None] * REQUESTS
    done = [0]
    lock = threading.Lock()
    local = threading.local()
    clients: list = []

    def one(k: int) -> None:
        if not hasattr(local, "client"):
            local.client = RewardClient(url, timeout=60, max_retries=3)
            with lock:
                clients.append(local.client)
        try:
            response = local.client.score(model, [items[k % len(items)]])
            statuses[k], scores[k] = 200, response.results[0].score
        except APIStatusError as exc:
            statuses[k] = exc.status_code
        except Exception:  # noqa: BLE001 - a transport failure that outlived the retries
            statuses[k] = -1
        with lock:
            done[0] += 1
            on_progress(done[0])

    with ThreadPoolExecutor(CALLERS) as pool:
        list(pool.map(one, range(REQUESTS)))
    for client in clients:
        client.close()
    return statuses, scores


def single_request_scores(url: str) -> list[float]:
    return [
        httpx.post(url + "/v1/score", json={"model": "rm", "items": [item]}, timeout=60).json()["results"][0]["score"]
        for item in ITEMS
    ]


def test_sigkill_of_a_replica_mid_run_loses_nothing(stack):
    expected = single_request_scores(stack.url)
    victim = stack.replicas[0]

    def on_progress(n: int) -> None:
        if n == REQUESTS // 3:
            victim.send_signal(signal.SIGKILL)

    statuses, scores = drive(stack.url, on_progress)
    assert victim.poll() is not None  # it really died mid-run
    assert statuses.count(200) == REQUESTS, {s: statuses.count(s) for s in set(statuses)}
    for k, score in enumerate(scores):
        assert score == pytest.approx(expected[k % len(ITEMS)], abs=1e-4)


def test_sigterm_drains_a_replica(stack):
    expected = single_request_scores(stack.url)
    victim, port = stack.replicas[0], stack.ports[0]
    seen = {}

    def on_progress(n: int) -> None:
        if n == REQUESTS // 3:
            seen["at"] = time.monotonic()
            victim.send_signal(signal.SIGTERM)
            # At once: not ready, and new work refused with 503 (nginx moves it on).
            seen["ready"] = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5).status_code
            seen["work"] = httpx.post(
                f"http://127.0.0.1:{port}/v1/score", timeout=5, json={"model": "rm", "items": [ITEMS[0]]}
            ).status_code

    statuses, scores = drive(stack.url, on_progress)
    assert seen["ready"] == 503 and seen["work"] == 503
    assert statuses.count(200) == REQUESTS, {s: statuses.count(s) for s in set(statuses)}
    for k, score in enumerate(scores):
        assert score == pytest.approx(expected[k % len(ITEMS)], abs=1e-4)
    # Drained for its 2 s, then stopped; uvicorn re-raises the SIGTERM it handled, so
    # the exit status is the signal's, as for any process stopped by one.
    assert victim.wait(timeout=40) in (0, -signal.SIGTERM)
    assert 2.0 <= time.monotonic() - seen["at"] < 40
