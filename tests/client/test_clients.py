"""Both clients against the live service: in process (ASGI) and a real uvicorn process."""

from __future__ import annotations

import asyncio
import random
import time

import httpx
import pytest
import pytest_asyncio

from rewardserve.client import (
    AsyncRewardClient,
    AuthenticationError,
    NotFoundError,
    PayloadTooLargeError,
    RewardClient,
    RewardServeError,
)
from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.builders import random_text
from tests.harness import item_of_tokens, metric, serve_in_process


def grpo_items(n_groups: int, per_group: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    items = []
    for g in range(n_groups):
        prompt = random_text(rng, rng.randint(3, 20))
        for k in range(per_group):
            items.append(
                {
                    "id": f"{g}-{k}",
                    "group_id": f"g{g}",
                    "prompt": prompt,
                    "response": random_text(rng, rng.randint(1, 40)),
                }
            )
    rng.shuffle(items)  # groups interleaved, as trainers may send them
    return items


@pytest_asyncio.fixture(scope="module")
async def live(qwen3_rm):
    settings = Settings(
        models=[
            ModelSpec(name="qwen", source=str(qwen3_rm)),
            ModelSpec(
                name="slowq", source=str(qwen3_rm), max_wait_ms=1500, max_queue_tokens=300, max_batch_tokens=100_000
            ),
        ],
        api_keys=["k1"],
    )
    async with serve_in_process(settings) as (app, http):
        yield app, http


def async_client(http: httpx.AsyncClient, **kw) -> AsyncRewardClient:
    return AsyncRewardClient("http://rewardserve", api_key="k1", http_client=http, **kw)


async def test_async_client_chunked_equals_one_request(live):
    _, http = live
    items = grpo_items(6, 5)
    whole = await async_client(http, chunk_size=1000).score("qwen", items, normalize="group")
    chunked = await async_client(http, chunk_size=7, max_concurrency=3).score("qwen", items, normalize="group")
    assert [r.id for r in chunked.results] == [it["id"] for it in items]
    for a, b in zip(whole.results, chunked.results):
        assert a.score == pytest.approx(b.score, abs=1e-5)
        # Groups were never split across chunks, so advantages agree too.
        assert a.advantage == pytest.approx(b.advantage, abs=1e-4)
    assert chunked.usage.items == len(items) == whole.usage.items
    assert chunked.usage.prompt_tokens == whole.usage.prompt_tokens


async def test_async_client_models_health_and_typed_errors(live, qwen3_rm):
    _, http = live
    live_items = [item_of_tokens(qwen3_rm, 130, word) for word in ("apple", "pear", "plum")]
    client = async_client(http)
    names = {m.name for m in (await client.models()).data}
    assert {"qwen", "math", "exact_match"} <= names
    assert (await client.health()).status == "ok" and await client.ready()
    with pytest.raises(NotFoundError):
        await client.score("nope", [{"response": "x"}])
    # The client validates against the same protocol before sending anything.
    with pytest.raises(ValueError, match="activation"):
        await client.score("qwen", [{"response": "x"}], activation="tanh")  # type: ignore[arg-type]
    with pytest.raises(AuthenticationError):
        await async_client(http).with_options(api_key="wrong").score("qwen", [{"response": "x"}])
    with pytest.raises(PayloadTooLargeError):
        await client.score("slowq", live_items)


async def test_async_client_retries_a_real_429(live, qwen3_rm):
    app, http = live
    client = async_client(http, max_retries=5)
    item = item_of_tokens(qwen3_rm, 130)  # two fit the 300-token queue, three do not
    other = item_of_tokens(qwen3_rm, 130, "pear")
    first = asyncio.create_task(client.score("slowq", [item, other]))
    await asyncio.sleep(0.3)
    start = time.monotonic()
    second = await client.score("slowq", [item])  # refused with 429, retried after retry-after
    assert second.results[0].valid and time.monotonic() - start >= 1.0
    assert (await first).results[0].score == pytest.approx(second.results[0].score, abs=1e-5)
    text = app.state.svc.metrics.render().decode()
    assert metric(text, "rewardserve_requests_total", route="/v1/score", model="slowq", status="429") >= 1


@pytest.fixture
def server(live_service):
    return live_service


def test_sync_client_against_uvicorn(server):
    items = grpo_items(10, 8, seed=3)
    with RewardClient(server, chunk_size=9, max_concurrency=4) as client:
        chunked = client.score("qwen", items, normalize="group")
        whole = client.with_options(chunk_size=1000).score("qwen", items, normalize="group")
        assert [r.id for r in chunked.results] == [it["id"] for it in items]
        for a, b in zip(chunked.results, whole.results):
            assert a.score == pytest.approx(b.score, abs=1e-5)
            assert a.advantage == pytest.approx(b.advantage, abs=1e-4)
        math = client.score(
            "math",
            [{"response": r"\boxed{\frac{1}{3}}", "reference": "1/3"}, {"response": r"\boxed{2}", "reference": "1/3"}],
        )
        assert [r.score for r in math.results] == [1.0, 0.0], [r.error for r in math.results]
        assert client.ready() and client.health().status == "ok"


def test_work_of_a_client_that_hung_up_is_dropped(server):
    """The 'lazy' model waits 2 s for company; a client that gives up after 0.3 s is
    gone by then, and its item is dropped rather than computed."""

    def dropped() -> float:
        return metric(httpx.get(server + "/metrics").text, "rewardserve_items_dropped_total", model="lazy")

    before = dropped()
    client = RewardClient(server, timeout=0.3, max_retries=0)
    with pytest.raises(RewardServeError):
        client.score("lazy", [{"response": "abandoned"}])
    deadline = time.monotonic() + 10
    while dropped() < before + 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert dropped() == before + 1
    # The model still serves the next caller.
    assert RewardClient(server).score("lazy", [{"response": "kept"}]).results[0].valid


async def test_client_retries_a_real_503_then_raises(tmp_path):
    """A model that failed to load answers 503; the client retries it, then gives up
    with the typed error."""
    from rewardserve.client import ServiceUnavailableError

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"architectures": ["Qwen3ForSequenceClassification"]}')
    settings = Settings(models=[ModelSpec(name="broken", source=str(broken))], builtin_rules=False)
    async with serve_in_process(settings) as (app, http):
        client = AsyncRewardClient("http://rewardserve", http_client=http, max_retries=2)
        client = client.with_options(initial_backoff_s=0.01)
        with pytest.raises(ServiceUnavailableError, match="failed to load"):
            await client.score("broken", [{"response": "x"}])
        text = app.state.svc.metrics.render().decode()
        assert metric(text, "rewardserve_requests_total", route="/v1/score", status="503") == 3
        assert (await http.get("/health")).status_code == 503
        assert (await http.get("/ready")).json()["status"] == "failed"
