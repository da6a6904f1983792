"""Kind `outcome`: scores equal the model card's own computation, whatever the batch."""

from __future__ import annotations

import math
import random

import pytest

from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.kinds import build_model
from rewardserve.models.plan import Job
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import ERROR_STATUS, Item, ScoreOptions
from tests.builders import random_text, reference_outcome_scores
from tests.harness import run_jobs


def conversations(n: int, seed: int = 0) -> list[list[dict]]:
    rng = random.Random(seed)
    return [
        [
            {"role": "user", "content": random_text(rng, rng.randint(2, 30))},
            {"role": "assistant", "content": random_text(rng, rng.randint(1, 80))},
        ]
        for _ in range(n)
    ]


def load(path, **spec) -> object:
    model = build_model(ModelSpec(name="rm", source=str(path), **spec))
    model.load()
    return model


def score_all(model, items: list[Item], options: ScoreOptions | None = None) -> list:
    entries = model.prepare(items, options or ScoreOptions())
    works = [e for e in entries if isinstance(e, Job)]
    return run_jobs(model, works)


@pytest.mark.parametrize("fixture", ["qwen3_rm", "llama_rm"])
def test_scores_equal_card_reference_in_one_padded_batch(fixture, request):
    path = request.getfixturevalue(fixture)
    model = load(path)
    convs = conversations(12)
    expected = [r[0] for r in reference_outcome_scores(path, convs)]
    results = score_all(model, [Item(messages=c) for c in convs])
    got = [r.score for r in results]
    assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-4
    # Random weights still give spread-out scores, so the comparison means something.
    assert max(expected) - min(expected) > 0.5


def test_kind_and_preset_picked_from_checkpoint(qwen3_rm):
    model = build_model(ModelSpec(name="rm", source=str(qwen3_rm)))
    assert model.kind == "outcome"


def test_prompt_response_item_is_the_same_conversation(qwen3_rm):
    model = load(qwen3_rm)
    conv = conversations(1, seed=3)[0]
    a = score_all(model, [Item(messages=conv)])[0].score
    b = score_all(model, [Item(prompt=conv[0]["content"], response=conv[1]["content"])])[0].score
    assert a == pytest.approx(b, abs=1e-6)


def test_llama_duplicate_bos_is_stripped(llama_rm):
    model = load(llama_rm)
    (entry,) = model.prepare([Item(prompt="hi", response="yes")], ScoreOptions())
    bos = model.backend.tokenizer.bos_token_id
    assert entry.payload.seq.ids[0] == bos and entry.payload.seq.ids[1] != bos


def test_multi_head_returns_vector_and_sigmoid(qwen3_multihead_rm):
    model = load(qwen3_multihead_rm)
    convs = conversations(4, seed=5)
    expected = reference_outcome_scores(qwen3_multihead_rm, convs)
    raw = score_all(model, [Item(messages=c) for c in convs])
    squashed = score_all(model, [Item(messages=c) for c in convs], ScoreOptions(activation="sigmoid"))
    for want, r, s in zip(expected, raw, squashed):
        assert len(r.scores) == 3
        assert r.scores == pytest.approx(want, abs=1e-4)
        assert r.score == pytest.approx(want[0], abs=1e-4)
        assert s.scores == pytest.approx([1 / (1 + math.exp(-x)) for x in want], abs=1e-5)


def test_max_tokens_error_names_the_item_and_truncation_fits(qwen3_rm):
    model = load(qwen3_rm, max_tokens=32)
    short = Item(prompt="hi", response="ok")
    long = Item(prompt="hi", response=" ".join(["apple"] * 100))
    with pytest.raises(RequestError) as err:
        model.prepare([short, long], ScoreOptions())
    assert ERROR_STATUS[err.value.type] == 413 and err.value.param == "items[1]"
    for side in ("left", "right"):
        entries = model.prepare([short, long], ScoreOptions(truncate=side))
        assert entries[1].length == 32 and entries[1].truncated
        assert not entries[0].truncated
        results = run_jobs(model, entries)
        assert results[1].truncated and math.isfinite(results[1].score)


def test_image_for_text_model_is_an_item_error(qwen3_rm):
    model = load(qwen3_rm)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    items = [
        Item(messages=[{"role": "user", "content": [image]}, {"role": "assistant", "content": "x"}]),
        Item(prompt="hi", response="ok"),
    ]
    entries = model.prepare(items, ScoreOptions())
    assert isinstance(entries[0], ItemError) and "image" in str(entries[0])
    assert isinstance(entries[1], Job)


def test_cpu_batch_policy_and_spec_overrides(qwen3_rm):
    model = load(qwen3_rm)
    policy = model.policy()
    # Packed rows: a batch costs its tokens, no padding.
    assert not policy.pads and policy.max_batch_tokens == 1024
    assert policy.cost([10, 300]) == 310 and policy.fits([10, 300, 700])
    padded = load(qwen3_rm, options={"packing": False}).policy()
    assert padded.pads and padded.max_batch_tokens == 1024 and padded.max_padding_ratio == 0.05
    tuned = load(qwen3_rm, max_batch_tokens=512, max_padding_ratio=0.5, max_wait_ms=0)
    policy = tuned.policy()
    assert (policy.max_batch_tokens, policy.max_padding_ratio, policy.max_wait_ms) == (512, 0.5, 0)


def test_max_tokens_past_the_checkpoint_context_is_a_load_error(qwen3_rm):
    with pytest.raises(ValueError, match=r"'rm': max_tokens 8192 .* context of 512 positions"):
        load(qwen3_rm, max_tokens=8192)
    model = load(qwen3_rm, max_tokens=256)
    assert model.max_tokens == 256 and load(qwen3_rm).max_tokens == 512
    long = Item(prompt="x", response="word " * 3000)
    with pytest.raises(RequestError, match="limit of 512"):
        model_512 = load(qwen3_rm)
        model_512.prepare([long], ScoreOptions())
