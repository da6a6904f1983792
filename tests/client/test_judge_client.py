"""verify(), rubric() and compare() on both clients."""

from __future__ import annotations

import pytest

from rewardserve.client import AsyncRewardClient, RewardClient
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import CompareResponse, RubricResponse, VerifyResponse
from rewardserve.service.settings import Settings
from tests.harness import serve_in_process

ITEMS = [
    {"id": str(k), "prompt": f"{k}+{k}?", "response": str(2 * k + (k % 2)), "reference": str(2 * k)} for k in range(7)
]
CRITERIA = [
    {"name": "exact", "fn": "exact_match", "args": {"extract": "none"}},
    {"name": "judged", "text": "The answer is right."},
]


async def test_async_judge_calls_chunked_in_order(judge_lm, qwen3_rm):
    settings = Settings(
        models=[
            ModelSpec(name="judge", kind="verifier", source=str(judge_lm)),
            ModelSpec(name="rm", source=str(qwen3_rm)),
        ]
    )
    async with serve_in_process(settings) as (_, http):
        client = AsyncRewardClient("http://rewardserve", http_client=http, chunk_size=3)
        whole = client.with_options(chunk_size=100)
        v = await client.verify("judge", ITEMS)
        assert isinstance(v, VerifyResponse) and [r.id for r in v.results] == [i["id"] for i in ITEMS]
        assert [r.score for r in v.results] == pytest.approx(
            [r.score for r in (await whole.verify("judge", ITEMS)).results]
        )
        r = await client.rubric(ITEMS, criteria=CRITERIA, judge="judge")
        assert isinstance(r, RubricResponse) and r.judge == "judge"
        assert [x.criteria[0].score for x in r.results] == [1.0 if k % 2 == 0 else 0.0 for k in range(7)]
        formula = await client.rubric(
            ITEMS[:2], criteria=CRITERIA, judge="judge", aggregation={"mode": "formula", "formula": "exact * judged"}
        )
        assert formula.results[0].score == pytest.approx(formula.results[0].criteria[1].score)
        c = await client.compare("rm", [{"prompt": "q", "responses": ["a", "b", "c"]}] * 4)
        assert isinstance(c, CompareResponse) and len(c.results) == 4
        assert all(res.preference[0][1] + res.preference[1][0] == pytest.approx(1.0) for res in c.results)


def test_sync_rubric_against_uvicorn(live_service):
    with RewardClient(live_service, chunk_size=2) as client:
        out = client.rubric(
            ITEMS,
            criteria=[CRITERIA[0], {"name": "digits", "fn": "regex", "args": {"pattern": "^\\d+$"}}],
            aggregation={"mode": "all"},
        )
        assert [r.score for r in out.results] == [1.0 if k % 2 == 0 else 0.0 for k in range(7)]
