"""score_steps() on both clients."""

from __future__ import annotations

import random

import pytest

from rewardserve.client import AsyncRewardClient, RewardClient
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import StepsResponse
from rewardserve.service.settings import Settings
from tests.builders import random_text
from tests.harness import serve_in_process


def items(n_groups=3, per_group=3):
    rng = random.Random(4)
    return [
        {
            "id": f"{g}.{k}",
            "group_id": f"g{g}",
            "prompt": random_text(rng, 5),
            "steps": [random_text(rng, 4) for _ in range(rng.randint(1, 5))],
        }
        for g in range(n_groups)
        for k in range(per_group)
    ]


async def test_async_score_steps_chunked_keeps_groups_and_order(qwen2_prm):
    settings = Settings(models=[ModelSpec(name="prm", source=str(qwen2_prm))], builtin_rules=False)
    async with serve_in_process(settings) as (_, http):
        client = AsyncRewardClient("http://rewardserve", http_client=http)
        data = items()
        whole = await client.score_steps("prm", data, shaping="group")
        chunked = await client.with_options(chunk_size=2).score_steps("prm", data, shaping="group")
        assert isinstance(chunked, StepsResponse)
        assert [r.id for r in chunked.results] == [d["id"] for d in data]
        for a, b, d in zip(whole.results, chunked.results, data):
            assert len(b.step_scores) == len(d["steps"])
            assert b.step_scores == pytest.approx(a.step_scores, abs=1e-6)
            assert b.step_rewards == pytest.approx(a.step_rewards, abs=1e-5)
        with pytest.raises(ValueError):
            await client.score_steps("prm", data, shapping="group")  # typo caught locally


def test_sync_score_steps_against_uvicorn(live_service):
    with RewardClient(live_service) as client:
        out = client.score_steps("prm", items(1, 2), aggregate="last", threshold=0.5)
        for result in out.results:
            assert result.valid and result.score == result.step_scores[-1]
            assert result.aggregates.keys() == {"min", "prod", "mean", "last", "sum"}
