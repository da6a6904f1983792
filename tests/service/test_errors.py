"""Each refusal gets its status, the one error shape, and a message naming the field."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.harness import item_of_tokens, metric, serve_in_process

KEY = "sk-test-123"


@pytest_asyncio.fixture(scope="module")
async def service(qwen3_rm):
    settings = Settings(
        models=[
            ModelSpec(name="qwen", source=str(qwen3_rm), max_tokens=64),
            # A long wait for company and a small queue make "queue full" reproducible.
            ModelSpec(
                name="slowq",
                source=str(qwen3_rm),
                max_wait_ms=3000,
                max_queue_tokens=300,
                max_batch_tokens=100_000,
            ),
        ],
        api_keys=[KEY, "another-key"],
        max_body_bytes=200_000,
        max_items_per_request=100,
    )
    async with serve_in_process(settings) as (app, http):
        http.headers["authorization"] = f"Bearer {KEY}"
        yield app, http


def error_of(response, status: int, kind: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == kind and error["message"]
    return error


async def test_401_without_or_with_wrong_key(service):
    _, http = service
    body = {"model": "qwen", "items": [{"response": "x"}]}
    for headers in ({"authorization": ""}, {"authorization": "Bearer nope"}, {"authorization": "Basic " + KEY}):
        response = await http.post("/v1/score", json=body, headers=headers)
        error_of(response, 401, "authentication_error")
    # A key in the query string is not a key.
    response = await http.post(f"/v1/score?api_key={KEY}", json=body, headers={"authorization": ""})
    error_of(response, 401, "authentication_error")
    response = await http.get("/v1/models", headers={"authorization": ""})
    error_of(response, 401, "authentication_error")
    ok = await http.post("/v1/score", json=body, headers={"authorization": "Bearer another-key"})
    assert ok.status_code == 200
    for open_route in ("/health", "/ready", "/metrics"):
        assert (await http.get(open_route, headers={"authorization": ""})).status_code == 200


async def test_404_unknown_model_and_route(service):
    _, http = service
    response = await http.post("/v1/score", json={"model": "nope", "items": [{"response": "x"}]})
    error = error_of(response, 404, "not_found")
    assert error["param"] == "model" and "qwen" in error["message"]
    error_of(await http.get("/v1/nothing"), 404, "not_found")


async def test_413_body_too_large_refused_from_header(service):
    app, http = service
    big = {"model": "qwen", "items": [{"response": "x" * 300_000}]}
    error_of(await http.post("/v1/score", json=big), 413, "payload_too_large")
    text = app.state.svc.metrics.render().decode()
    assert metric(text, "rewardserve_requests_total", status="413") >= 1


async def test_413_too_many_items(service):
    _, http = service
    body = {"model": "qwen", "items": [{"response": "x"}] * 101}
    error = error_of(await http.post("/v1/score", json=body), 413, "payload_too_large")
    assert error["param"] == "items"


async def test_413_item_over_max_tokens_names_it_and_truncate_fits(service, qwen3_rm):
    _, http = service
    items = [{"response": "ok"}, {"response": "ok"}, item_of_tokens(qwen3_rm, 80)]
    error = error_of(await http.post("/v1/score", json={"model": "qwen", "items": items}), 413, "payload_too_large")
    assert error["param"] == "items[2]" and "items[2]" in error["message"]
    response = await http.post("/v1/score", json={"model": "qwen", "items": items, "options": {"truncate": "left"}})
    assert response.status_code == 200
    assert response.json()["results"][2]["truncated"] is True


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "qwen"}, "items"),
        ({"model": "qwen", "items": "x"}, "items"),
        ({"model": "qwen", "items": []}, "items"),
        ({"model": "qwen", "items": [{"response": 5}]}, "items[0].response"),
        ({"model": "qwen", "items": [{"respnse": "x"}]}, "items[0]"),
        ({"model": "qwen", "items": [{"response": "x"}], "extra": 1}, "extra"),
        ({"model": "qwen", "items": [{"response": "x"}], "options": {"activation": "tanh"}}, "options.activation"),
        ({"model": "qwen", "items": [{"response": "x"}], "options": {"normalise": "group"}}, "options.normalise"),
        ({"model": "qwen", "items": [{"messages": [{"role": "robot", "content": "x"}]}]}, "items[0].messages[0].role"),
        ({"model": "qwen", "items": [{"messages": [{"role": "user", "content": "x"}], "response": "y"}]}, "items[0]"),
    ],
)
async def test_422_names_the_field(service, body, param):
    _, http = service
    error = error_of(await http.post("/v1/score", json=body), 422, "invalid_request")
    assert error["param"].startswith(param), error


async def test_422_malformed_json(service):
    _, http = service
    response = await http.post(
        "/v1/score", content=b'{"model": "qwen", "items": [', headers={"content-type": "application/json"}
    )
    error_of(response, 422, "invalid_request")


async def test_429_with_retry_after_when_the_queue_is_full(service, qwen3_rm):
    app, http = service
    item = item_of_tokens(qwen3_rm, 130)
    first = [item, item_of_tokens(qwen3_rm, 130, "pear")]  # fits the 300-token queue and waits 3 s there for company
    second = [item]

    async def send(items):
        return await http.post("/v1/score", json={"model": "slowq", "items": items})

    task = asyncio.create_task(send(first))
    await asyncio.sleep(0.5)
    refused = await send(second)
    error_of(refused, 429, "overloaded")
    assert int(refused.headers["retry-after"]) >= 1
    assert (await task).status_code == 200
    text = app.state.svc.metrics.render().decode()
    assert metric(text, "rewardserve_requests_rejected_total", model="slowq", reason="queue_full") == 1
    # A request bigger than the whole queue can never fit: 413, not 429 (new items:
    # the two above are in the score cache now and would cost no queue room).
    huge = [item_of_tokens(qwen3_rm, 130, word) for word in ("fig", "kiwi", "lime")]
    error_of(await send(huge), 413, "payload_too_large")


async def test_invalid_rule_item_beside_valid_ones(service):
    _, http = service
    items = [
        {"response": r"\boxed{4}", "reference": "4"},
        {"response": r"\boxed{4}"},  # no reference
        {"response": r"\boxed{5}", "reference": "4"},
    ]
    results = (await http.post("/v1/score", json={"model": "math", "items": items})).json()["results"]
    assert results[0]["score"] == 1.0 and results[0]["valid"]
    assert results[1]["valid"] is False and results[1]["score"] is None and "reference" in results[1]["error"]
    assert results[2]["score"] == 0.0 and results[2]["valid"]


@pytest.mark.parametrize(
    ("body", "param", "meant", "model"),
    [
        ({"model": "qwen", "items": [{"completion": "x"}]}, "items[0].completion", None, "Item"),
        ({"model": "qwen", "items": [{"respnse": "x"}]}, "items[0].respnse", "response", "Item"),
        ({"model": "qwen", "items": [{"response": "x", "answer": "4"}]}, "items[0].answer", None, "Item"),
        (
            {"model": "qwen", "items": [{"response": "x"}], "options": {"normalise": "group"}},
            "options.normalise",
            "normalize",
            "ScoreOptions",
        ),
        ({"model": "qwen", "inputs": [{"response": "x"}]}, "inputs", None, "ScoreRequest"),
        ({"modle": "qwen", "items": [{"response": "x"}]}, "modle", "model", "ScoreRequest"),
    ],
)
async def test_an_unknown_request_field_names_the_fields_and_the_nearest(service, body, param, meant, model):
    _, http = service
    error = error_of(await http.post("/v1/score", json=body), 422, "invalid_request")
    assert error["param"] == param
    message = error["message"]
    assert f"unknown field {param.rsplit('.', 1)[-1]!r}" in message and f"{model} has the fields:" in message, message
    if meant:
        assert f"did you mean {meant!r}?" in message, message
    if model == "Item":
        assert "response, " in message and "reference" in message


async def test_404_and_405_name_the_route_or_method_meant(service):
    _, http = service
    body = {"model": "qwen", "items": [{"response": "x"}]}
    error = error_of(await http.post("/score", json=body), 404, "not_found")
    assert "did you mean /v1/score?" in error["message"], error
    error = error_of(await http.post("/v1/scor", json=body), 404, "not_found")
    assert "did you mean /v1/score?" in error["message"], error
    response = await http.get("/v1/score")
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert "use POST" in response.json()["error"]["message"]
    # A route's own 404 (an unknown model) keeps its message, with no route guessed.
    error = error_of(await http.post("/v1/score", json={**body, "model": "nope"}), 404, "not_found")
    assert "did you mean" not in error["message"]


async def test_a_rubric_s_judge_errors_name_the_judge_field(service):
    _, http = service
    body = {"items": [{"response": "x"}], "criteria": [{"name": "right", "text": "Is it right?"}]}
    error = error_of(await http.post("/v1/rubric", json={**body, "judge": "qwen"}), 422, "invalid_request")
    assert error["param"] == "judge" and error["message"].startswith("judge 'qwen' is of kind outcome"), error
    error = error_of(await http.post("/v1/rubric", json={**body, "judge": "nope"}), 404, "not_found")
    assert error["param"] == "judge" and error["message"].startswith("judge: model 'nope' is not served"), error
    error = error_of(
        await http.post("/v1/verify", json={"model": "qwen", "items": [{"response": "x"}]}), 422, "invalid_request"
    )
    assert "is of kind outcome; it answers" in error["message"] and "a outcome" not in error["message"], error
