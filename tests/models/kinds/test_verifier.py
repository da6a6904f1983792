"""Kind `verifier`: P(yes) from one pass, and shared-context judging."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rewardserve.models.backends import TokenSequence
from rewardserve.models.errors import ItemError
from rewardserve.models.kinds import build_model
from rewardserve.models.plan import Job
from rewardserve.models.spec import ModelSpec
from rewardserve.models.text.judge_templates import builtin_templates, item_variables
from rewardserve.protocol import Item, VerifyOptions
from tests.harness import run_jobs

ITEMS = [
    Item(prompt="What is 2+2?", response="4", reference="4"),
    Item(prompt="Capital of France?", response="Paris is the capital.", reference="Paris"),
    Item(
        messages=[{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "9"}],
        reference="any prime",
    ),
]


@pytest.fixture(scope="module")
def judge(judge_lm):
    model = build_model(ModelSpec(name="judge", kind="verifier", source=str(judge_lm)))
    model.load()
    return model


def direct_p_yes(model_dir, item: Item) -> float:
    """Straight transformers: the template's chat prompt, the logits of the next token,
    softmax restricted to the yes / no spellings' first tokens."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    template = builtin_templates()["yes_no"]
    messages = [m.model_dump(exclude_none=True) for m in template.render(item_variables(item))]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if tok.bos_token and text.startswith(tok.bos_token):
        text = text[len(tok.bos_token) :]
    ids = torch.tensor([tok(text)["input_ids"]])
    yes = {tok.encode(w, add_special_tokens=False)[0] for w in ("Yes", " Yes", "yes", " yes")}
    no = {tok.encode(w, add_special_tokens=False)[0] for w in ("No", " No", "no", " no")}
    with torch.inference_mode():
        probs = torch.softmax(lm(ids).logits[0, -1].double(), -1)
    p_yes, p_no = probs[list(yes)].sum(), probs[list(no)].sum()
    return float(p_yes / (p_yes + p_no))


def test_logprob_p_yes_equals_direct_softmax(judge, judge_lm):
    entries = judge.prepare(ITEMS, VerifyOptions())
    results = run_jobs(judge, entries)
    for item, result in zip(ITEMS, results):
        assert result.score == pytest.approx(direct_p_yes(judge_lm, item), abs=1e-5)
        assert set(result.probabilities) == {"Yes", "No"}
        assert result.verdict == max(result.probabilities, key=result.probabilities.get)


def test_judge_results_are_cached(judge):
    entries = judge.prepare([Item(prompt="Cache me?", response="yes", reference="yes")], VerifyOptions())
    hits = judge.cache.hits
    first = run_jobs(judge, entries)[0]
    again = run_jobs(judge, entries)[0]
    assert judge.cache.hits == hits + 1 and again.score == first.score


def test_shared_prefix_equals_independent_passes(judge):
    item = ITEMS[1]
    template = judge.template("criterion")
    choices = judge.template_choices(template)
    criteria = ["Is it correct?", "Is it concise?", "Does it name a city?", "Is the tone polite and clear?"]
    prompts = [judge.encode_prompt(template, {**item_variables(item), "criterion": c}, "") for c in criteria]
    work = judge.prepare_judge(prompts, [choices] * 4)
    assert len(work.payload.prefix) > 20  # the question and response are shared
    judge.cache = type(judge.cache)(0)  # no cache: compute both ways
    shared = judge.run([work])[0]
    alone = judge.backend.read([TokenSequence(p, (len(p) - 1,)) for p in prompts], list(choices.token_ids))
    for s, (row,) in zip(shared, alone):
        assert s.score == pytest.approx(choices.score(choices.probabilities(row)), abs=1e-5)
    assert work.length < 0.5 * sum(len(p) for p in prompts)  # the point of sharing


def test_judge_units_of_a_batch_are_read_together(judge, monkeypatch):
    """Several items' criteria in one batch: one packed read for all of them (not one
    read per item), each criterion's numbers as in its own pass."""
    template = judge.template("criterion")
    choices = judge.template_choices(template)
    criteria = ["Is it correct?", "Is it concise?", "Is the tone polite and clear?"]
    prompts = [
        [judge.encode_prompt(template, {**item_variables(item), "criterion": c}, "") for c in criteria]
        for item in ITEMS[:2]
    ]
    works = [judge.prepare_judge(p, [choices] * len(p)) for p in prompts]
    judge.cache = type(judge.cache)(0)  # no cache: everything is read
    assert judge.backend.packs
    reads = []
    read_packed = judge.backend.read_packed
    monkeypatch.setattr(
        judge.backend,
        "read_packed",
        lambda units, token_ids=None: reads.append(len(units)) or read_packed(units, token_ids),
    )
    results = judge.run(works)
    assert reads == [2]
    for own, item_prompts in zip(results, prompts):
        alone = judge.backend.read([TokenSequence(p, (len(p) - 1,)) for p in item_prompts], list(choices.token_ids))
        for result, (row,) in zip(own, alone):
            assert result.score == pytest.approx(choices.score(choices.probabilities(row)), abs=1e-5)


def test_templates_and_modes_are_checked(judge):
    from rewardserve.models.errors import RequestError

    with pytest.raises(RequestError, match="unknown template"):
        judge.prepare(ITEMS, VerifyOptions(template="nope"))
    with pytest.raises(RequestError, match="generate"):
        judge.prepare(ITEMS, VerifyOptions(template="listwise_principle"))
    no_reference = judge.prepare([Item(prompt="q", response="r")], VerifyOptions())
    assert isinstance(no_reference[0], ItemError) and "reference" in str(no_reference[0])
    generate = judge.prepare(ITEMS[:1], VerifyOptions(mode="generate", max_new_tokens=8, n=2))
    assert isinstance(generate[0], Job) and generate[0].length > 16


def test_a_pre_rendered_judge_prompt_is_read_as_written(judge, judge_lm):
    """A trainer that renders the judge prompt itself (special tokens written out) gets
    the verdict read right after its text, equal to the template's own prompt."""
    tok = AutoTokenizer.from_pretrained(judge_lm)
    template = builtin_templates()["yes_no"]
    for item in ITEMS:
        messages = [m.model_dump(exclude_none=True) for m in template.render(item_variables(item))]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        for rendered in (Item(text=text), Item(input_ids=tok(text, add_special_tokens=False)["input_ids"])):
            (work,) = judge.prepare([rendered], VerifyOptions())
            (result,) = run_jobs(judge, [work])
            assert result.score == pytest.approx(direct_p_yes(judge_lm, item), abs=1e-5)
