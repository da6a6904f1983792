"""Body attacks: refused before the work they would cause, with or without a key."""

from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx

from tests.adversarial.conftest import AUTH

MiB = 1024 * 1024


def big_body(size: int = 31 * MiB + 900 * 1024) -> bytes:
    filler = "x" * (size - 100)
    return json.dumps({"model": "rm", "items": [{"response": filler}]}).encode()


def test_a_large_body_without_a_key_is_refused_unread(attacked):
    """401 before a byte of the body is parsed: four such clients at once leave
    everyone else's latency alone."""
    body = big_body()
    codes: list[int] = []

    def send() -> None:
        for _ in range(3):
            r = httpx.post(
                attacked.url + "/v1/score", content=body, headers={"content-type": "application/json"}, timeout=30
            )
            codes.append(r.status_code)

    with attacked.watch():
        threads = [threading.Thread(target=send) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert set(codes) == {401}


def test_two_million_tiny_items_are_refused_cheaply(attacked):
    body = b'{"model":"math","items":[' + b",".join([b'{"response":"1"}'] * 1_970_000) + b"]}"
    assert len(body) < 32 * MiB
    with attacked.watch():
        start = time.monotonic()
        response = attacked.post("/v1/score", content=body, headers={"content-type": "application/json"})
        assert time.monotonic() - start < 2
    assert response.status_code == 413, response.text[:300]


def test_ten_thousand_items_are_refused_on_every_route(attacked):
    items = [{"response": "x", "reference": "x"}] * 10_000
    criteria = [{"name": "e", "fn": "exact_match"}]
    for path, body in (
        ("/v1/score", {"model": "math", "items": items}),
        ("/v1/rubric", {"items": items, "criteria": criteria}),
    ):
        response = attacked.post(path, body)
        assert response.status_code == 413 and response.json()["error"]["param"] == "items", response.text[:300]


def test_ten_million_nested_values_are_refused_before_parsing(attacked):
    body = b'{"model":"math","items":[{"response":"x","reference":[' + b",".join([b"[]"] * 10_000_000) + b"]}]}"
    with attacked.watch():
        response = attacked.post("/v1/score", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413 and "JSON values" in response.json()["error"]["message"]


def test_numbers_and_unicode_json_allows_but_we_cannot_use(attacked):
    digits = b'{"model":"math","items":[{"response":"x","reference":' + b"9" * 4401 + b"}]}"
    response = attacked.post("/v1/score", content=digits, headers={"content-type": "application/json"})
    assert response.status_code == 422 and "digits" in response.json()["error"]["message"]
    lone = {
        "response": rb'{"model":"math","items":[{"response":"\ud800","reference":"x"}]}',
        "id": rb'{"model":"math","items":[{"id":"\udfff","response":"1","reference":"1"}]}',
    }
    for field, raw in lone.items():
        response = attacked.post("/v1/score", content=raw, headers={"content-type": "application/json"})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["param"] == f"items[0].{field}"
    paired = rb'{"model":"math","items":[{"response":"\\boxed{2} \ud83d\ude00","reference":"2"}]}'
    response = attacked.post("/v1/score", content=paired, headers={"content-type": "application/json"})
    assert response.status_code == 200 and response.json()["results"][0]["score"] == 1.0
    seed = attacked.post("/v1/verify", {"model": "any", "items": [{"response": "1"}], "options": {"seed": 2**70}})
    assert seed.status_code == 422 and seed.json()["error"]["param"] == "options.seed"
    for value in ("nan", "inf", "1e999"):
        response = attacked.post(f"/get_reward?model=math&invalid={value}", {"query": ["x"]})
        assert response.status_code == 422 and response.json()["error"]["param"] == "invalid", value


def test_open_routes_name_no_model_and_docs_need_the_key(attacked):
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(attacked.url + path, timeout=5).status_code == 401
        assert httpx.get(attacked.url + path, headers=AUTH, timeout=5).status_code == 200
    ready = httpx.get(attacked.url + "/ready", timeout=5).json()
    assert ready["status"] == "ready" and ready["models"] == {}
    metrics = httpx.get(attacked.url + "/metrics", timeout=5).text
    # Without a key: no model named, and (tenants share this service) no tenant's work.
    assert "rewardserve_model_ready" in metrics and 'model="' not in metrics
    assert "rewardserve_requests_total" not in metrics
    assert 'model="rm"' in httpx.get(attacked.url + "/metrics", headers=AUTH, timeout=5).text


def test_no_redirect_is_built_from_the_host_header(attacked):
    port = urlsplit(attacked.url).port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(
            b"POST /v1/score/ HTTP/1.1\r\nHost: evil.example\r\ncontent-length: 2\r\n"
            b"authorization: " + AUTH["authorization"].encode() + b"\r\n\r\n{}"
        )
        head = s.recv(4096).decode()
    assert head.startswith("HTTP/1.1 404") and "evil.example" not in head, head


def test_deadline_counts_from_arrival(attacked):
    """A body that takes a second to arrive, with a 300 ms deadline: 504 (the clock ran
    while it arrived)."""

    def slow_body():
        yield b'{"model": "math", "items": [{"response": "\\\\boxed{2}", '
        time.sleep(1.0)
        yield b'"reference": "2"}]}'

    response = httpx.post(
        attacked.url + "/v1/score",
        content=slow_body(),
        timeout=30,
        headers={**AUTH, "content-type": "application/json", "x-deadline-ms": "300"},
    )
    assert response.status_code == 504, response.text


def test_a_31_mib_text_with_truncation_is_cut_before_tokenizing(attacked):
    """Tokenizing 31 MiB without spaces took 71 s and 5.7 GB; the model reads at most
    its max_tokens, so the text is cut (far enough out) before the tokenizer sees it."""
    body = {"model": "rm", "items": [{"response": "x" * (31 * MiB)}], "options": {"truncate": "right"}}
    with attacked.watch():
        start = time.monotonic()
        response = attacked.post("/v1/score", body)
        assert time.monotonic() - start < 5
    assert response.status_code == 200, response.text[:300]
    (result,) = response.json()["results"]
    assert result["valid"] and result["truncated"]
    refused = attacked.post("/v1/score", {**body, "options": {"truncate": "error"}})
    assert refused.status_code == 413 and refused.json()["error"]["param"] == "items[0]"
