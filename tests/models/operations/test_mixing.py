"""Rubrics that mix rules, judge questions and served models' scores, each put on its
scale, with escalation to an expensive model; through the real service, in process."""

from __future__ import annotations

import asyncio
import statistics

import pytest
import pytest_asyncio

from rewardserve.models.operations.mixing import pick_escalated
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import Escalation, Item, ItemResult
from rewardserve.service.settings import Settings
from tests.builders import reference_outcome_scores
from tests.harness import post
from tests.models.kinds.test_verifier import direct_p_yes


@pytest_asyncio.fixture(scope="module")
async def service(judge_lm, qwen3_rm):
    from tests.harness import serve_in_process

    settings = Settings(
        models=[
            ModelSpec(name="judge", kind="verifier", source=str(judge_lm)),
            ModelSpec(name="rm", source=str(qwen3_rm)),
            ModelSpec(name="rm_running", source=str(qwen3_rm)),
        ]
    )
    async with serve_in_process(settings) as (app, http):
        yield app, http


def items(n: int, group: str | None = None) -> list[dict]:
    return [
        {
            "prompt": "What is 6 times 7?",
            "response": f"It is {40 + i}. \\boxed{{{40 + i}}}",
            "reference": "42",
            **({"group_id": group} if group else {}),
        }
        for i in range(n)
    ]


CRITERIA = [
    {"name": "correct", "fn": "math_equiv", "weight": 2.0},
    {"name": "rm", "model": "rm"},
    {"name": "helpful", "text": "Is the answer correct?"},
]


async def test_components_equal_each_source_called_alone(service, qwen3_rm, judge_lm):
    _, http = service
    batch = items(4)
    out = await post(http, "/v1/rubric", {"judge": "judge", "items": batch, "criteria": CRITERIA})
    alone = await post(http, "/v1/score", {"model": "rm", "items": batch})
    direct = reference_outcome_scores(
        qwen3_rm,
        [[{"role": "user", "content": it["prompt"]}, {"role": "assistant", "content": it["response"]}] for it in batch],
    )
    rubric_alone = await post(http, "/v1/rubric", {"judge": "judge", "items": batch, "criteria": [CRITERIA[2]]})
    for i, (result, single) in enumerate(zip(out["results"], alone["results"])):
        components = result["components"]
        assert set(components) == {"correct", "rm", "helpful"}
        assert components["rm"] == pytest.approx(single["score"], abs=1e-5)
        assert components["rm"] == pytest.approx(direct[i][0], abs=1e-4)
        assert components["correct"] == (1.0 if i == 2 else 0.0)
        assert components["helpful"] == pytest.approx(rubric_alone["results"][i]["score"], abs=1e-5)
        by_name = {c["name"]: c for c in result["criteria"]}
        assert by_name["rm"]["raw"] == components["rm"]  # normalize none: raw as aggregated
        mean = (2.0 * components["correct"] + components["rm"] + components["helpful"]) / 4.0
        assert result["valid"] and result["score"] == pytest.approx(mean)
    judged = direct_p_yes(judge_lm, Item(**batch[0]))
    assert 0.0 <= judged <= 1.0


async def test_each_scale_against_a_hand_computation(service):
    app, http = service
    batch = items(3, "g") + items(2, "h")
    criteria = [
        {"name": "z", "model": "rm", "normalize": "group"},
        {"name": "s", "model": "rm", "normalize": "sigmoid", "polarity": "negative"},
        {"name": "neg", "model": "rm", "polarity": "negative"},
    ]
    out = await post(http, "/v1/rubric", {"items": batch, "criteria": criteria})
    raw = [r["criteria"][0]["raw"] for r in out["results"]]
    for members in ([0, 1, 2], [3, 4]):
        mean, std = statistics.mean(raw[i] for i in members), statistics.stdev(raw[i] for i in members)
        for i in members:
            assert out["results"][i]["components"]["z"] == pytest.approx((raw[i] - mean) / (std + 1e-6), abs=1e-6)
    import math

    for i, result in enumerate(out["results"]):
        assert result["components"]["s"] == pytest.approx(1.0 - 1.0 / (1.0 + math.exp(-raw[i])))
        assert result["components"]["neg"] == pytest.approx(-raw[i])


async def test_running_statistics_are_shared_counted_and_shown(service):
    app, http = service
    first = await post(
        http,
        "/v1/rubric",
        {"items": items(3), "criteria": [{"name": "r", "model": "rm_running", "normalize": "running"}]},
    )
    raws = [r["criteria"][0]["raw"] for r in first["results"]]
    assert [r["criteria"][0]["running_count"] for r in first["results"]] == [3, 3, 3]
    # Concurrent requests: every score counted once.
    await asyncio.gather(
        *(
            post(
                http,
                "/v1/rubric",
                {"items": items(2), "criteria": [{"name": "r", "model": "rm_running", "normalize": "running"}]},
            )
            for _ in range(5)
        )
    )
    cards = {c["id"]: c for c in (await http.get("/v1/models")).json()["data"]}
    running = cards["rm_running"]["running"]
    everything = raws + [r for r in raws[:2]] * 5  # items(2) are items(3)'s first two
    assert running["count"] == 13
    assert running["mean"] == pytest.approx(statistics.mean(everything), abs=1e-6)
    assert running["std"] == pytest.approx(statistics.stdev(everything), abs=1e-6)
    metrics = (await http.get("/metrics")).text
    assert 'rewardserve_running_count{model="rm_running",tenant=""} 13.0' in metrics  # no tenants: no tenant named


async def test_a_criterion_naming_an_unknown_model_is_a_422_naming_it(service):
    _, http = service
    out = await post(
        http,
        "/v1/rubric",
        {"items": items(1), "criteria": [{"name": "a", "fn": "exact_match"}, {"name": "b", "model": "nobody"}]},
        status=422,
    )
    assert out["error"]["param"] == "criteria[1].model" and "nobody" in out["error"]["message"]
    out = await post(
        http,
        "/v1/rubric",
        {"items": items(1), "criteria": [{"name": "b", "fn": "exact_match", "normalize": "running"}]},
        status=422,
    )
    assert "model criteria only" in out["error"]["message"]


async def test_escalation_asks_the_judge_only_within_its_budget(service, judge_lm):
    app, http = service
    # Groups of 4 alike (every response the same) teach nothing: escalate them, at most half the items.
    same = [
        {"prompt": "Say hi.", "response": "hi", "reference": "hi", "group_id": f"g{g}"}
        for g in range(3)
        for _ in range(4)
    ]
    escalate = {"to": "judge", "when": {"group_zero_variance": True}, "max_fraction": 0.5}
    out = await post(
        http, "/v1/rubric", {"items": same, "criteria": [{"name": "rm", "model": "rm"}], "escalate": escalate}
    )
    escalated = [i for i, r in enumerate(out["results"]) if r["escalated"]]
    assert escalated == [0, 1, 2, 3]  # a budget of 6 items holds one whole group of 4, not two
    for i in escalated:
        assert out["results"][i]["escalated"] == "group_zero_variance: scored by judge"
        assert out["results"][i]["score"] == pytest.approx(direct_p_yes(judge_lm, Item(**same[i])), abs=1e-5)
    for i in set(range(12)) - set(escalated):
        assert out["results"][i]["score"] == pytest.approx(out["results"][i]["components"]["rm"])


def result(score, uncertainty=None):
    return ItemResult(score=score, uncertainty=uncertainty) if score is not None else ItemResult(valid=False, error="x")


def test_pick_escalated_orders_by_need_and_keeps_the_budget():
    its = [
        Item(response="a", group_id="g"),
        Item(response="b", group_id="g"),
        Item(response="c"),
        Item(response="d"),
        Item(response="e"),
    ]
    results = [result(1.0), result(1.0), result(None), result(0.52, 0.4), result(0.9, 0.05)]
    every = Escalation.model_validate(
        {
            "to": "j",
            "when": {"invalid": True, "group_zero_variance": True, "uncertainty_above": 0.1, "margin_below": 0.1},
        }
    )
    assert pick_escalated(every, its, results) == {
        2: "invalid",
        0: "group_zero_variance",
        1: "group_zero_variance",
        3: "uncertainty 0.4 > 0.1",
    }
    # 2 of 5: the invalid item, then the group of two does not fit beside it, the uncertain one does.
    tight = every.model_copy(update={"max_fraction": 0.4})
    assert pick_escalated(tight, its, results) == {2: "invalid", 3: "uncertainty 0.4 > 0.1"}
    assert pick_escalated(every.model_copy(update={"max_fraction": 0.0}), its, results) == {}
