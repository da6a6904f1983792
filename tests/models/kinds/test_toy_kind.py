"""A new kind is one file: this one, registered here, served through the real service
with no edit to service/. It scores a response by its length; the service batches it,
answers duplicates once, normalises groups and compares responses for it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import Field

from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.errors import ItemError
from rewardserve.models.kinds import register_kind
from rewardserve.models.options import KindOptions, OptionsError
from rewardserve.models.plan import Job, Unit, UnitOutput
from rewardserve.models.reward_model import RewardModel, work_key
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import Item, ItemResult, ScoreOptions
from rewardserve.service.settings import Settings
from tests.harness import serve_in_process


class ToyOptions(KindOptions):
    per_char: float = Field(1.0, description="Reward per character.")


@register_kind("toy_length")
class ToyLengthModel(RewardModel):
    Options = ToyOptions
    options: ToyOptions
    runs_torch = False
    endpoints = frozenset({"score", "compare"})
    default_policy = BatchPolicy(max_batch_tokens=1000, max_wait_ms=20.0, pads=False)
    batches: list[int] = []

    def load(self) -> None:
        pass

    def prepare(self, items: list[Item], options: ScoreOptions) -> list[Job[Any] | ItemError]:
        out: list[Job[Any] | ItemError] = []
        for item in items:
            text = item.response_text()
            out.append(Job(1, text, key=work_key([], text)) if text else ItemError("nothing to measure"))
        return out

    def run(self, units: list[Unit[Any]]) -> list[UnitOutput]:
        type(self).batches.append(len(units))
        return [[ItemResult(score=len(unit.payload.payload) * self.options.per_char)] for unit in units]


@pytest.fixture(scope="module")
async def service():
    settings = Settings(
        builtin_rules=False, models=[ModelSpec(name="toy", kind="toy_length", source="toy", options={"per_char": 0.5})]
    )
    async with serve_in_process(settings) as (app, http):
        yield http


async def test_the_service_scores_a_kind_it_has_never_seen(service):
    items = [
        {"prompt": "p", "response": "abcd", "group_id": "g"},
        {"prompt": "p", "response": "ab", "group_id": "g"},
        {"prompt": "p", "response": "abcd", "group_id": "g"},
        {"prompt": "p", "response": ""},
    ]
    ToyLengthModel.batches.clear()
    body = (
        await service.post("/v1/score", json={"model": "toy", "items": items, "options": {"normalize": "group"}})
    ).json()
    scores = [r["score"] for r in body["results"]]
    assert scores[:3] == [2.0, 1.0, 2.0] and body["results"][3]["valid"] is False
    assert body["results"][3]["error"] == "nothing to measure"
    assert sum(ToyLengthModel.batches) == 2  # the duplicate was computed once
    advantages = [r["advantage"] for r in body["results"][:3]]
    assert advantages[0] == advantages[2] > 0 > advantages[1]


async def test_it_is_listed_under_its_own_kind(service):
    cards = {card["id"]: card for card in (await service.get("/v1/models")).json()["data"]}
    assert cards["toy"]["kind"] == "toy_length"
    assert cards["toy"]["ready"] is True


async def test_compare_comes_with_the_kind(service):
    body = (
        await service.post("/v1/compare", json={"model": "toy", "items": [{"prompt": "p", "responses": ["a", "abc"]}]})
    ).json()
    (result,) = body["results"]
    assert result["ranking"] == [1, 0] and result["preference"][1][0] > 0.5


def test_its_options_are_typed_like_every_kind_s():
    from rewardserve.models.kinds import build_model

    with pytest.raises(OptionsError, match="did you mean 'per_char'"):
        build_model(ModelSpec(name="toy", kind="toy_length", source="toy", options={"per_chr": 1}))
