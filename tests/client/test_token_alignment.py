"""Token-aligned rewards (client/token_alignment.py) with two tokenizers built and saved
here, a byte-level BPE (Qwen's kind) and a SentencePiece-style unigram with byte fallback
(Llama 2's kind), reloaded from disk: properties over random unicode, whitespace and step
boundaries inside tokens, each checked against the tokens' places found the slow way
(decoding every prefix)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rewardserve.client import token_alignment as module
from rewardserve.client.protocol import StepSpan, StepsResult
from rewardserve.client.token_alignment import token_rewards
from tests.builders import build_tokenizer, build_unigram_tokenizer


@pytest.fixture(scope="module", params=["byte-level BPE", "SentencePiece unigram"])
def tokenizer(request, tmp_path_factory):
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("tokenizer")
    if request.param == "SentencePiece unigram":
        return build_unigram_tokenizer(out)
    build_tokenizer("qwen").save_pretrained(out)
    return AutoTokenizer.from_pretrained(out)


ALPHABET = st.one_of(
    st.sampled_from(list("abc xyz  \n\t.,=+")),
    st.sampled_from(["é", "日", "本", "🙂", "\u0301", "\u00a0", "ß", "Ж", "\u200b"]),
    st.characters(codec="utf-8", exclude_categories=("Cs",)),
)
STEPS = st.lists(st.text(ALPHABET, min_size=1, max_size=10), min_size=1, max_size=6)
WORDS = st.lists(st.sampled_from(["the", " answer", " is", " 42", ".", "\n", " so", "ing", " x", "="]), max_size=4)


def steps_result(steps: list[str], rewards: list[float | None]) -> StepsResult:
    spans, at = [], 0
    for step in steps:
        spans.append(StepSpan(start=at, end=at + len(step)))
        at += len(step)
    return StepsResult(step_scores=rewards, spans=spans)


def reached(tokenizer, ids: list[int], text: str) -> list[int]:
    """How many characters of ``text`` the ids up to each token have decoded to: the slow
    way, the most over every prefix (a byte-fallback decoder garbles a whole run of bytes,
    a finished character among them, while the run ends in an incomplete one)."""
    out, best = [], 0
    for k in range(len(ids)):
        prefix = tokenizer.decode(ids[: k + 1], skip_special_tokens=True)
        n = 0
        while n < min(len(prefix), len(text)) and prefix[n] == text[n]:
            n += 1
        best = max(best, n)
        out.append(best)
    return out


def case(tokenizer, steps: list[str], eos: bool):
    """The steps' text as the policy's ids, and that text as the ids decode it."""
    response = "".join(steps)
    ids = tokenizer(response, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else [])
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assume(text == response)  # a SentencePiece decode may drop a leading space: not this response then
    return ids, text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS, words=WORDS, data=st.data())
def test_each_step_s_reward_lands_on_a_token_that_overlaps_it(tokenizer, steps, words, data):
    steps = [*words, *steps] if words else steps
    ids, text = case(tokenizer, steps, eos=data.draw(st.booleans()))
    ends = reached(tokenizer, ids, text)
    spans = steps_result(steps, [0.0] * len(steps)).spans
    for index, span in enumerate(spans):
        alone = steps_result(steps, [1.0 if i == index else None for i in range(len(steps))])
        last = token_rewards(alone, tokenizer, ids, response=text)
        (k,) = [k for k, r in enumerate(last) if r]
        before = ends[k - 1] if k else 0
        assert before < span.end <= ends[k], (steps, index, k)  # it overlaps, and it completes the span
        uniform = token_rewards(alone, tokenizer, ids, spread="uniform")
        assert sum(uniform) == pytest.approx(1.0)
        for k, share in enumerate(uniform):
            before = ends[k - 1] if k else 0
            overlaps = before < span.end and ends[k] > span.start
            assert (share > 0) == overlaps or (share == 0 and before == ends[k]), (steps, index, k)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS, data=st.data())
def test_the_array_sums_to_the_step_rewards_and_the_outcome(tokenizer, steps, data):
    ids, text = case(tokenizer, steps, eos=data.draw(st.booleans()))
    rewards = data.draw(st.lists(st.one_of(st.none(), st.floats(-5, 5)), min_size=len(steps), max_size=len(steps)))
    result = steps_result(steps, rewards)
    for spread in ("last", "uniform"):
        out = token_rewards(result, tokenizer, ids, spread=spread, outcome=0.25)
        assert len(out) == len(ids)
        assert sum(out) == pytest.approx(sum(r for r in rewards if r is not None) + 0.25, abs=1e-9)
        assert out[-1] >= 0.25 - 1e-9 or any(r for r in rewards if r)  # the outcome sits on the last token


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS, data=st.data())
def test_the_fast_placing_agrees_with_decoding_every_prefix(tokenizer, steps, data):
    ids, text = case(tokenizer, steps, eos=data.draw(st.booleans()))
    fast = module._piece_ends(tokenizer, ids, text)
    assert fast is not None  # these tokenizers' pieces rebuild the text
    assert fast == module._prefix_ends(tokenizer, ids, text) == reached(tokenizer, ids, text)


def test_spans_that_are_not_in_these_ids_are_refused(tokenizer):
    ids = tokenizer("the answer", add_special_tokens=False)["input_ids"]
    with pytest.raises(ValueError, match="not in the"):
        token_rewards(steps_result(["the answer is long"], [1.0]), tokenizer, ids)
    with pytest.raises(ValueError, match="not the response"):
        token_rewards(steps_result(["the answer"], [1.0]), tokenizer, ids, response="another answer")
    turns = StepsResult(
        step_scores=[1.0, 2.0], spans=[StepSpan(message=1, start=0, end=3), StepSpan(message=3, start=0, end=3)]
    )
    with pytest.raises(ValueError, match="several messages"):
        token_rewards(turns, tokenizer, ids)
    in_one = StepsResult(step_scores=[1.0], spans=[StepSpan(message=2, start=0, end=3)])
    assert sum(token_rewards(in_one, tokenizer, ids)) == pytest.approx(1.0)
    as_json = steps_result(["the", " answer"], [0.5, None]).model_dump()
    assert sum(token_rewards(as_json, tokenizer, ids)) == pytest.approx(0.5)


def test_ids_outside_the_vocabulary_and_unbounded_exact_placing_are_refused(tokenizer, monkeypatch):
    ids = tokenizer("the answer", add_special_tokens=False)["input_ids"]
    result = steps_result(["the answer"], [1.0])
    with pytest.raises(ValueError, match="not in the tokenizer"):
        token_rewards(result, tokenizer, [*ids, len(tokenizer) + 5])
    monkeypatch.setattr(module, "_piece_ends", lambda *_: None)
    monkeypatch.setattr(module, "MAX_PREFIX_DECODES", len(ids) - 1)
    with pytest.raises(ValueError, match="bounded to"):
        token_rewards(result, tokenizer, ids)
    monkeypatch.setattr(module, "MAX_PREFIX_DECODES", len(ids))
    assert sum(token_rewards(result, tokenizer, ids)) == pytest.approx(1.0)
