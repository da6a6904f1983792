"""Every request leaves one log line (id, route, model, items, tokens, queue and
inference time, status, the reason of a refusal) and carries its id back; the docs work
offline and sit behind the key; CORS only for the origins the settings allow."""

from __future__ import annotations

import logging

import pytest

from rewardserve.service.settings import Settings
from tests.harness import serve_in_process

KEY = "sk-log-test"


@pytest.fixture(scope="module")
async def service():
    settings = Settings(api_keys=[KEY], cors_origins=["https://dash.example"])
    async with serve_in_process(settings) as (app, http):
        http.headers["authorization"] = f"Bearer {KEY}"
        yield http


def lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "rewardserve.requests"]


async def test_the_callers_id_is_kept_and_the_line_says_what_the_request_did(service, caplog):
    caplog.set_level(logging.INFO, "rewardserve.requests")
    items = [{"response": r"\boxed{2}", "reference": "2"}, {"response": "3", "reference": "2"}]
    response = await service.post(
        "/v1/score", json={"model": "math", "items": items}, headers={"x-request-id": "run-4/step-12"}
    )
    assert response.status_code == 200 and response.headers["x-request-id"] == "run-4/step-12"
    (record,) = [r for r in lines(caplog) if r.fields["request_id"] == "run-4/step-12"]
    fields = record.fields
    assert fields["route"] == "/v1/score" and fields["model"] == "math" and fields["items"] == 2
    assert fields["status"] == 200 and fields["queue_ms"] >= 0 and fields["inference_ms"] >= 0
    assert "request_id=run-4/step-12" in record.getMessage() and "items=2" in record.getMessage()


async def test_an_id_is_made_when_none_or_a_forged_one_is_sent(service, caplog):
    caplog.set_level(logging.INFO, "rewardserve.requests")
    made = (await service.get("/v1/models")).headers["x-request-id"]
    forged = (
        await service.get("/v1/models", headers={"x-request-id": "a\u00e9 b=1 status=200".encode("latin-1")})
    ).headers["x-request-id"]
    assert len(made) == 32 and len(forged) == 32 and made != forged
    assert all("status=200 " not in r.fields["request_id"] for r in lines(caplog))


async def test_a_refusal_logs_its_reason(service, caplog):
    caplog.set_level(logging.INFO, "rewardserve.requests")
    response = await service.post("/v1/score", json={"model": "math", "items": []})
    assert response.status_code == 422
    (record,) = [r for r in lines(caplog) if r.fields["request_id"] == response.headers["x-request-id"]]
    assert record.fields["status"] == 422 and "items" in record.fields["reason"]
    unknown = await service.post("/v1/score", json={"model": "nope", "items": [{"response": "x"}]})
    (record,) = [r for r in lines(caplog) if r.fields["request_id"] == unknown.headers["x-request-id"]]
    assert record.fields["status"] == 404 and "'nope' is not served" in record.fields["reason"]


async def test_docs_are_served_from_here_behind_the_key(service):
    page = await service.get("/docs")
    assert page.status_code == 200
    assert "cdn" not in page.text and "/docs/assets/swagger-ui-bundle.js" in page.text
    script = await service.get("/docs/assets/swagger-ui-bundle.js")
    assert script.status_code == 200 and len(script.content) > 100_000
    assert (await service.get("/openapi.json")).json()["info"]["title"] == "rewardserve"
    for path in ("/docs", "/docs/assets/swagger-ui-bundle.js", "/openapi.json"):
        assert (await service.get(path, headers={"authorization": ""})).status_code == 401


async def test_cors_answers_only_the_allowed_origin(service):
    preflight = {"access-control-request-method": "POST", "access-control-request-headers": "content-type"}
    allowed = await service.options(
        "/v1/score", headers={"origin": "https://dash.example", **preflight, "authorization": ""}
    )
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://dash.example"
    other = await service.options(
        "/v1/score", headers={"origin": "https://evil.example", **preflight, "authorization": ""}
    )
    assert "access-control-allow-origin" not in other.headers
    answered = await service.post(
        "/v1/score",
        json={"model": "math", "items": [{"response": "1", "reference": "1"}]},
        headers={"origin": "https://dash.example"},
    )
    assert answered.headers["access-control-allow-origin"] == "https://dash.example"
    assert "x-request-id" in answered.headers["access-control-expose-headers"]


async def test_without_cors_origins_no_cors_headers():
    async with serve_in_process(Settings(docs=False)) as (_, http):
        response = await http.get("/v1/models", headers={"origin": "https://dash.example"})
        assert "access-control-allow-origin" not in response.headers
        assert (await http.get("/docs")).status_code == 404
