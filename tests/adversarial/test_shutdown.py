"""Shutdown under load: what cannot finish in the grace window gets our JSON 503 with
``retry-after`` (which nginx and the client retry), never a bare 500; new work during the
drain gets a 503 on every route; the process exits 0."""

from __future__ import annotations

import signal
import threading
import time

import httpx

from tests.harness import serve_process

SLOW = [{"name": "r", "fn": "regex", "args": {"pattern": "^(a+)+$"}}]  # exponential backtracking


def test_sigterm_with_requests_in_flight(tmp_path):
    env = {
        "REWARDSERVE_DRAIN_SECONDS": "1",
        "REWARDSERVE_GRACEFUL_SECONDS": "2",
        "REWARDSERVE_RULE_TIMEOUT_S": "5",
        "REWARDSERVE_LOG_LEVEL": "warning",
    }
    with serve_process(env=env, log_path=tmp_path / "server.log") as (url, proc):
        answers: list[httpx.Response | Exception] = []

        def slow_request(seed: int) -> None:
            items = [{"response": "a" * 30 + "!" * (1 + seed * 300 + i), "reference": None} for i in range(300)]
            try:
                answers.append(httpx.post(url + "/v1/rubric", json={"items": items, "criteria": SLOW}, timeout=60))
            except httpx.HTTPError as exc:
                answers.append(exc)

        threads = [threading.Thread(target=slow_request, args=(k,)) for k in range(12)]
        for t in threads:
            t.start()
        time.sleep(1.0)  # all twelve are in the rule pool's queue
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        during = httpx.post(
            url + "/v1/rubric",
            timeout=10,
            json={"items": [{"response": "x", "reference": "x"}], "criteria": [{"name": "e", "fn": "exact_match"}]},
        )
        for t in threads:
            t.join(timeout=30)
        code = proc.wait(timeout=30)
    assert during.status_code == 503 and during.json()["error"]["type"] == "not_ready"
    assert len(answers) == 12
    for answer in answers:
        assert isinstance(answer, httpx.Response), answer
        assert answer.status_code in (200, 503), answer.text[:200]
        if answer.status_code == 503:
            assert answer.json()["error"]["type"] == "not_ready" and answer.headers["retry-after"]
    assert any(a.status_code == 503 for a in answers)
    assert code == 0
