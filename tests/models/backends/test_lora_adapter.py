"""A model's LoRA ``adapter`` (peft 0.21's ``save_pretrained`` layout): merged into the
weights at load, its scores equal peft's own (its unmerged forward, or the checkpoint its
merge writes) on outcome, process and verifier models; kinds and backends that cannot
merge one refuse it by name."""

from __future__ import annotations

import pytest

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.builders import reference_outcome_scores
from tests.harness import serve_in_process

CONVERSATION = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]


def save_adapter(model_dir, out_dir):
    """A LoRA on q_proj / v_proj with random (not zero) B, plus the score head peft's
    SEQ_CLS task trains beside it: an adapter that changes the scores."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(7)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(
        task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    get_peft_model(model, config).save_pretrained(out_dir)
    return out_dir


def peft_reference(model_dir, adapter_dir) -> float:
    """The Skywork card's recipe on peft's PeftModel, adapter not merged."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter_dir).eval()
    text = tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    if tokenizer.bos_token is not None and text.startswith(tokenizer.bos_token):
        text = text[len(tokenizer.bos_token) :]
    with torch.inference_mode():
        return float(model(**tokenizer(text, return_tensors="pt")).logits[0, 0])


async def test_a_merged_adapter_scores_as_peft_computes_it(qwen3_rm, tmp_path):
    adapter = save_adapter(qwen3_rm, tmp_path / "adapter")
    expected = peft_reference(qwen3_rm, adapter)
    (without,) = reference_outcome_scores(qwen3_rm, [CONVERSATION])
    assert abs(expected - without[0]) > 1e-3  # the adapter changes the score

    specs = [
        ModelSpec(name="tuned", source=str(qwen3_rm), kind="outcome", adapter=str(adapter)),
        ModelSpec(name="base", source=str(qwen3_rm), kind="outcome"),
    ]
    item = {"prompt": "What is 2+2?", "response": "4"}
    async with serve_in_process(Settings(models=specs, builtin_rules=False, compile=False)) as (_app, http):
        tuned = (await http.post("/v1/score", json={"model": "tuned", "items": [item]})).json()
        base = (await http.post("/v1/score", json={"model": "base", "items": [item]})).json()
    assert tuned["results"][0]["score"] == pytest.approx(expected, abs=1e-4)
    assert base["results"][0]["score"] == pytest.approx(without[0], abs=1e-4)


def test_an_adapter_on_the_vllm_backend_is_refused_by_name(qwen3_rm):
    from rewardserve.models.backends import make_backend

    spec = ModelSpec(name="rm", source=str(qwen3_rm), backend="vllm", adapter="/adapters/x")
    with pytest.raises(ValueError, match="'adapter' is merged by the transformers backend only"):
        make_backend(spec, "classify")


def merged_by_peft(model_dir, adapter_dir, out_dir):
    """The checkpoint peft's own merge_and_unload makes of the base and the adapter."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    PeftModel.from_pretrained(base, adapter_dir).merge_and_unload().save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out_dir)
    return out_dir


async def test_a_judge_s_adapter_scores_as_peft_s_merged_checkpoint(judge_lm, tmp_path):
    """A verifier (a causal LM judge) with a CAUSAL_LM LoRA: its P(yes) equals the same
    judge served from the checkpoint peft's merge_and_unload writes, and differs from the
    base judge's."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(11)
    base = AutoModelForCausalLM.from_pretrained(judge_lm, dtype=torch.float32)
    config = LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"])
    config.init_lora_weights = False  # random B: an adapter that changes the verdicts
    get_peft_model(base, config).save_pretrained(tmp_path / "adapter")
    merged = merged_by_peft(judge_lm, tmp_path / "adapter", tmp_path / "merged")

    specs = [
        ModelSpec(name="tuned", source=str(judge_lm), kind="verifier", adapter=str(tmp_path / "adapter")),
        ModelSpec(name="merged", source=str(merged), kind="verifier"),
        ModelSpec(name="base", source=str(judge_lm), kind="verifier"),
    ]
    items = [
        {"prompt": "What is 2+2?", "response": "4", "reference": "4"},
        {"prompt": "Capital of France?", "response": "Lyon", "reference": "Paris"},
    ]
    async with serve_in_process(Settings(models=specs, builtin_rules=False, compile=False)) as (_app, http):
        scores = {}
        for name in ("tuned", "merged", "base"):
            answer = (await http.post("/v1/verify", json={"model": name, "items": items})).json()
            assert all(r["valid"] for r in answer["results"]), answer
            scores[name] = [r["score"] for r in answer["results"]]
    assert scores["tuned"] == pytest.approx(scores["merged"], abs=1e-4)
    assert scores["tuned"] != pytest.approx(scores["base"], abs=1e-4)


async def test_a_process_model_s_adapter_scores_steps_as_peft_s_merged_checkpoint(shepherd_prm, tmp_path):
    """A process model (Math-Shepherd, a causal LM read at its step tags) with a CAUSAL_LM
    LoRA: each step's score equals the card's per-prefix computation on the checkpoint
    peft's merge_and_unload writes, and differs from the base model's."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tests.prm_reference import shepherd_steps

    torch.manual_seed(13)
    base = AutoModelForCausalLM.from_pretrained(shepherd_prm, dtype=torch.float32)
    config = LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"])
    config.init_lora_weights = False  # random B: an adapter that changes the step scores
    get_peft_model(base, config).save_pretrained(tmp_path / "adapter")
    merged = merged_by_peft(shepherd_prm, tmp_path / "adapter", tmp_path / "merged")

    question, steps = "What is 2+3+4?", ["2+3 is 5", "5+4 is 9", "The answer is 9"]
    expected = shepherd_steps(merged, question, steps)
    untuned = shepherd_steps(shepherd_prm, question, steps)
    assert max(abs(a - b) for a, b in zip(expected, untuned)) > 1e-3  # the adapter changes them

    specs = [
        ModelSpec(name="tuned", source=str(shepherd_prm), preset="math-shepherd", adapter=str(tmp_path / "adapter")),
        ModelSpec(name="base", source=str(shepherd_prm), preset="math-shepherd"),
    ]
    item = {"prompt": question, "steps": steps}
    async with serve_in_process(Settings(models=specs, builtin_rules=False, compile=False)) as (_app, http):
        scores = {}
        for name in ("tuned", "base"):
            answer = (await http.post("/v1/score/steps", json={"model": name, "items": [item]})).json()
            assert answer["results"][0]["valid"], answer
            scores[name] = answer["results"][0]["step_scores"]
    assert scores["tuned"] == pytest.approx(expected, abs=1e-4)
    assert scores["base"] == pytest.approx(untuned, abs=1e-4)
