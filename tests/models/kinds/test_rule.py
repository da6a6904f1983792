"""Kind `rule` and the rule functions behind it."""

from __future__ import annotations

import time

import pytest

from rewardserve.models.errors import ItemError
from rewardserve.models.rules import RuleError, get_rule, rule_names
from rewardserve.models.rules.text import exact_match, last_boxed
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import Item, ScoreOptions
from tests.builders import build_alone
from tests.harness import run_jobs

# The pool's workers run niced: a test process beside them would eat their time limits.
pytestmark = pytest.mark.alone

PATHOLOGICAL = r"\boxed{9^{9^{9^{9}}}}"  # sympy would spend minutes building this integer


@pytest.fixture(scope="module")
def math_model():
    model = build_alone(ModelSpec(name="math", kind="rule", source="math_equiv", options={"timeout_s": 2}))
    model.load()
    # The pool's workers up and their first math parsed before any 2 s limit is counted.
    (job,) = model.prepare([Item(response=r"\boxed{1}", reference="1")], ScoreOptions())
    model.runner.run([job.payload] * 8, timeout_s=60).result()
    yield model
    model.close()


def run(model, items):
    entries = model.prepare(items, ScoreOptions())
    return run_jobs(model, entries)


@pytest.mark.parametrize(
    ("response", "reference", "score"),
    [
        (r"so the answer is $\boxed{\frac{1}{3}}$", "1/3", 1.0),
        (r"\boxed{2}", "1/3", 0.0),
        (r"$\frac{1}{2}$", "0.5", 1.0),
        ("3", "2", 0.0),
        (r"\boxed{1+x^2}", "x^2+1", 1.0),
        ("no answer here", "4", 0.0),
    ],
)
def test_math_equiv_in_the_pool(math_model, response, reference, score):
    (result,) = run(math_model, [Item(response=response, reference=reference)])
    assert result.valid is not False and result.score == score


def test_math_without_or_with_garbage_reference_is_invalid_not_zero(math_model):
    results = run(
        math_model,
        [Item(response="2", reference=None), Item(response="2", reference="@@@"), Item(response="2", reference="2")],
    )
    assert isinstance(results[0], ItemError) and "reference" in str(results[0])
    assert isinstance(results[1], ItemError)
    assert results[2].score == 1.0


def test_pathological_input_times_out_alone(math_model):
    start = time.monotonic()
    results = run(
        math_model,
        [Item(response=PATHOLOGICAL, reference="3"), Item(response=r"\boxed{3}", reference="3")],
    )
    elapsed = time.monotonic() - start
    assert isinstance(results[0], ItemError) and "timed out" in str(results[0])
    assert results[1].score == 1.0
    assert elapsed < 10
    # The pool replaced the killed worker: the model still answers.
    (after,) = run(math_model, [Item(response=r"\boxed{5}", reference="5")])
    assert after.score == 1.0


def test_exact_match_normalisation():
    assert exact_match("  Paris ", "paris") == 1.0
    assert exact_match(r"It is \boxed{Paris}.", "Paris") == 1.0
    assert exact_match("Paris", ["London", "paris"]) == 1.0
    assert exact_match("Paris", "London") == 0.0
    assert exact_match("Paris", "paris", case_sensitive=True) == 0.0
    assert exact_match("The Paris!", "paris", keep_punctuation=False, keep_articles=False) == 1.0
    assert exact_match("a\nb\nfinal", "FINAL", extract="last_line") == 1.0
    with pytest.raises(RuleError):
        exact_match("x", None)


def test_last_boxed_balances_braces():
    assert last_boxed(r"\boxed{1} then \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed{unclosed") is None
    assert last_boxed("none") is None


def test_exact_match_model_uses_last_assistant_turn():
    model = build_alone(ModelSpec(name="em", kind="rule", source="exact_match"))
    model.load()
    item = Item(
        messages=[{"role": "user", "content": "capital?"}, {"role": "assistant", "content": "Paris"}], reference="paris"
    )
    try:
        (result,) = run(model, [item])
    finally:
        model.close()
    assert result.score == 1.0


def test_registry_lists_rules_and_rejects_unknown():
    assert {"math_equiv", "exact_match"} <= set(rule_names())
    with pytest.raises(KeyError, match="unknown rule"):
        get_rule("nope")
