"""Rule attacks: super-linear inputs are refused by their caps, runaway calls die alone in
the rule pool, and one request's slow calls never hold up another's."""

from __future__ import annotations

import random
import threading
import time

import httpx

from tests.adversarial.conftest import AUTH

PATHOLOGICAL = r"\boxed{9^{9^{9^{9}}}}"  # sympy would spend minutes building this integer


def ab(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("ab") for _ in range(n))


def rubric(attacked, items, criteria, timeout=60):
    return attacked.post("/v1/rubric", {"items": items, "criteria": criteria}, timeout=timeout)


def test_fuzzy_partial_ratio_on_long_texts_is_refused_by_its_cap(attacked):
    """Cubic in the text length (8k characters: 12 s holding the GIL): over the cap, a
    413 naming the field, before any work."""
    with attacked.watch():
        start = time.monotonic()
        response = rubric(
            attacked,
            [{"response": ab(50_000, 1), "reference": ab(50_000, 2)}],
            [{"name": "f", "fn": "fuzzy", "args": {"method": "partial_ratio"}}],
        )
        assert time.monotonic() - start < 2
    assert response.status_code == 413, response.text
    assert response.json()["error"]["param"] == "items[0].response"
    ok = rubric(
        attacked,
        [{"response": ab(900, 1), "reference": ab(5_000, 2)}],
        [{"name": "f", "fn": "fuzzy", "args": {"method": "partial_ratio"}}],
    )
    assert ok.status_code == 200 and ok.json()["results"][0]["valid"]


def test_backtracking_schema_pattern_times_out_in_the_pool(attacked):
    schema = {"type": "string", "pattern": "^(a+)+$"}
    items = [{"response": '"' + "a" * 28 + '!"', "reference": None}]
    with attacked.watch():
        response = rubric(attacked, items, [{"name": "s", "fn": "json_schema", "args": {"schema": schema}}])
    assert response.status_code == 200
    (result,) = response.json()["results"]
    assert result["valid"] is False and "timed out" in result["criteria"][0]["error"]


def test_quadratic_rules_are_capped(attacked):
    words = " ".join(["word"] * 10_000)
    with attacked.watch():
        rouge = rubric(attacked, [{"response": words, "reference": words}], [{"name": "r", "fn": "rouge"}])
        similar = rubric(
            attacked, [{"response": "a cat", "reference": ["a dog"] * 300}], [{"name": "s", "fn": "similarity"}]
        )
    assert rouge.status_code == 413 and rouge.json()["error"]["param"] == "items[0].response"
    assert similar.status_code == 413 and similar.json()["error"]["param"] == "items[0].reference"


def test_json_extraction_on_unclosed_brackets_gives_up_with_a_reason(attacked):
    text = "[" * 900 + "1," * 200_000
    with attacked.watch():
        start = time.monotonic()
        response = rubric(
            attacked, [{"response": text}], [{"name": "s", "fn": "json_schema", "args": {"schema": {"type": "array"}}}]
        )
        assert time.monotonic() - start < 5
    (result,) = response.json()["results"]
    assert result["valid"] is False and "brackets" in result["criteria"][0]["error"]


def test_slow_rules_of_one_request_leave_room_for_others(attacked):
    """Eight backtracking regex criteria fill what one request may hold of the pool; an
    innocent math request alongside is answered at once."""
    evil = [{"response": "a" * 28 + "!" * (1 + i), "reference": None} for i in range(8)]
    criteria = [{"name": "r", "fn": "regex", "args": {"pattern": "^(a+)+$"}}]  # 20 s each
    with attacked.watch():
        slow = threading.Thread(target=rubric, args=(attacked, evil, criteria))
        slow.start()
        time.sleep(0.5)
        start = time.monotonic()
        innocent = rubric(attacked, [{"response": r"\boxed{3}", "reference": "3"}], [{"name": "m", "fn": "math_equiv"}])
        waited = time.monotonic() - start
        slow.join(timeout=60)
    assert innocent.status_code == 200 and innocent.json()["results"][0]["score"] == 1.0
    assert waited < 1.0, waited


def test_a_hung_up_client_s_rule_work_is_dropped(attacked):
    """Twelve pathological math items whose client gives up after one second: their
    calls are killed, so the next math request does not wait behind them."""
    items = [{"response": PATHOLOGICAL, "reference": str(i)} for i in range(12)]
    with attacked.watch():
        try:
            httpx.post(attacked.url + "/v1/score", json={"model": "math", "items": items}, headers=AUTH, timeout=1.0)
        except httpx.TimeoutException:
            pass
        time.sleep(0.5)
        start = time.monotonic()
        after = attacked.post("/v1/score", {"model": "math", "items": [{"response": r"\boxed{7}", "reference": "7"}]})
        waited = time.monotonic() - start
    assert after.status_code == 200 and after.json()["results"][0]["score"] == 1.0
    assert waited < 1.5, waited
