"""The tested list of bad inputs, each with its status, plus deadlines."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import pytest_asyncio

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.harness import metric, serve_in_process

KEY = "k-123"
GOOD = {"model": "math", "items": [{"response": "\\boxed{1}", "reference": "1"}]}


@pytest_asyncio.fixture(scope="module")
async def service(qwen3_rm):
    settings = Settings(
        api_keys=[KEY],
        models=[ModelSpec(name="slow", source=str(qwen3_rm), max_wait_ms=3000, max_batch_tokens=100_000)],
    )
    async with serve_in_process(settings) as (app, http):
        http.headers["authorization"] = f"Bearer {KEY}"
        yield app, http


async def raw(http, content: bytes, headers=None):
    return await http.post(
        "/v1/score", content=content, headers={"content-type": "application/json", **(headers or {})}
    )


def status_and_type(response):
    return response.status_code, response.json()["error"]["type"]


@pytest.mark.parametrize(
    ("name", "content", "status"),
    [
        ("malformed JSON", b'{"model": "math", "items": [', 422),
        ("wrong types", json.dumps({"model": 5, "items": {"a": 1}}).encode(), 422),
        ("NaN in a number", b'{"model": "math", "items": [{"response": "x"}], "options": {"alpha": NaN}}', 422),
        ("Infinity in a reference", b'{"model": "math", "items": [{"response": "x", "reference": Infinity}]}', 422),
        (
            "deeply nested JSON",
            b'{"model": "math", "items": [{"response": "x", "reference": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}",
            422,
        ),
        (
            "nested past the field limit",
            json.dumps(
                {"model": "math", "items": [{"response": "x", "reference": json.loads("[" * 100 + "]" * 100)}]}
            ).encode(),
            422,
        ),
        ("invalid UTF-8", b'{"model": "math", "items": [{"response": "\xff\xfe"}]}', 422),
        ("unknown fields", json.dumps({**GOOD, "temperature": 1}).encode(), 422),
        ("100k items", json.dumps({"model": "math", "items": [{"response": "1"}] * 100_000}).encode(), 413),
    ],
)
async def test_bad_bodies(service, name, content, status):
    _, http = service
    response = await raw(http, content)
    assert response.status_code == status, (name, response.text[:300])
    assert response.json()["error"]["message"]
    # Nothing broke: the next good request is served.
    assert (await http.post("/v1/score", json=GOOD)).status_code == 200


async def test_a_one_gigabyte_body_is_refused_from_its_header(service):
    _, http = service
    sent = 0

    async def body():
        nonlocal sent
        for _ in range(1024):
            sent += 1
            yield b"x" * (1024 * 1024)

    response = await http.post(
        "/v1/score", content=body(), headers={"content-type": "application/json", "content-length": str(1024**3)}
    )
    assert status_and_type(response) == (413, "payload_too_large")
    assert sent <= 1  # refused before the body was read


@pytest.mark.parametrize(
    ("headers", "url"),
    [
        ({"authorization": ""}, "/v1/score"),
        ({"authorization": "Bearer wrong"}, "/v1/score"),
        ({"authorization": ""}, f"/v1/score?api_key={KEY}"),
        ({"authorization": f"Token {KEY}"}, "/v1/score"),
    ],
    ids=["missing", "wrong key", "key in query string", "wrong scheme"],
)
async def test_auth(service, headers, url):
    _, http = service
    response = await http.post(url, json=GOOD, headers=headers)
    assert status_and_type(response) == (401, "authentication_error")
    assert response.headers["www-authenticate"] == "Bearer"


async def test_work_past_its_deadline_is_dropped_with_504(service):
    app, http = service
    item = {"model": "slow", "items": [{"response": "waits three seconds for company"}]}
    before = metric(app.state.svc.metrics.render().decode(), "rewardserve_items_dropped_total", reason="deadline")
    response = await http.post("/v1/score", json=item, headers={"x-deadline-ms": "300"})
    assert status_and_type(response) == (504, "deadline_exceeded")
    await asyncio.sleep(3.2)  # the batcher's window closes: the work is dropped, not computed
    text = app.state.svc.metrics.render().decode()
    assert metric(text, "rewardserve_items_dropped_total", reason="deadline") == before + 1
    assert metric(text, "rewardserve_items_scored_total", model="slow") == 0
    ok = await http.post("/v1/score", json=GOOD, headers={"x-deadline-ms": "10000"})
    assert ok.status_code == 200
    bad = await http.post("/v1/score", json=GOOD, headers={"x-deadline-ms": "soon"})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "x-deadline-ms"


async def test_client_deadline_travels_as_a_header(service):
    """The client's deadline reaches the service, which gives up in time too."""
    from rewardserve.client import APITimeoutError, AsyncRewardClient, DeadlineExceededError

    _, http = service
    client = AsyncRewardClient("http://rewardserve", api_key=KEY, http_client=http, deadline=0.5)
    with pytest.raises((DeadlineExceededError, APITimeoutError, httpx.TimeoutException)):
        await client.score("slow", [{"response": "x"}])


async def test_a_body_not_sent_as_json_is_told_to_send_json(service):
    """A body posted as form data or text: a 422 that names the content type to send."""
    _, http = service
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        response = await http.post(
            "/v1/score", content=json.dumps(GOOD).encode(), headers={"content-type": content_type}
        )
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["param"] == "content-type" and "Content-Type: application/json" in error["message"], error
        assert content_type in error["message"]
    assert (await http.post("/v1/score", json=GOOD)).status_code == 200


async def test_a_refused_body_is_not_echoed_back(service):
    """A field over its limit: the error names it without the input (an 8 MB string
    would otherwise come back in the answer)."""
    _, http = service
    huge = "z" * 2_000_000
    response = await http.post(
        "/v1/score", json={"model": "math", "items": [{"response": "x", "reference": 5}], "options": {"zzz": huge}}
    )
    assert response.status_code == 422 and len(response.content) < 2_000, response.text[:300]
