"""POST /v1/verify, /v1/rubric and /v1/compare end to end, in process."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
import pytest_asyncio

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.harness import post
from tests.models.kinds.test_rule import PATHOLOGICAL
from tests.models.kinds.test_verifier import direct_p_yes


@pytest_asyncio.fixture(scope="module")
async def service(judge_lm, yes_sayer, qwen3_rm):
    settings = Settings(
        models=[
            ModelSpec(name="judge", kind="verifier", source=str(judge_lm)),
            ModelSpec(name="yes", kind="verifier", source=str(yes_sayer)),
            ModelSpec(name="rm", source=str(qwen3_rm)),
        ]
    )
    from tests.harness import serve_in_process

    async with serve_in_process(settings) as (app, http):
        yield app, http


ITEM = {"prompt": "What is 2+2?", "response": "The answer is 4.", "reference": "4"}


async def test_verify_logprob_is_p_yes(service, judge_lm):
    _, http = service
    from rewardserve.protocol import Item

    items = [ITEM, {**ITEM, "response": "5"}]
    out = await post(http, "/v1/verify", {"model": "judge", "items": items})
    for item, result in zip(items, out["results"]):
        assert result["valid"] and result["score"] == pytest.approx(direct_p_yes(judge_lm, Item(**item)), abs=1e-5)
        assert result["probabilities"]["Yes"] == pytest.approx(result["score"])


async def test_verify_generate_parses_or_marks_invalid(service):
    _, http = service
    garbage = await post(
        http,
        "/v1/verify",
        {
            "model": "judge",
            "items": [ITEM],
            "options": {"mode": "generate", "max_new_tokens": 6, "n": 2, "temperature": 1.0, "seed": 1},
        },
    )
    (result,) = garbage["results"]
    assert result["valid"] is False and result["score"] is None and "verdict" in result["error"]
    # What the judge wrote comes back, so the caller can see why no verdict was read.
    assert len(result["samples"]) == 2 and all(s["text"] and s["score"] is None for s in result["samples"])
    sure = await post(
        http,
        "/v1/verify",
        {
            "model": "yes",
            "items": [ITEM, {**ITEM, "response": "5"}],
            "options": {"mode": "generate", "max_new_tokens": 4, "n": 3, "temperature": 0.7, "seed": 0},
        },
    )
    for result in sure["results"]:
        assert result["valid"] and result["score"] == 1.0 and result["verdict"] == "yes"
        assert len(result["samples"]) == 3 and result["rationale"].strip().startswith("Yes")


async def test_verify_errors(service):
    _, http = service
    body = {"model": "judge", "items": [ITEM], "options": {"template": "nope"}}
    error = (await post(http, "/v1/verify", body, 422))["error"]
    assert error["param"] == "options.template"
    wrong_kind = await post(http, "/v1/verify", {"model": "rm", "items": [ITEM]}, 422)
    assert "/v1/score" in wrong_kind["error"]["message"]


CRITERIA = [
    {"name": "exact", "fn": "exact_match", "args": {"extract": "none"}},
    {"name": "has_number", "fn": "regex", "args": {"pattern": "\\d+"}, "weight": 0.5},
    {"name": "templated", "fn": "exact_match", "args": {"extract": "none"}},
    {"name": "correct", "text": "The answer equals {{ item.reference }}.", "weight": 2},
    {"name": "tone", "text": "The tone is rude.", "polarity": "negative"},
    {"name": "quality", "text": "How good is it?", "choices": ["good", "ok", "bad"]},
]


async def test_rubric_mixes_rules_and_judges(service):
    _, http = service
    items = [
        {"id": "a", "prompt": "2+2?", "response": "4", "reference": "4"},
        {"id": "b", "prompt": "2+2?", "response": "five", "reference": "4"},
    ]
    out = await post(http, "/v1/rubric", {"judge": "judge", "items": items, "criteria": CRITERIA})
    for result in out["results"]:
        by = {c["name"]: c for c in result["criteria"]}
        assert list(by) == [c["name"] for c in CRITERIA] and all(c["valid"] for c in by.values())
        for name in ("correct", "tone", "quality"):
            assert 0.0 <= by[name]["score"] <= 1.0 and by[name]["reason"]
        weights = {c["name"]: c.get("weight", 1.0) for c in CRITERIA}
        mean = sum(weights[n] * by[n]["score"] for n in weights) / sum(weights.values())
        assert result["score"] == pytest.approx(mean)
    a, b = out["results"]
    assert a["criteria"][0]["score"] == 1.0 and b["criteria"][0]["score"] == 0.0
    assert a["criteria"][1]["score"] == 1.0 and b["criteria"][1]["score"] == 0.0


async def test_rubric_judge_scores_equal_independent_judging(service):
    """The shared-context judge gives what /v1/verify gives for the same prompt alone."""
    _, http = service
    item = {"prompt": "2+2?", "response": "4", "reference": "4"}
    rubric = await post(
        http,
        "/v1/rubric",
        {
            "judge": "judge",
            "items": [item],
            "criteria": [{"name": "c1", "text": "It is short."}, {"name": "c2", "text": "It is correct."}],
        },
    )
    for criterion in rubric["results"][0]["criteria"]:
        text = {"c1": "It is short.", "c2": "It is correct."}[criterion["name"]]
        alone = await post(
            http,
            "/v1/verify",
            {"model": "judge", "items": [item], "options": {"template": "criterion", "variables": {"criterion": text}}},
        )
        assert criterion["score"] == pytest.approx(alone["results"][0]["score"], abs=1e-5)


@pytest.mark.parametrize(
    ("aggregation", "expect"),
    [
        ({"mode": "all"}, lambda s: float(all(v >= 0.5 for v in s.values()))),
        ({"mode": "any"}, lambda s: float(any(v >= 0.5 for v in s.values()))),
        ({"mode": "threshold", "threshold": 0.6}, lambda s: float(sum(s.values()) / len(s) >= 0.6)),
        (
            {"mode": "formula", "formula": "0.5 * exact + 0.5 * min(has_number, correct)"},
            lambda s: 0.5 * s["exact"] + 0.5 * min(s["has_number"], s["correct"]),
        ),
    ],
)
async def test_rubric_aggregations(service, aggregation, expect):
    _, http = service
    criteria = [CRITERIA[0], {**CRITERIA[1], "weight": 1}, {**CRITERIA[3], "weight": 1}]
    item = {"prompt": "2+2?", "response": "4", "reference": "4"}
    out = await post(
        http, "/v1/rubric", {"judge": "judge", "items": [item], "criteria": criteria, "aggregation": aggregation}
    )
    (result,) = out["results"]
    scores = {c["name"]: c["score"] for c in result["criteria"]}
    assert result["score"] == pytest.approx(expect(scores))


async def test_a_rule_s_zero_carries_its_reason_and_ungrouped_normalization_warns(service):
    _, http = service
    criteria = [{"name": "format", "fn": "think_format"}, {"name": "m", "fn": "exact_match", "normalize": "group"}]
    items = [{"prompt": "2+2?", "response": r, "reference": "4"} for r in ("4", "<think>x</think><answer>4</answer>")]
    out = await post(http, "/v1/rubric", {"items": items, "criteria": criteria})
    first, second = ({c["name"]: c for c in r["criteria"]} for r in out["results"])
    assert first["format"]["score"] == 0.0 and "<think> and </think> must each appear once" in first["format"]["reason"]
    assert second["format"]["score"] == 1.0 and second["format"]["reason"] is None
    (warning,) = out["warnings"]
    assert "normalize: group" in warning and "group of its own" in warning
    grouped = await post(http, "/v1/rubric", {"items": [{**i, "group_id": "q"} for i in items], "criteria": criteria})
    assert grouped["warnings"] == []


@pytest.mark.parametrize("formula", ["__import__('os').system('x')", "exact.__class__", "9 ** 9 ** 9 ** 9", "nope + 1"])
async def test_rubric_rejects_malicious_formulas(service, formula):
    _, http = service
    body = {"items": [ITEM], "criteria": [CRITERIA[0]], "aggregation": {"mode": "formula", "formula": formula}}
    response = await http.post("/v1/rubric", json=body)
    if response.status_code == 200:  # a huge power only fails when evaluated: invalid, not 0
        (result,) = response.json()["results"]
        assert result["valid"] is False and result["score"] is None
    else:
        assert response.status_code == 422 and response.json()["error"]["param"] == "aggregation.formula"


async def test_rubric_request_errors(service):
    _, http = service
    judge_only = {"items": [ITEM], "criteria": [CRITERIA[3]]}
    assert (await post(http, "/v1/rubric", judge_only, 422))["error"]["param"] == "judge"
    unknown = {"items": [ITEM], "criteria": [{"name": "x", "fn": "astrology"}]}
    assert (await post(http, "/v1/rubric", unknown, 422))["error"]["param"] == "criteria[0].fn"
    both = {"items": [ITEM], "criteria": [{"name": "x", "fn": "regex", "text": "?"}]}
    await post(http, "/v1/rubric", both, 422)
    per_item = {"items": [{**ITEM, "criteria": [{"name": "bad name!", "fn": "regex"}]}]}
    await post(http, "/v1/rubric", per_item, 422)


async def test_invalid_criterion_invalidates_only_its_item(service):
    _, http = service
    items = [{**ITEM, "id": "ok"}, {"id": "bad", "prompt": "q", "response": "r"}]  # no reference
    out = await post(http, "/v1/rubric", {"items": items, "criteria": [CRITERIA[0]]})
    ok, bad = out["results"]
    assert ok["valid"] and ok["score"] == 0.0  # "The answer is 4." is not exactly "4"
    assert bad["valid"] is False and bad["score"] is None and "exact" in bad["error"]
    assert bad["criteria"][0]["valid"] is False


async def test_rules_read_the_reference_they_are_told_to(service):
    _, http = service
    item = {"prompt": "6*7?", "response": "It is \\boxed{42}.", "reference": {"answer": "42", "unit": "none"}}
    criteria = [
        {"name": "whole", "fn": "exact_match"},  # an object is no text to compare against
        {"name": "plain", "fn": "exact_match", "args": {"reference": "{{ item.reference.answer }}"}},
        {"name": "pooled", "fn": "exact_match", "args": {"reference": "{{ item.reference.answer | trim }}"}},
        {"name": "literal", "fn": "math_equiv", "args": {"reference": "42"}},
        {"name": "math_whole", "fn": "math_equiv"},
    ]
    out = await post(http, "/v1/rubric", {"items": [item], "criteria": criteria})
    by_name = {c["name"]: c for c in out["results"][0]["criteria"]}
    assert by_name["plain"]["score"] == by_name["pooled"]["score"] == by_name["literal"]["score"] == 1.0
    for name in ("whole", "math_whole"):
        assert by_name[name]["valid"] is False and by_name[name]["score"] is None
        assert "item.reference.answer" in by_name[name]["error"], by_name[name]
    assert out["results"][0]["valid"] is False
    wrong = dict(item, response="\\boxed{41}")
    out = await post(http, "/v1/rubric", {"items": [wrong], "criteria": criteria[1:4]})
    assert [c["score"] for c in out["results"][0]["criteria"]] == [0.0, 0.0, 0.0] and out["results"][0]["valid"]


@pytest.mark.alone  # a wall-clock bound on niced rule workers
async def test_pathological_math_times_out_without_stalling_others(service):
    _, http = service
    slow = {"items": [{"response": PATHOLOGICAL, "reference": "3"}], "criteria": [{"name": "m", "fn": "math_equiv"}]}
    fast = {"items": [{"response": "\\boxed{3}", "reference": "3"}], "criteria": [{"name": "m", "fn": "math_equiv"}]}
    await post(http, "/v1/rubric", fast)  # the pool is up
    slow_task = asyncio.ensure_future(post(http, "/v1/rubric", slow))
    await asyncio.sleep(0.3)
    start = time.monotonic()
    quick = await post(http, "/v1/rubric", fast)
    assert time.monotonic() - start < 3 and quick["results"][0]["score"] == 1.0
    (timed_out,) = (await slow_task)["results"]
    assert timed_out["valid"] is False and "timed out" in timed_out["criteria"][0]["error"]


async def test_compare_with_an_outcome_model_is_bradley_terry(service):
    _, http = service
    item = {"prompt": "2+2?", "responses": ["4", "five", "It is 4, because 2+2=4."]}
    out = await post(http, "/v1/compare", {"model": "rm", "items": [item]})
    (result,) = out["results"]
    scored = await post(
        http,
        "/v1/score",
        {"model": "rm", "items": [{"prompt": item["prompt"], "response": r} for r in item["responses"]]},
    )
    s = [r["score"] for r in scored["results"]]
    assert result["scores"] == pytest.approx(s, abs=1e-5)
    for i in range(3):
        for j in range(3):
            if i != j:
                assert result["preference"][i][j] == pytest.approx(1 / (1 + math.exp(s[j] - s[i])), abs=1e-5)
    assert result["ranking"] == sorted(range(3), key=lambda i: -s[i])


async def test_compare_with_a_judge_averages_both_orders(service):
    _, http = service
    item = {"prompt": "2+2?", "responses": ["4", "five", "22"]}
    out = await post(http, "/v1/compare", {"model": "judge", "items": [item]})
    (result,) = out["results"]
    pref = result["preference"]

    async def p_a(a, b):
        body = {
            "model": "judge",
            "items": [{"prompt": item["prompt"], "response": a}],
            "options": {"template": "prometheus_relative", "variables": {"response_a": a, "response_b": b}},
        }
        return (await post(http, "/v1/verify", body))["results"][0]["score"]

    r = item["responses"]
    for i in range(3):
        for j in range(3):
            if i != j:
                first, second = await p_a(r[i], r[j]), await p_a(r[j], r[i])
                assert result["first_shown"][i][j] == pytest.approx(first, abs=1e-5)  # each order, as judged
                assert pref[i][j] == pytest.approx((first + 1 - second) / 2, abs=1e-5)
                assert pref[i][j] + pref[j][i] == pytest.approx(1.0)
    assert sorted(result["ranking"]) == [0, 1, 2]
