"""One table over every scoring route, native and compat, each sent as a tenant: through
the application layer each charges exactly the items it scored, sends the timing
headers and the request id, leaves one request log line, is seen by reward health (and
by shadow scoring where the route is a model's reward per item), and answers an error
in the one shape."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.harness import metric, serve_in_process

KEY = "key-of-the-tenant"
AS_TENANT = {"authorization": f"Bearer {KEY}"}
OPERATOR = {"authorization": "Bearer key-of-the-operator"}


@dataclass(frozen=True)
class Route:
    path: str
    body: dict
    items: int  # what it scores (a compare's responses)
    health: str | None  # the model whose reward health sees it
    shadowed: bool  # its model's shadow candidate scores the same items
    bad: dict  # a body it refuses


ITEM = {"prompt": "What is 2+2?", "response": "It is 4."}
ROUTES = [
    Route(
        "/v1/score",
        {"model": "rm", "items": [ITEM, {**ITEM, "response": "5"}]},
        2,
        "rm",
        True,
        {"model": "nobody", "items": [ITEM]},
    ),
    Route(
        "/v1/score/steps",
        {"model": "prm", "items": [{"prompt": "2+2?", "steps": ["2+2", "= 4"]}]},
        1,
        "prm",
        True,
        {"model": "prm", "items": []},
    ),
    Route(
        "/pooling",
        {"model": "prm", "input": "2+2<extra_0>= 4<extra_0>"},
        1,
        None,
        False,
        {"model": "nobody", "input": "x"},
    ),
    Route(
        "/v1/verify",
        {"model": "judge", "items": [{**ITEM, "reference": "4"}]},
        1,
        "judge",
        False,
        {"model": "rm", "items": [ITEM]},
    ),
    Route(
        "/v1/rubric",
        {
            "judge": "judge",
            "items": [ITEM] * 4,
            "criteria": [
                {"name": "q", "text": "Is it right?"},
                {"name": "m", "fn": "exact_match", "args": {"reference": "4"}},
                {"name": "r", "model": "rm"},  # a served model's score: its shadow sees it
            ],
        },
        4,
        "rubric",
        True,
        {"items": [ITEM], "criteria": [{"name": "q", "text": "Is it right?"}]},
    ),
    Route(
        "/v1/compare",
        {"model": "rm", "items": [{"prompt": "2+2?", "responses": ["4", "5"]}]},
        2,
        "rm",
        True,
        {"model": "rm", "items": [{"prompt": "2+2?", "responses": ["4"]}]},
    ),
    Route("/classify", {"model": "rm", "input": ["2+2 is 4"]}, 1, "rm", True, {"model": "rm", "input": []}),
    Route("/v1/embeddings", {"model": "rm", "input": ["2+2 is 4"]}, 1, "rm", True, {"model": "rm", "input": []}),
    Route("/get_reward?model=rm", {"query": ["2+2 is 4"]}, 1, "rm", True, {"query": ["a"], "prompts": ["a", "b"]}),
]


@pytest.fixture(scope="module")
async def service(tmp_path_factory, qwen3_rm, qwen2_prm, judge_lm):
    tenants = tmp_path_factory.mktemp("every_route") / "tenants.yaml"
    tenants.write_text(f"tenants:\n  - {{name: t, keys: [{KEY}]}}\n")
    settings = Settings(
        tenants_file=tenants,
        api_keys=["key-of-the-operator"],
        builtin_rules=False,
        models=[
            ModelSpec(name="rm", source=str(qwen3_rm), shadow={"model": "rm_next", "fraction": 1.0}),
            ModelSpec(name="rm_next", source=str(qwen3_rm)),
            ModelSpec(name="prm", source=str(qwen2_prm), shadow={"model": "prm_next", "fraction": 1.0}),
            ModelSpec(name="prm_next", source=str(qwen2_prm)),
            ModelSpec(name="judge", kind="verifier", source=str(judge_lm)),
        ],
    )
    async with serve_in_process(settings) as (app, http):
        yield app, http


async def shadowed_items(http, model: str) -> int:
    report = await http.get(f"/v1/models/{model}/shadow", headers=AS_TENANT)
    return report.json()["items"] if report.status_code == 200 else 0


@pytest.mark.parametrize("route", ROUTES, ids=[r.path for r in ROUTES])
async def test_every_route_gets_what_every_route_must(service, route, caplog):
    app, http = service
    caplog.set_level(logging.INFO, "rewardserve.requests")
    before = (await http.get("/metrics", headers=OPERATOR)).text
    shadow_model = route.body.get("model") or "rm"
    shadow_before = await shadowed_items(http, shadow_model)
    rid = "route" + "".join(c if c.isalnum() else "-" for c in route.path)
    response = await http.post(route.path, json=route.body, headers={**AS_TENANT, "x-request-id": rid})
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == rid
    assert float(response.headers["x-queue-time"]) >= 0 and float(response.headers["x-inference-time"]) >= 0
    await app.state.svc.shadowing.settled()  # the shadows this request started have run
    after = (await http.get("/metrics", headers=OPERATOR)).text
    charged = metric(after, "rewardserve_tenant_items_total", tenant="t") - metric(
        before, "rewardserve_tenant_items_total", tenant="t"
    )
    assert charged == route.items
    logged = [r for r in caplog.records if r.name == "rewardserve.requests" and r.fields.get("request_id") == rid]
    assert len(logged) == 1 and logged[0].fields["tenant"] == "t" and logged[0].fields["status"] == 200
    if route.health is not None:
        seen = metric(after, "rewardserve_reward_score_count", model=route.health) - metric(
            before, "rewardserve_reward_score_count", model=route.health
        )
        assert seen >= 1, route.path
    if route.shadowed:
        assert await shadowed_items(http, shadow_model) > shadow_before, route.path
    refused = await http.post(route.path, json=route.bad, headers=AS_TENANT)
    assert refused.status_code in (404, 413, 422), refused.text
    error = refused.json()["error"]
    assert set(error) <= {"type", "message", "param"} and error["type"] and error["message"]
