"""Pre-rendered items (``text``, ``input_ids``): scored as they are, equal to a direct
transformers forward of that text; kinds that need the conversation refuse them by name."""

from __future__ import annotations

import random

import pytest
import pytest_asyncio

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests import prm_reference
from tests.builders import random_text, reference_text_scores
from tests.harness import serve_in_process


@pytest_asyncio.fixture(scope="module")
async def service(qwen3_rm, qwen2_prm):
    settings = Settings(
        models=[
            ModelSpec(name="rm", source=str(qwen3_rm)),
            ModelSpec(name="rm_short", source=str(qwen3_rm), max_tokens=64),
            ModelSpec(name="prm", source=str(qwen2_prm)),
        ]
    )
    async with serve_in_process(settings) as (app, http):
        yield app, http


def templated(model_dir, seed: int, eos: bool = True) -> str:
    """A policy's chat-templated prompt and its completion, as a trainer decodes it."""
    from transformers import AutoTokenizer

    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": random_text(rng, 12)}], tokenize=False, add_generation_prompt=True
    )
    return prompt + random_text(rng, rng.randint(2, 30)) + ("<|im_end|>" if eos else "")


async def test_text_and_input_ids_score_as_they_are(service, qwen3_rm):
    _, http = service
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(qwen3_rm)
    texts = [templated(qwen3_rm, k, eos=k % 2 == 0) for k in range(6)]
    expected = reference_text_scores(qwen3_rm, texts)
    chat = {"prompt": "what is 2+2?", "response": "4"}
    items = [{"text": t} for t in texts] + [chat]
    response = await http.post("/v1/score", json={"model": "rm", "items": items})
    assert response.status_code == 200, response.text
    scores = [r["score"] for r in response.json()["results"]]
    assert scores[:6] == pytest.approx(expected, abs=1e-4)
    alone = await http.post("/v1/score", json={"model": "rm", "items": [chat]})
    assert scores[6] == pytest.approx(alone.json()["results"][0]["score"], abs=1e-5)
    ids = [{"input_ids": tokenizer(t, add_special_tokens=False)["input_ids"]} for t in texts]
    by_ids = await http.post("/v1/score", json={"model": "rm", "items": ids})
    assert [r["score"] for r in by_ids.json()["results"]] == pytest.approx(expected, abs=1e-4)


async def test_long_text_is_refused_or_cut_on_the_right(service, qwen3_rm):
    _, http = service
    text = templated(qwen3_rm, 1) + " more words" * 80
    refused = await http.post("/v1/score", json={"model": "rm_short", "items": [{"text": text}]})
    assert refused.status_code == 413 and refused.json()["error"]["param"] == "items[0]"
    long_chat = {"prompt": "x", "response": "word " * 3000}  # named by its place beside a text item
    mixed = await http.post("/v1/score", json={"model": "rm_short", "items": [{"text": "x"}, long_chat]})
    assert mixed.status_code == 413 and mixed.json()["error"]["param"] == "items[1]"
    cut = await http.post(
        "/v1/score", json={"model": "rm_short", "items": [{"text": text}], "options": {"truncate": "right"}}
    )
    result = cut.json()["results"][0]
    assert result["truncated"] and result["tokens"] == 64
    assert result["score"] == pytest.approx(reference_text_scores(qwen3_rm, [text], max_length=64)[0], abs=1e-4)


async def test_process_model_reads_each_step_tag_of_the_text(service, qwen2_prm):
    _, http = service
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(qwen2_prm)
    rng = random.Random(3)
    steps = [random_text(rng, rng.randint(2, 9)) for _ in range(4)]
    messages = [
        {"role": "system", "content": "Please reason step by step."},
        {"role": "user", "content": random_text(rng, 8)},
        {"role": "assistant", "content": "<extra_0>".join(steps) + "<extra_0>"},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    response = await http.post("/v1/score/steps", json={"model": "prm", "items": [{"text": text}]})
    assert response.status_code == 200, response.text
    result = response.json()["results"][0]
    expected = prm_reference.qwen_prm_steps(qwen2_prm, messages[:2], steps)
    assert result["step_scores"] == pytest.approx(expected, abs=1e-4) and result["steps_scored"] == 4
    untagged = await http.post("/v1/score/steps", json={"model": "prm", "items": [{"text": "no tags here"}]})
    assert untagged.json()["results"][0]["valid"] is False


@pytest.mark.parametrize(
    "item, param, words",
    [
        ({"text": "x", "messages": [{"role": "user", "content": "x"}]}, "items[0]", ["'text'", "'messages'"]),
        ({"text": "x", "response": "x"}, "items[0]", ["'text'", "'response'"]),
        ({"input_ids": []}, "items[0].input_ids", []),
    ],
)
async def test_mixed_or_empty_shapes_are_422s_naming_the_fields(service, item, param, words):
    _, http = service
    response = await http.post("/v1/score", json={"model": "rm", "items": [item]})
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["param"] or "").startswith(param) and all(w in error["message"] for w in words), error


async def test_token_ids_outside_the_vocabulary_are_named(service):
    _, http = service
    response = await http.post("/v1/score", json={"model": "rm", "items": [{"input_ids": [3, 10**6, 4]}]})
    assert response.status_code == 422
    assert response.json()["error"]["param"] == "items[0].input_ids[1]"


async def test_kinds_that_need_the_conversation_refuse_pre_rendered_items(service):
    _, http = service
    rule = await http.post("/v1/score", json={"model": "math", "items": [{"text": "\\boxed{4}", "reference": "4"}]})
    assert rule.status_code == 422 and rule.json()["error"]["param"] == "items[0].text"
    rubric = await http.post(
        "/v1/rubric", json={"items": [{"input_ids": [1, 2]}], "criteria": [{"name": "m", "fn": "exact_match"}]}
    )
    assert rubric.status_code == 422 and rubric.json()["error"]["param"] == "items[0].input_ids"
