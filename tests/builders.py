"""Tiny models built locally (most of them in models/demo/tiny.py, which
``rewardserve demo-models`` builds from too): a BPE tokenizer trained here, random
weights, saved with ``save_pretrained`` and loaded back through the same code a hub
checkpoint takes.

References in tests always come from the saved-and-reloaded copy: with transformers 5 a
tokenizer built in memory and its reloaded twin can split the same text differently.
"""

from __future__ import annotations

import random
from pathlib import Path

from rewardserve.models.demo.tiny import (  # noqa: F401 (the tests import them from here)
    CHATML_TEMPLATE,
    LLAMA3_TEMPLATE,
    VL_TEMPLATE,
    WORDS,
    build_clip,
    build_llama_lm,
    build_qwen2_prm,
    build_qwen2_vl,
    build_qwen3_lm,
    build_sequence_classifier,
    build_tokenizer,
    corpus,
    save_model,
    tiny_config,
)

build_rlhflow_prm = build_llama_lm  # a Llama 3 style causal LM with a Llama 3 chat template


def random_text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + f" {rng.randint(0, 99)}."


def _classifier(model_dir: Path):
    """The saved tokenizer and sequence classifier, fp32, for the references below."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32)
    return AutoTokenizer.from_pretrained(model_dir), model.eval()


def reference_outcome_scores(model_dir: Path, conversations: list[list[dict]]) -> list[list[float]]:
    """The Skywork-Reward-V2 card's recipe, one conversation at a time, straight
    transformers: template, strip the duplicate BOS, tokenize, logits[0]."""
    import torch

    tokenizer, model = _classifier(model_dir)
    out = []
    with torch.inference_mode():
        for conversation in conversations:
            text = tokenizer.apply_chat_template(conversation, tokenize=False)
            if tokenizer.bos_token is not None and text.startswith(tokenizer.bos_token):
                text = text[len(tokenizer.bos_token) :]
            encoded = tokenizer(text, return_tensors="pt")
            out.append(model(**encoded).logits[0].tolist())
    return out


def reference_text_scores(
    model_dir: Path, texts: list[str], max_length: int | None = None, add_special_tokens: bool = False
) -> list[float]:
    """Already templated texts as OpenRLHF's reward server scores them
    (openrlhf/cli/serve_rm.py and openrlhf/models/model.py, 0.11.2): tokenized without
    adding special tokens, cut on the right at ``max_length``, the score head read at
    the last token. One text at a time, straight transformers."""
    import torch

    tokenizer, model = _classifier(model_dir)
    out = []
    with torch.inference_mode():
        for text in texts:
            encoded = tokenizer(
                text,
                add_special_tokens=add_special_tokens,
                return_tensors="pt",
                truncation=max_length is not None,
                max_length=max_length,
            )
            hidden = model.model(**encoded).last_hidden_state
            out.append(float(model.score(hidden)[0, -1, 0]))
    return out


# --------------------------------------------------------------------------- process reward models


def build_math_shepherd(out_dir: Path, seed: int = 0) -> Path:
    """A tiny MistralForCausalLM (math-shepherd-mistral-7b-prm's architecture) whose
    vocabulary has the step tag `ки`; its tokenizer adds BOS like Mistral's."""
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    tokenizer = build_tokenizer("llama")
    tokenizer.add_tokens(["ки"])
    torch.manual_seed(seed)
    model = MistralForCausalLM(tiny_config(MistralConfig, tokenizer))
    return save_model(model, tokenizer, out_dir)


def build_skywork_prm(out_dir: Path, seed: int = 0) -> Path:
    """A tiny Qwen2 causal LM with a value head stored beside it as
    `v_head.summary.weight` / `.bias`, as Skywork-o1-Open-PRM checkpoints are."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer("qwen")
    tokenizer.bos_token = "<|endoftext|>"
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(tiny_config(Qwen2Config, tokenizer))
    save_model(model, tokenizer, out_dir)
    weights = load_file(out_dir / "model.safetensors")
    weights["v_head.summary.weight"] = torch.randn(1, 64) * 0.5
    weights["v_head.summary.bias"] = torch.randn(1) * 0.5
    save_file(weights, out_dir / "model.safetensors", metadata={"format": "pt"})
    return out_dir


def build_causal_lm(out_dir: Path, seed: int = 0) -> Path:
    """A tiny Llama 3 style causal LM (random weights): a judge whose verdicts are noise."""
    return build_rlhflow_prm(out_dir, seed=seed)


def build_yes_sayer(out_dir: Path, word: str = " Yes") -> Path:
    """A tiny Phi causal LM whose lm_head bias makes ``word`` overwhelmingly likely at
    every step: a judge that always answers it, to drive generate mode end to end."""
    import torch
    from transformers import PhiConfig, PhiForCausalLM

    tokenizer = build_tokenizer("qwen")
    (token,) = tokenizer.encode(word, add_special_tokens=False)
    torch.manual_seed(0)
    config = PhiConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    model = PhiForCausalLM(config)
    with torch.no_grad():
        model.lm_head.bias.zero_()
        model.lm_head.bias[token] = 1000.0
    return save_model(model, tokenizer, out_dir)


def build_unigram_tokenizer(out_dir: Path):
    """A SentencePiece-style tokenizer (Llama 2's kind): unigram pieces with '▁' for
    spaces, and bytes (<0x..>) for what no piece covers; saved, and loaded back."""
    import json

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    trainer = trainers.UnigramTrainer(vocab_size=800, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>")
    tok.train_from_iterator(corpus(), trainer)
    spec = json.loads(tok.to_str())
    spec["model"]["byte_fallback"] = True
    spec["model"]["vocab"] += [[f"<0x{b:02X}>", -30.0] for b in range(256)]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)), unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(out_dir)
    return PreTrainedTokenizerFast.from_pretrained(out_dir)


def build_alone(spec, timeout_s: float | None = None):
    """A model built outside a service (a script, a test): a rule model gets rule pools
    of its own (the engine's RuleRunner), closed when the model is."""
    from rewardserve.engine.pools.runner import RuleLimits, RuleRunner
    from rewardserve.models.kinds import build_model
    from rewardserve.models.reward_model import ModelContext

    limit = timeout_s or (spec.options or {}).get("timeout_s") or 5.0
    runner = RuleRunner(RuleLimits(timeout_s=float(limit)))
    model = build_model(spec, ModelContext(rules=runner))
    close = model.close

    def close_with_pools() -> None:
        close()
        runner.close()

    model.close = close_with_pools
    return model
