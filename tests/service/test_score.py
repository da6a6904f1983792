"""POST /v1/score end to end, in process: correct scores under concurrent batching."""

from __future__ import annotations

import asyncio
import random
import statistics

import httpx
import pytest
import pytest_asyncio

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.builders import random_text, reference_outcome_scores
from tests.harness import metric, serve_in_process


@pytest_asyncio.fixture(scope="module")
async def service(qwen3_rm, llama_rm):
    settings = Settings(
        models=[
            # The GPU batch policy (the CPU default keeps batches small and unpadded), so
            # mixed lengths from different requests land in shared batches.
            ModelSpec(name="qwen", source=str(qwen3_rm), max_wait_ms=50, max_padding_ratio=1.0, max_batch_tokens=16384),
            ModelSpec(
                name="llama", source=str(llama_rm), max_wait_ms=50, max_padding_ratio=1.0, max_batch_tokens=16384
            ),
        ]
    )
    async with serve_in_process(settings) as (app, http):
        yield app, http


def mixed_conversations(n: int, seed: int) -> list[list[dict]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        # Lengths from a few tokens to a few hundred, so batches really pad.
        out.append(
            [
                {"role": "system", "content": "be brief"} if rng.random() < 0.3 else None,
                {"role": "user", "content": random_text(rng, rng.randint(1, 40))},
                {"role": "assistant", "content": random_text(rng, rng.choice([1, 5, 20, 60, 150]))},
            ]
        )
        out[-1] = [m for m in out[-1] if m]
    return out


async def post_score(http, model, items, **options):
    body = {"model": model, "items": items}
    if options:
        body["options"] = options
    response = await http.post("/v1/score", json=body)
    assert response.status_code == 200, response.text
    return response


@pytest.mark.parametrize(("model", "fixture"), [("qwen", "qwen3_rm"), ("llama", "llama_rm")])
async def test_fifty_items_in_ten_concurrent_requests_equal_reference(service, model, fixture, request):
    app, http = service
    convs = mixed_conversations(50, seed=11)
    expected = [r[0] for r in reference_outcome_scores(request.getfixturevalue(fixture), convs)]
    items = [{"id": f"i{k}", "messages": c} for k, c in enumerate(convs)]
    before = metric(app.state.svc.metrics.render().decode(), "rewardserve_batches_total", model=model)

    chunks = [items[k : k + 5] for k in range(0, 50, 5)]
    responses = await asyncio.gather(*(post_score(http, model, chunk) for chunk in chunks))

    got = {}
    for response in responses:
        for result in response.json()["results"]:
            assert result["valid"] is True
            got[result["id"]] = result["score"]
    assert [got[f"i{k}"] for k in range(50)] == pytest.approx(expected, abs=1e-4)
    batches = metric(app.state.svc.metrics.render().decode(), "rewardserve_batches_total", model=model) - before
    # Ten concurrent requests shared forward passes.
    assert 1 <= batches < len(chunks)


async def test_each_item_alone_scores_as_in_a_mixed_batch(service):
    _, http = service
    convs = mixed_conversations(12, seed=12)
    items = [{"messages": c} for c in convs]
    together = (await post_score(http, "qwen", items)).json()["results"]
    for item, mixed in zip(items, together):
        alone = (await post_score(http, "qwen", [item])).json()["results"][0]
        assert alone["score"] == pytest.approx(mixed["score"], abs=1e-4)


async def test_order_ids_usage_and_timing_headers(service):
    _, http = service
    items = [{"id": f"x{k}", "prompt": "q", "response": "a " * (k + 1)} for k in range(7)]
    response = await post_score(http, "qwen", items)
    body = response.json()
    assert [r["id"] for r in body["results"]] == [f"x{k}" for k in range(7)]
    assert body["usage"]["items"] == 7
    assert body["usage"]["prompt_tokens"] == sum(r["tokens"] for r in body["results"])
    assert float(response.headers["x-queue-time"]) >= 0
    assert float(response.headers["x-inference-time"]) > 0


async def test_group_normalisation_gives_grpo_advantages(service):
    _, http = service
    convs = mixed_conversations(6, seed=13)
    items = [{"group_id": "a" if k < 4 else "b", "messages": c} for k, c in enumerate(convs)]
    items.append({"messages": convs[0]})  # no group: a group of one
    results = (await post_score(http, "qwen", items, normalize="group")).json()["results"]
    for group in (range(0, 4), range(4, 6)):
        scores = [results[k]["score"] for k in group]
        mean, std = statistics.mean(scores), statistics.stdev(scores)
        for k in group:
            assert results[k]["advantage"] == pytest.approx((results[k]["score"] - mean) / (std + 1e-6))
    assert results[6]["advantage"] == 0.0
    plain = (await post_score(http, "qwen", items[:2])).json()["results"]
    assert all(r["advantage"] is None for r in plain)


async def test_group_normalisation_that_sees_no_group_says_so(service, caplog):
    """Completions sent without group_id (what TRL's reward functions did): every
    advantage is 0, and the answer and the log (once) say why."""
    _, http = service
    convs = mixed_conversations(4, seed=14)
    grouped = (
        await post_score(http, "qwen", [{"group_id": "g", "messages": c} for c in convs], normalize="group")
    ).json()
    assert grouped["warnings"] == []
    for _ in range(2):
        with caplog.at_level("WARNING", logger="rewardserve.service.api._usecase"):
            body = (await post_score(http, "qwen", [{"messages": c} for c in convs], normalize="group")).json()
        assert [r["advantage"] for r in body["results"]] == [0.0] * 4
        (warning,) = body["warnings"]
        assert "each of the 4 item(s) is a group of its own" in warning and "group_id" in warning
    logged = [r for r in caplog.records if "is a group of its own" in r.getMessage()]
    assert len(logged) == 1 and "model qwen" in logged[0].getMessage()


async def test_sigmoid_activation(service):
    _, http = service
    item = {"prompt": "q", "response": "the answer is 3"}
    raw = (await post_score(http, "qwen", [item])).json()["results"][0]["score"]
    squashed = (await post_score(http, "qwen", [item], activation="sigmoid")).json()["results"][0]["score"]
    assert squashed == pytest.approx(1 / (1 + 2.718281828459045**-raw), abs=1e-6)


async def test_rule_models_beside_weights(service):
    _, http = service
    items = [
        {"response": r"\boxed{\frac{1}{3}}", "reference": "1/3"},
        {"response": r"\boxed{2}", "reference": "1/3"},
    ]
    results = (await post_score(http, "math", items)).json()["results"]
    assert [r["score"] for r in results] == [1.0, 0.0]


async def test_models_health_ready_metrics(service):
    _, http = service
    # Its own request: with tests handed out one by one, this module's others may run elsewhere.
    await post_score(http, "qwen", [{"prompt": "Hi", "response": "Hello"}])
    listed = (await http.get("/v1/models")).json()
    cards = listed["data"]
    by_name = {c["name"]: c for c in cards}
    assert listed["object"] == "list" and all(c["object"] == "model" and c["id"] == c["name"] for c in cards)
    assert all(isinstance(c["created"], int) and c["created"] > 0 and c["owned_by"] for c in cards)
    assert by_name["qwen"]["kind"] == "outcome" and by_name["qwen"]["backend"] == "transformers"
    assert by_name["qwen"]["max_tokens"] == 512 and by_name["qwen"]["ready"]
    assert by_name["math"]["kind"] == "rule"
    assert (await http.get("/health")).json()["status"] == "ok"
    ready = await http.get("/ready")
    assert ready.status_code == 200 and ready.json()["models"]["qwen"] is True
    text = (await http.get("/metrics")).text
    for name in (
        "rewardserve_requests_total",
        "rewardserve_request_duration_seconds",
        "rewardserve_queue_items",
        "rewardserve_batch_size",
        "rewardserve_batch_tokens",
        "rewardserve_batch_padding_ratio",
        "rewardserve_items_scored_total",
        "rewardserve_forward_duration_seconds",
    ):
        assert name in text
    assert metric(text, "rewardserve_requests_total", route="/v1/score", model="qwen", status="200") > 0
    assert metric(text, "rewardserve_items_scored_total", model="qwen", valid="true") > 0
    assert metric(text, "rewardserve_reward_score_count", model="qwen") > 0  # reward health


async def test_openai_sdk_lists_the_models(service):
    from openai import AsyncOpenAI

    app, _ = service
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rewardserve")
    client = AsyncOpenAI(base_url="http://rewardserve/v1", api_key="unused", http_client=http)
    page = await client.models.list()
    ids = [m.id for m in page.data]
    assert "qwen" in ids and "math" in ids
    qwen = next(m for m in page.data if m.id == "qwen")
    assert qwen.object == "model" and qwen.owned_by == "rewardserve" and qwen.created > 0
    await http.aclose()
