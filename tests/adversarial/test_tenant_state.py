"""Reading or rewriting another tenant's rewards (issue 37, holes 7-10): running
statistics, the score cache, /metrics and the shadow report are each tenant's own, and
shadow work is charged to the tenant whose request it copies."""

from __future__ import annotations

import statistics
import time

import httpx

from tests.adversarial.conftest import AS_A, AS_B, AUTH
from tests.harness import metric


def running_rubric(attacked, headers: dict, responses: list[str]) -> dict:
    response = attacked.post(
        "/v1/rubric",
        {
            "items": [{"response": r, "reference": "3"} for r in responses],
            "criteria": [{"name": "m", "model": "math", "normalize": "running"}],
        },
        headers=headers,
    )
    assert response.status_code == 200, response.text
    return response.json()


def running_card(attacked, headers: dict) -> dict:
    cards = httpx.get(attacked.url + "/v1/models", headers=headers, timeout=10).json()["data"]
    return next(c for c in cards if c["id"] == "math")["running"]


def test_one_tenant_s_scores_never_move_another_s_running_normalisation(attacked):
    mine = [r"\boxed{3}"] * 4 + [r"\boxed{4}"] * 4
    running_rubric(attacked, AS_A, mine)
    with attacked.watch(headers=AS_B, against_alone=True):
        for _ in range(4):  # 1,000 wrong answers from b
            running_rubric(attacked, AS_B, [rf"\boxed{{{n}}}" for n in range(250)])
    (result,) = running_rubric(attacked, AS_A, [r"\boxed{3}"])["results"]
    raws = [1.0] * 4 + [0.0] * 4 + [1.0]
    criterion = result["criteria"][0]
    assert criterion["running_count"] == 9
    z = (1.0 - statistics.mean(raws)) / (statistics.stdev(raws) + 1e-6)
    assert abs(criterion["score"] - z) < 1e-6, (criterion, z)
    assert running_card(attacked, AS_A)["count"] == 9
    assert running_card(attacked, AS_B)["count"] == 1000


def test_the_score_cache_is_no_membership_oracle(attacked):
    item = {"prompt": "secret prompt of tenant a", "response": f"a's completion {time.time()}"}
    first = attacked.post("/v1/score", {"model": "rm", "items": [item]}, headers=AS_A).json()
    again = attacked.post("/v1/score", {"model": "rm", "items": [item]}, headers=AS_A)
    assert again.json()["usage"]["cached_tokens"] == again.json()["usage"]["prompt_tokens"] > 0  # a's own cache
    probe = attacked.post("/v1/score", {"model": "rm", "items": [item]}, headers=AS_B)
    assert probe.json()["usage"]["cached_tokens"] == 0
    assert float(probe.headers["x-inference-time"]) > 0
    assert probe.json()["results"][0]["score"] == first["results"][0]["score"]
    assert "rewardserve_cache_hits" not in attacked.metrics(AS_B)


def test_metrics_show_no_tenant_another_s_work(attacked):
    attacked.post("/v1/score", {"model": "rm", "items": [{"response": "a's work"}]}, headers=AS_A)
    attacked.post("/v1/score", {"model": "rm", "items": [{"response": "b's work"}]}, headers=AS_B)
    for headers in ({}, {"authorization": "Bearer not-a-key"}):
        text = attacked.metrics(headers)
        assert 'tenant="' not in text and "rewardserve_reward_score" not in text
        assert "rewardserve_requests_total" not in text and "rewardserve_model_ready" in text
    as_b = attacked.metrics(AS_B)
    assert 'tenant="b"' in as_b and 'tenant="a"' not in as_b
    for family in (
        "rewardserve_reward_score",
        "rewardserve_reward_length_correlation",
        "rewardserve_cache_hits",
        "rewardserve_items_scored",
        "rewardserve_shadow",
    ):
        assert family not in as_b, family
    operator = attacked.metrics(AUTH)
    assert 'tenant="a"' in operator and 'tenant="b"' in operator and "rewardserve_reward_score" in operator


def shadow_items(attacked, headers: dict) -> int:
    response = httpx.get(attacked.url + "/v1/models/math/shadow", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["items"]


def test_shadow_reports_and_charges_are_each_tenant_s_own(attacked):
    before = {"a": shadow_items(attacked, AS_A), "b": shadow_items(attacked, AS_B), "all": shadow_items(attacked, AUTH)}
    # "": the work of no tenant (the operator's key)
    work = {t: metric(attacked.metrics(), "rewardserve_tenant_work_total", tenant=t) for t in ("a", "")}
    fresh = time.time()  # items no cache holds: their work is done, and charged
    items = [{"response": rf"\boxed{{{n}}} {fresh}", "reference": str(n)} for n in range(3)]
    assert attacked.post("/v1/score", {"model": "math", "items": items}, headers=AS_A).status_code == 200
    assert attacked.post("/v1/score", {"model": "math", "items": items[:2]}, headers=AS_B).status_code == 200
    deadline = time.monotonic() + 20
    while shadow_items(attacked, AUTH) - before["all"] < 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert shadow_items(attacked, AUTH) - before["all"] == 5
    assert shadow_items(attacked, AS_A) - before["a"] == 3
    assert shadow_items(attacked, AS_B) - before["b"] == 2
    text = attacked.metrics()
    # a's 3 items, and the shadow's 3 calls on the candidate: a's, not the operator's.
    assert metric(text, "rewardserve_tenant_work_total", tenant="a") - work["a"] == 6
    assert metric(text, "rewardserve_tenant_work_total", tenant="") == work[""]
