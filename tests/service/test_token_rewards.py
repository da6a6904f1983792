"""/v1/score/steps with options.policy_tokenizer (models/policy_tokenizers.py): a reward
per token of each item's response_token_ids, exactly what the client's token_rewards
computes from the same result and the same saved tokenizer, for a byte-level BPE and a
SentencePiece-style unigram; and every way of asking wrongly is named."""

from __future__ import annotations

import random

import pytest

from rewardserve.client.token_alignment import token_rewards
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import StepsResult
from rewardserve.service.settings import Settings
from tests.builders import build_tokenizer, build_unigram_tokenizer
from tests.harness import serve_in_process

PIECES = ["the", " answer", " is", " 42", ".", " so", "ing", " x", "=", " é", " 日本", "🙂", "  ", "\t", "ß"]


def responses(tokenizer, rng: random.Random, n: int) -> list[tuple[str, list[int]]]:
    """Responses of a few '\\n\\n'-separated steps, with the ids the policy would have
    generated (an EOS on some), kept where the ids decode back to the response."""
    out: list[tuple[str, list[int]]] = []
    while len(out) < n:
        steps = ["".join(rng.choices(PIECES, k=rng.randint(1, 6))) for _ in range(rng.randint(1, 4))]
        response = "\n\n".join(steps)
        ids = tokenizer(response, add_special_tokens=False)["input_ids"]
        ids += [tokenizer.eos_token_id] if rng.random() < 0.5 else []
        if response.strip() and tokenizer.decode(ids, skip_special_tokens=True) == response:
            out.append((response, ids))
    return out


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory):
    bpe = tmp_path_factory.mktemp("bpe")
    build_tokenizer("qwen").save_pretrained(bpe)
    unigram = tmp_path_factory.mktemp("unigram")
    build_unigram_tokenizer(unigram)
    return {"bpe": str(bpe), "unigram": str(unigram)}


@pytest.fixture(scope="module")
async def service(qwen2_prm, tokenizer_dirs):
    settings = Settings(
        models=[ModelSpec(name="prm", source=str(qwen2_prm))],
        builtin_rules=False,
        policy_tokenizers={**tokenizer_dirs, "gone": "/nonexistent/tokenizer"},
    )
    async with serve_in_process(settings) as (_, http):
        yield http


OPTIONS = {"steps_from": "separator", "separator": "\n\n", "shaping": "potential", "gamma": 0.9}


@pytest.mark.parametrize("name", ["bpe", "unigram"])
@pytest.mark.parametrize("spread", ["last", "uniform"])
async def test_the_service_s_token_rewards_are_the_client_s_exactly(service, tokenizer_dirs, name, spread):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dirs[name])
    cases = responses(tokenizer, random.Random(f"{name}{spread}"), 24)
    items = [{"prompt": "Solve it.", "response": r, "response_token_ids": ids} for r, ids in cases]
    options = {**OPTIONS, "policy_tokenizer": name, "token_spread": spread}
    answer = await service.post("/v1/score/steps", json={"model": "prm", "items": items, "options": options})
    assert answer.status_code == 200, answer.text
    for (response, ids), got in zip(cases, answer.json()["results"]):
        assert got["valid"], got
        result = StepsResult.model_validate({**got, "token_rewards": None})
        assert got["token_rewards"] == token_rewards(result, tokenizer, ids, spread=spread, response=response)
        assert sum(got["token_rewards"]) == pytest.approx(sum(r for r in got["step_rewards"] if r is not None))


async def test_asking_wrongly_is_named(service, tokenizer_dirs):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dirs["bpe"])
    ids = tokenizer("the answer\n\nis 42", add_special_tokens=False)["input_ids"]
    good = {"prompt": "q", "response": "the answer\n\nis 42", "response_token_ids": ids}

    async def post(items, **options):
        body = {"model": "prm", "items": items, "options": {**OPTIONS, **options}}
        return await service.post("/v1/score/steps", json=body)

    unknown = await post([good], policy_tokenizer="nope")
    assert unknown.status_code == 422 and "known: bpe, gone, unigram" in unknown.text
    failed = await post([good], policy_tokenizer="gone")
    assert failed.status_code == 422 and "did not load" in failed.text
    without = await post([good])
    assert without.status_code == 422 and without.json()["error"]["param"] == "items[0].response_token_ids"
    outside = await post([{**good, "response_token_ids": [*ids, 10**6]}], policy_tokenizer="bpe")
    assert outside.status_code == 200 and "not in the tokenizer" in outside.json()["results"][0]["error"]
    other = {**good, "response": "another answer\n\nentirely"}
    missing = {"prompt": "q", "response": "the answer\n\nis 42"}
    mixed = await post([good, other, missing], policy_tokenizer="bpe")
    assert mixed.status_code == 200
    first, second, third = mixed.json()["results"]
    assert first["valid"] and len(first["token_rewards"]) == len(ids)
    assert not second["valid"] and "response_token_ids" in second["error"] and "not the response" in second["error"]
    assert not third["valid"] and "needs the item's response_token_ids" in third["error"]
