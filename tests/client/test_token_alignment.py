"""Token-aligned rewards (client/token_alignment.py) with two tokenizers built and saved
here, a byte-level BPE (Qwen's kind) and a SentencePiece-style unigram with byte fallback
(Llama 2's kind), reloaded from disk: properties over random unicode, whitespace and step
boundaries inside tokens, each checked against the tokens' places read from their bytes
(the characters whose UTF-8 the ids so far hold whole). Draws that once failed are kept
as explicit examples (tests/conftest.py: `make test` runs hypothesis derandomized)."""

from __future__ import annotations

import bisect

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from rewardserve.client import token_alignment as module
from rewardserve.client.token_alignment import token_rewards
from rewardserve.protocol import StepSpan, StepsResult
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
    st.sampled_from(["é", "日", "本", "🙂", "\u0301", "\u00a0", "ß", "Ж", "\u200b", "\ufffd"]),
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


def token_bytes(tokenizer, ids: list[int]) -> list[bytes]:
    """Each token's UTF-8 bytes, read as these two tokenizers spell them: the byte-level
    BPE by GPT-2's table (transformers' own), the unigram's <0xNN> pieces as that byte
    and its other pieces as their text with '▁' for a space."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    byte_level = type(tokenizer.backend_tokenizer.decoder).__name__ == "ByteLevel"
    out = []
    for token_id, piece in zip(ids, tokenizer.convert_ids_to_tokens(ids)):
        if token_id in tokenizer.all_special_ids:
            out.append(b"")
        elif byte_level:
            out.append(bytes(byte_of[c] for c in piece))
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            out.append(bytes([int(piece[3:5], 16)]))
        else:
            out.append(piece.replace("▁", " ").encode())
    return out


def reached(tokenizer, ids: list[int], text: str) -> list[int]:
    """How many characters of ``text`` the ids up to each token hold whole: the
    characters whose UTF-8 bytes all lie in the tokens so far (a unigram's first piece
    may carry a space the decode drops: counted off)."""
    pieces = token_bytes(tokenizer, ids)
    whole = b"".join(pieces)
    skip = len(whole) - len(text.encode())
    assert whole[skip:] == text.encode() and whole[:skip] in (b"", b" ")
    char_ends = [len(text[: c + 1].encode()) for c in range(len(text))]
    out, at = [], -skip
    for piece in pieces:
        at += len(piece)
        out.append(bisect.bisect_right(char_ends, at))
    return out


def case(tokenizer, steps: list[str], eos: bool):
    """The steps' text as the policy's ids, and that text as the ids decode it."""
    response = "".join(steps)
    ids = tokenizer(response, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else [])
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assume(text == response)  # a SentencePiece decode may drop a leading space: not this response then
    return ids, text


@given(steps=STEPS, words=WORDS, eos=st.booleans())
# A step ending in a literal U+FFFD (a garbled byte the policy emitted, decoded): its
# first byte alone decodes to U+FFFD too, so only the bytes say which token completes it.
@example(steps=["\ufffd", "0"], words=[], eos=False)
@example(steps=["\ufffd", "0"], words=[], eos=True)
@example(steps=["a\ufffd", "\ufffd", "b"], words=[" answer"], eos=False)
def test_each_step_s_reward_lands_on_a_token_that_overlaps_it(tokenizer, steps, words, eos):
    steps = [*words, *steps] if words else steps
    ids, text = case(tokenizer, steps, eos=eos)
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


@given(steps=STEPS, eos=st.booleans())
@example(steps=["\ufffd", "0"], eos=False)
@example(steps=["\ufffd\ufffd", "日\ufffd"], eos=True)
def test_the_fast_placing_agrees_with_decoding_every_prefix(tokenizer, steps, eos):
    ids, text = case(tokenizer, steps, eos=eos)
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
