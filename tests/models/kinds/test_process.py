"""Kind `process`: presets, the one-sequence layouts, and what cannot be forged."""

from __future__ import annotations

import pytest

from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.kinds import build_model
from rewardserve.models.plan import Job
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import ERROR_STATUS, Item, ScoreOptions, StepOptions
from tests.harness import run_jobs


def load(path, **spec):
    model = build_model(ModelSpec(name="prm", source=str(path), **spec))
    model.load()
    return model


def test_qwen_prm_preset_comes_from_the_architecture(qwen2_prm):
    model = build_model(ModelSpec(name="prm", source=str(qwen2_prm)))
    assert model.kind == "process" and model.preset_name == "qwen2.5-math-prm"
    assert model.options.format == "separator_chat"


def test_a_process_model_without_format_is_refused(rlhflow_prm):
    with pytest.raises(ValueError, match="format"):
        build_model(ModelSpec(name="prm", kind="process", source=str(rlhflow_prm)))


def test_readout_positions_are_one_per_step(qwen2_prm, shepherd_prm, skywork_prm, rlhflow_prm):
    item = Item(prompt="q", steps=["one", "two ки", "three<extra_0>"])
    for path, preset in [
        (qwen2_prm, None),
        (shepherd_prm, "math-shepherd"),
        (skywork_prm, "skywork-o1-prm"),
        (rlhflow_prm, "rlhflow-prm"),
    ]:
        model = load(path, preset=preset)
        (work,) = model.prepare([item], StepOptions())
        assert isinstance(work, Job), work
        assert len(work.payload.seq.positions) == 3  # tags inside steps did not count
        (result,) = run_jobs(model, [work])
        assert len(result.step_scores) == 3 and all(0 <= s <= 1 for s in result.step_scores)


def test_lm_formats_read_only_the_label_tokens(shepherd_prm):
    model = load(shepherd_prm, preset="math-shepherd")
    tok = model.backend.tokenizer
    assert model.format.token_ids == [
        tok.encode("+", add_special_tokens=False)[-1],
        tok.encode("-", add_special_tokens=False)[-1],
    ]


def test_score_options_mean_the_trajectory_aggregate(skywork_prm):
    model = load(skywork_prm, preset="skywork-o1-prm")
    (job,) = model.prepare([Item(prompt="q", steps=["a", "b"])], StepOptions(truncate="steps"))
    plan = model.plan_score([Item(prompt="q", steps=["a", "b"])], ScoreOptions())
    (result,) = plan.finish(model.run(plan.units), [])
    (steps,) = run_jobs(model, [job])
    assert result.score == steps.score
    assert result.score == min(result.step_scores)


def test_too_many_steps_is_413(qwen2_prm):
    model = load(qwen2_prm, options={"max_steps": 5})
    with pytest.raises(RequestError) as err:
        model.prepare([Item(steps=["s"] * 6)], StepOptions())
    assert ERROR_STATUS[err.value.type] == 413 and err.value.param == "items[0]"
    (entry,) = model.prepare([Item(steps=[])], StepOptions())
    assert isinstance(entry, ItemError)


def test_classifier_tags_equal_the_classifier_on_each_step_prefix(tmp_path):
    """An outcome classifier read at a tag after every step (format classifier_tags) is,
    step by step, the classifier's own score of the trajectory cut after that step."""
    import math

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from tests.builders import build_sequence_classifier

    path = build_sequence_classifier(tmp_path / "rm", "qwen3", extra_tokens=("<extra_0>",), seed=6)
    model = load(path, kind="process", options={"format": "classifier_tags"})
    steps = ["first we add", "then we carry the one", "so the answer is 12"]
    (work,) = model.prepare([Item(prompt="What is 5+7?", steps=steps)], StepOptions())
    (result,) = run_jobs(model, [work])
    tok = AutoTokenizer.from_pretrained(path)
    direct = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    expected = []
    for k in range(1, len(steps) + 1):
        conv = [
            {"role": "user", "content": "What is 5+7?"},
            {"role": "assistant", "content": "<extra_0>".join(steps[:k]) + "<extra_0>"},
        ]
        text = tok.apply_chat_template(conv, tokenize=False)
        ids = tok(text)["input_ids"]
        cut = len(ids) - ids[::-1].index(tok.convert_tokens_to_ids("<extra_0>"))  # through the last tag
        with torch.inference_mode():
            logit = float(direct(input_ids=torch.tensor([ids[:cut]])).logits[0, 0])
        expected.append(1 / (1 + math.exp(-logit)))
    assert result.step_scores == pytest.approx(expected, abs=1e-4)
