"""Prefix sharing, the score cache and de-duplication never change a score."""

from __future__ import annotations

import random

import pytest
import pytest_asyncio

from rewardserve.models.prefix_sharing import shared_prefix_groups
from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.builders import random_text, reference_outcome_scores
from tests.harness import metric, serve_in_process


def grpo_group(seed: int, size: int = 8, prompt_words: int = 120) -> list[dict]:
    rng = random.Random(seed)
    prompt = random_text(rng, prompt_words)
    return [
        {"group_id": f"g{seed}", "prompt": prompt, "response": random_text(rng, rng.randint(3, 40))}
        for _ in range(size)
    ]


@pytest_asyncio.fixture(scope="module")
async def service(qwen3_rm, qwen2_prm, judge_lm):
    unshared = {"score_cache_size": 0}
    settings = Settings(
        models=[
            ModelSpec(name="rm", source=str(qwen3_rm)),
            ModelSpec(name="rm_plain", source=str(qwen3_rm), options=unshared),
            ModelSpec(name="prm", source=str(qwen2_prm)),
            ModelSpec(name="judge", kind="verifier", source=str(judge_lm)),
            ModelSpec(
                name="judge_plain",
                kind="verifier",
                source=str(judge_lm),
                options={"score_cache_size": 0, "cache_size": 0},
            ),
        ],
        builtin_rules=False,
    )
    async with serve_in_process(settings) as (app, http):
        yield app, http


def test_groups_follow_shared_prefixes():
    a, b = list(range(100)), list(range(90)) + [7] * 20
    c = list(range(100, 140))
    groups = shared_prefix_groups([a, c, b], first_readout=[99, 39, 109])
    assert sorted((p, sorted(m)) for p, m in groups) == [(0, [1]), (90, [0, 2])]
    short = shared_prefix_groups([[1, 2, 3, 4], [1, 2, 3, 5]])
    assert all(p == 0 for p, _ in short)  # too little to share


async def test_shared_prompt_scores_equal_the_card_reference(service, qwen3_rm):
    app, http = service
    items = grpo_group(1) + grpo_group(2)
    response = await http.post("/v1/score", json={"model": "rm", "items": items})
    assert response.status_code == 200
    results = response.json()["results"]
    convs = [[{"role": "user", "content": i["prompt"]}, {"role": "assistant", "content": i["response"]}] for i in items]
    expected = [r[0] for r in reference_outcome_scores(qwen3_rm, convs)]
    assert [r["score"] for r in results] == pytest.approx(expected, abs=1e-4)
    # The two prompts each ran once: far fewer tokens than the items hold.
    text = app.state.svc.metrics.render().decode()
    batch_tokens = metric(text, "rewardserve_batch_tokens_sum", model="rm")
    assert batch_tokens < 0.5 * sum(r["tokens"] for r in results)


async def test_cache_and_duplicates_return_the_same_scores(service, qwen3_rm):
    app, http = service
    items = grpo_group(3, size=4)
    items = items + [items[0], items[1], items[0]]  # GRPO repeats completions
    first = (await http.post("/v1/score", json={"model": "rm", "items": items})).json()
    text = app.state.svc.metrics.render().decode()
    assert metric(text, "rewardserve_items_deduplicated_total", model="rm") >= 3
    again = (await http.post("/v1/score", json={"model": "rm", "items": items})).json()
    assert [r["score"] for r in again["results"]] == [r["score"] for r in first["results"]]
    assert again["usage"]["cached_tokens"] == again["usage"]["prompt_tokens"]
    text = app.state.svc.metrics.render().decode()
    assert metric(text, "rewardserve_cache_hits_total", model="rm") >= len(items)
    plain = (await http.post("/v1/score", json={"model": "rm_plain", "items": items})).json()
    assert [r["score"] for r in plain["results"]] == pytest.approx([r["score"] for r in first["results"]], abs=1e-4)
    # The twins, and the prompt the four distinct completions share, computed once.
    twins = sum(r["tokens"] for r in plain["results"][4:])
    assert plain["usage"]["cached_tokens"] == twins + 3 * common_prefix(qwen3_rm, items[:4])


def common_prefix(model_dir, items: list[dict]) -> int:
    """Tokens every item's templated conversation starts with."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = [
        tokenizer(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": i["prompt"]}, {"role": "assistant", "content": i["response"]}],
                tokenize=False,
            )
        )["input_ids"]
        for i in items
    ]
    n = 0
    while all(len(x) > n and x[n] == ids[0][n] for x in ids):
        n += 1
    return n


async def test_usage_counts_the_shared_prompt_as_cached(service, qwen3_rm):
    _, http = service
    items = grpo_group(7, size=8, prompt_words=260)
    prefix = common_prefix(qwen3_rm, items)
    assert 250 <= prefix <= 400  # a GRPO prompt of ~300 tokens
    out = (await http.post("/v1/score", json={"model": "rm_plain", "items": items})).json()
    assert out["usage"]["cached_tokens"] == 7 * prefix
    assert out["usage"]["prompt_tokens"] == sum(r["tokens"] for r in out["results"])


async def test_shared_trajectories_equal_unshared(service):
    _, http = service
    rng = random.Random(5)
    prompt = [{"role": "system", "content": "Be careful."}, {"role": "user", "content": random_text(rng, 80)}]
    items = [{"prompt": prompt, "steps": [random_text(rng, 6) for _ in range(rng.randint(1, 5))]} for _ in range(6)]
    together = (await http.post("/v1/score/steps", json={"model": "prm", "items": items})).json()["results"]
    for item, shared in zip(items, together):
        alone = (
            await http.post("/v1/score/steps", json={"model": "prm", "items": [item], "options": {"threshold": 0.0}})
        ).json()["results"][0]
        assert alone["step_scores"] == pytest.approx(shared["step_scores"], abs=1e-4)


async def test_shared_judge_prompts_equal_unshared(service):
    _, http = service
    question = random_text(random.Random(6), 80)
    items = [{"prompt": question, "response": r, "reference": "4"} for r in ("4", "five", "4.0", "no idea")]
    together = (await http.post("/v1/verify", json={"model": "judge", "items": items})).json()["results"]
    for item, shared in zip(items, together):
        alone = (await http.post("/v1/verify", json={"model": "judge_plain", "items": [item]})).json()
        assert alone["results"][0]["score"] == pytest.approx(shared["score"], abs=1e-5)
