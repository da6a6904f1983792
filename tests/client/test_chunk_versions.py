"""A chunked call scored by one version (client/_core.py ``versions_differ``): a new
version served in the middle of a call has the chunks the old one scored sent again,
and a canary's share that keeps them mixed leaves ``model_version`` None, with a
warning naming the versions. Against the real service in process."""

from __future__ import annotations

import httpx
import pytest

from rewardserve.client import AsyncRewardClient
from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.builders import build_sequence_classifier
from tests.harness import serve_in_process

ADMIN = {"authorization": "Bearer admin-key"}
ITEMS = [{"id": f"i{k}", "prompt": f"What is {k}+1?", "response": f"{k + 1}"} for k in range(12)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("chunk_versions")
    return build_sequence_classifier(root / "v1", seed=0), build_sequence_classifier(root / "v2", seed=1)


def settings(first) -> Settings:
    return Settings(
        builtin_rules=False,
        api_keys=["score-key"],
        admin_keys=["admin-key"],
        compile=False,
        models=[ModelSpec(name="rm", source=str(first), version="v1", options={"score_cache_size": 0})],
    )


async def test_chunks_an_old_version_scored_are_scored_again_by_the_new(checkpoints):
    first, second = checkpoints
    async with serve_in_process(settings(first)) as (app, http):
        answered = 0

        async def swap_after_the_second_chunk(response: httpx.Response) -> None:
            nonlocal answered
            if response.request.url.path == "/v1/score":
                answered += 1
                if answered == 2:  # a trainer pushes its new RM between two chunks of a call
                    load = {"source": str(second), "version": "v2"}
                    swapped = await http.post("/v1/admin/models/rm/load", json=load, headers=ADMIN)
                    assert swapped.status_code == 200, swapped.text

        transport = httpx.ASGITransport(app=app)
        hooked = httpx.AsyncClient(
            transport=transport, base_url="http://rewardserve", event_hooks={"response": [swap_after_the_second_chunk]}
        )
        async with hooked:
            client = AsyncRewardClient(
                "http://rewardserve", api_key="score-key", http_client=hooked, chunk_size=3, max_concurrency=1
            )
            scored = await client.score("rm", ITEMS)
        assert answered == 4 + 2  # four chunks, the first two again
        whole = await AsyncRewardClient("http://rewardserve", api_key="score-key", http_client=http).score("rm", ITEMS)
        assert whole.model_version == scored.model_version == "v2" and not scored.warnings
        assert [r.id for r in scored.results] == [item["id"] for item in ITEMS]
        assert [r.score for r in scored.results] == pytest.approx([r.score for r in whole.results], abs=1e-5)


async def test_a_canarys_share_that_keeps_chunks_mixed_names_no_version(checkpoints):
    first, second = checkpoints
    async with serve_in_process(settings(first)) as (_, http):
        canary = {"source": str(second), "version": "v2", "percent": 50}
        started = await http.post("/v1/admin/models/rm/canary", json=canary, headers=ADMIN)
        assert started.status_code == 200, started.text
        client = AsyncRewardClient(
            "http://rewardserve", api_key="score-key", http_client=http, chunk_size=3, max_concurrency=1
        )
        scored = await client.score("rm", ITEMS)  # every other request to the canary: mixed each round
        assert scored.model_version is None
        assert scored.warnings == ["this call's chunks were scored by versions v1, v2 (a canary's share)"]
        one = await client.score("rm", ITEMS[:3])  # one chunk: one version, named
        assert one.model_version in {"v1", "v2"} and not one.warnings
