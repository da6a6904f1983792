"""The client's retry policy, on scripted HTTP exchanges (the service's own 429 and 503
are exercised against the real app in test_clients.py)."""

from __future__ import annotations

import json

import httpx
import pytest

from rewardserve.client import (
    APIConnectionError,
    AsyncRewardClient,
    NotFoundError,
    RewardClient,
    ServiceUnavailableError,
    UnprocessableEntityError,
)
from rewardserve.client._core import ClientConfig, parse_retry_after, plan_chunks
from rewardserve.protocol import Item


def ok(request: httpx.Request) -> dict:
    """A scoring answer to ``request``: each item's id back, as the service answers."""
    items = json.loads(request.content)["items"] if request.content else []
    return {
        "model": "m",
        "results": [{"id": item.get("id"), "score": 1.0, "valid": True} for item in items],
        "usage": {"items": len(items)},
    }


def scripted(*steps):
    """A transport answering each request with the next step: a status (with optional
    retry-after) or an exception."""
    calls = []

    def handle(request: httpx.Request) -> httpx.Response:
        step = steps[min(len(calls), len(steps) - 1)]
        calls.append(request)
        if isinstance(step, Exception):
            raise step
        status, headers = step if isinstance(step, tuple) else (step, {})
        if status == 200:
            return httpx.Response(200, json=ok(request))
        if headers == "plain":  # an intermediary's error page, not the service's JSON
            return httpx.Response(status, text="Internal Server Error")
        body = {"error": {"type": "x", "message": f"status {status}", "param": "items"}}
        return httpx.Response(status, json=body, headers=headers)

    return httpx.MockTransport(handle), calls


@pytest.fixture
def sleeps(monkeypatch):
    waited = []
    monkeypatch.setattr("rewardserve.client.sync.time.sleep", waited.append)
    return waited


def test_retries_429_and_503_honouring_retry_after(sleeps):
    transport, calls = scripted((429, {"retry-after": "2"}), (503, {"retry-after": "1"}), 200)
    client = RewardClient("http://rs", http_client=httpx.Client(transport=transport))
    assert client.score("m", [{"response": "a"}]).results[0].score == 1.0
    assert len(calls) == 3 and sleeps == [2.0, 1.0]


def test_exponential_backoff_with_jitter_on_connection_errors(sleeps):
    transport, calls = scripted(httpx.ConnectError("down"), httpx.ConnectError("down"), 200)
    client = RewardClient("http://rs", http_client=httpx.Client(transport=transport))
    client.score("m", [{"response": "a"}])
    assert len(calls) == 3
    assert 0.375 <= sleeps[0] <= 0.5 and 0.75 <= sleeps[1] <= 1.0


def test_gives_up_after_max_retries_with_typed_errors(sleeps):
    transport, calls = scripted(503)
    client = RewardClient("http://rs", max_retries=2, http_client=httpx.Client(transport=transport))
    with pytest.raises(ServiceUnavailableError) as err:
        client.score("m", [{"response": "a"}])
    assert len(calls) == 3 and err.value.status_code == 503
    transport, _ = scripted(httpx.ConnectError("down"))
    client = RewardClient("http://rs", max_retries=1, http_client=httpx.Client(transport=transport))
    with pytest.raises(APIConnectionError):
        client.health()


def test_a_proxy_s_500_is_retried_the_service_s_own_is_not(sleeps):
    transport, calls = scripted((500, "plain"), 200)
    client = RewardClient("http://x", http_client=httpx.Client(transport=transport), max_retries=2)
    assert client.score("m", [{"response": "r"}]).results[0].score == 1.0 and len(calls) == 2
    transport, calls = scripted(500, 200)
    client = RewardClient("http://x", http_client=httpx.Client(transport=transport), max_retries=2)
    with pytest.raises(Exception, match="status 500"):
        client.score("m", [{"response": "r"}])
    assert len(calls) == 1


def test_422_is_not_retried(sleeps):
    transport, calls = scripted(422)
    client = RewardClient("http://rs", http_client=httpx.Client(transport=transport))
    with pytest.raises(UnprocessableEntityError) as err:
        client.score("m", [{"response": "a"}])
    assert len(calls) == 1 and err.value.param == "items" and sleeps == []


async def test_async_twin_retries(monkeypatch):
    waited = []

    async def fake_sleep(s):
        waited.append(s)

    monkeypatch.setattr("rewardserve.client.aio.asyncio.sleep", fake_sleep)
    transport, calls = scripted((429, {"retry-after": "3"}), 200)
    client = AsyncRewardClient("http://rs", api_key="k", http_client=httpx.AsyncClient(transport=transport))
    out = await client.score("m", [{"response": "a"}])
    assert out.results[0].score == 1.0 and waited == [3.0]
    assert calls[0].headers["authorization"] == "Bearer k"
    # Each item goes with an id of its own (the client made it), so results match by id.
    assert json.loads(calls[0].content) == {"model": "m", "items": [{"id": "rs-0", "response": "a"}], "options": {}}


def test_retry_after_forms():
    assert parse_retry_after("5") == 5.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert 0 <= parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") <= 0.0001
    assert ClientConfig("u", max_retry_after_s=10).backoff_s(0, "3600") == 10


def test_chunks_keep_groups_whole_and_cover_every_index():
    items = [Item(response="a", group_id=g) for g in "aabbbcdddde"] + [Item(response="x")] * 3
    chunks = plan_chunks(items, chunk_size=4)
    assert sorted(i for c in chunks for i in c) == list(range(len(items)))
    for chunk in chunks:
        groups = {items[i].group_id for i in chunk if items[i].group_id}
        for g in groups:
            assert sum(1 for i in chunk if items[i].group_id == g) == sum(1 for it in items if it.group_id == g)


def test_errors_name_the_url_and_explain_a_trailing_v1():
    """A refused connection names the URL it tried; a base URL ending in /v1 (the OpenAI
    SDK's habit) gets a 404 that says what to give instead."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/v1/v1/"):
            return httpx.Response(404, json={"error": {"type": "not_found", "message": "Not Found"}})
        raise httpx.ConnectError("Connection refused")

    http = httpx.Client(transport=httpx.MockTransport(handle))
    with pytest.raises(APIConnectionError, match=r"POST http://rs:8000/v1/score failed: Connection refused"):
        RewardClient("http://rs:8000", http_client=http, max_retries=0).score("m", [{"response": "a"}])
    with pytest.raises(NotFoundError, match="base URL ends in /v1: give the service's root"):
        RewardClient("http://rs:8000/v1", http_client=http, max_retries=0).score("m", [{"response": "a"}])
    # Nothing answers at all: the refusal names the doubled /v1 too.
    from tests.harness import free_port

    closed = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(APIConnectionError, match=r"/v1/v1/score failed: .*base URL ends in /v1"):
        RewardClient(closed, max_retries=0).score("m", [{"response": "a"}])


def test_with_options_takes_the_constructor_s_keywords():
    client = RewardClient("http://rs", timeout=5.0)
    assert client.with_options(timeout=1.5, deadline=9.0).config.timeout_s == 1.5
    assert client.with_options(deadline=9.0).config.deadline_s == 9.0
    with pytest.raises(TypeError, match="with_options"):
        client.with_options(timeout_s=1.0)  # type: ignore[call-arg]


def test_each_error_type_of_the_one_table_is_its_own_client_error():
    from rewardserve.client import BadRequestError
    from rewardserve.client.errors import _BY_TYPE, status_error
    from rewardserve.protocol import ERROR_STATUS

    request = httpx.Request("POST", "http://127.0.0.1:1/v1/score")
    for kind, status in ERROR_STATUS.items():
        error = status_error(httpx.Response(status, json={"error": {"type": kind, "message": "m"}}, request=request))
        assert (error.status_code, error.type) == (status, kind)
        if kind in _BY_TYPE:
            assert type(error) is _BY_TYPE[kind]
    framed = httpx.Response(400, json={"error": {"type": "malformed_request", "message": "m"}}, request=request)
    assert isinstance(status_error(framed), BadRequestError)
