"""Tiny models built locally, for trying the service without downloads and for its
tests: a byte-level BPE tokenizer trained here on a small corpus, random weights, saved
with ``save_pretrained`` so they load through the same code a hub checkpoint takes.
Their scores are noise; their shapes, templates and heads are the real ones'.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Llama 3 style: the template writes BOS and the tokenizer adds it again, the duplicate
# the Skywork card strips.
LLAMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

WORDS = (
    "the answer is step first then so we get compute add multiply divide subtract total "
    "solve equation value number sum product because therefore check final result box "
    "apple orange train speed hour minute cost price each more less than equal square root "
    "yes no good bad correct wrong think reason tool call search python code function "
    # judge verdicts, so they are whole tokens as in real vocabularies
    "Yes No Yes No Yes No A B A B support partial_support not_support "
).split()


def corpus(n: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        words = rng.choices(WORDS, k=rng.randint(4, 20))
        nums = [str(rng.randint(0, 999)) for _ in range(3)]
        lines.append(" ".join(words) + " " + " + ".join(nums) + " = \\boxed{\\frac{1}{3}} .,:;!?()[]{}")
    return lines


def build_tokenizer(style: str, vocab_size: int = 600) -> Any:
    """A byte-level BPE fast tokenizer with ChatML (``qwen``) or Llama 3 (``llama``)
    special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if style == "qwen":
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    else:
        specials = [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|pad|>",
        ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    if style == "qwen":
        return PreTrainedTokenizerFast(
            tokenizer_object=tok,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            chat_template=CHATML_TEMPLATE,
        )
    bos = "<|begin_of_text|>"
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token="<|eot_id|>",
        pad_token="<|pad|>",
        chat_template=LLAMA3_TEMPLATE,
    )


def build_sequence_classifier(
    out_dir: Path,
    arch: str = "qwen3",
    *,
    num_labels: int = 1,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    head_dim: int = 16,
    max_positions: int = 512,
    seed: int = 0,
    extra_tokens: tuple[str, ...] = (),
    sliding_window: int | None = None,
) -> Path:
    """Save a tiny ``Qwen3ForSequenceClassification`` / ``LlamaForSequenceClassification``
    (``extra_tokens``: special tokens added to the vocabulary, such as a step tag;
    ``sliding_window``: Qwen3 with every layer attending that far back only)."""
    import torch
    from transformers import (
        LlamaConfig,
        LlamaForSequenceClassification,
        Qwen3Config,
        Qwen3ForSequenceClassification,
    )

    tokenizer = build_tokenizer("qwen" if arch == "qwen3" else "llama")
    if extra_tokens:
        tokenizer.add_special_tokens({"additional_special_tokens": list(extra_tokens)})
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=head_dim,
        max_position_embeddings=max_positions,
        num_labels=num_labels,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        # Larger than the default 0.02 so random models give well-spread scores.
        initializer_range=0.2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    if arch == "qwen3":
        window = {"use_sliding_window": True, "sliding_window": sliding_window, "max_window_layers": 0}
        model = Qwen3ForSequenceClassification(Qwen3Config(**common, **(window if sliding_window else {})))
    elif arch == "llama":
        model = LlamaForSequenceClassification(LlamaConfig(**common))
    else:
        raise ValueError(arch)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def tiny_config(
    config_class: Any,
    tokenizer: Any,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    head_dim: int = 16,
    **extra: Any,
) -> Any:
    return config_class(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=head_dim,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        initializer_range=0.2,
        tie_word_embeddings=False,
        **extra,
    )


def save_model(model: Any, tokenizer: Any, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def build_qwen2_prm(out_dir: Path, seed: int = 0, **size: int) -> Path:
    """A tiny checkpoint laid out like Qwen2.5-Math-PRM: Qwen2 backbone under `model.`,
    head `score.0` Linear(h,h) / `score.2` Linear(h,2), architectures
    Qwen2ForProcessRewardModel, and `<extra_0>` in the vocabulary."""
    import torch
    from torch import nn
    from transformers import Qwen2Config, Qwen2Model, Qwen2PreTrainedModel

    # transformers is untyped here: its base class is Any to mypy.
    class Qwen2ForProcessRewardModel(Qwen2PreTrainedModel):  # type: ignore[misc]  # the remote code's layout
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.model = Qwen2Model(config)
            self.score = nn.Sequential(
                nn.Linear(config.hidden_size, config.hidden_size),
                nn.ReLU(),
                nn.Linear(config.hidden_size, 2),
            )
            self.post_init()

    tokenizer = build_tokenizer("qwen")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<extra_0>"]})
    torch.manual_seed(seed)
    model = Qwen2ForProcessRewardModel(tiny_config(Qwen2Config, tokenizer, **size))
    with torch.no_grad():  # a head that separates steps clearly
        for layer in (model.score[0], model.score[2]):
            layer.weight.normal_(0, 0.5 * (64 / layer.in_features) ** 0.5)
            layer.bias.normal_(0, 0.5)
    return save_model(model, tokenizer, out_dir)


def build_llama_lm(out_dir: Path, seed: int = 0) -> Path:
    """A tiny Llama 3 style causal LM with a Llama 3 chat template."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer("llama")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(LlamaConfig, tokenizer))
    return save_model(model, tokenizer, out_dir)


def build_qwen3_lm(out_dir: Path, seed: int = 0, **size: int) -> Path:
    """A tiny Qwen3 causal LM with a ChatML template (head_dim 64 by default: what
    vLLM's CPU attention takes)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    size = {"hidden": 128, "heads": 2, "head_dim": 64, **size}
    tokenizer = build_tokenizer("qwen")
    torch.manual_seed(seed)
    return save_model(Qwen3ForCausalLM(tiny_config(Qwen3Config, tokenizer, **size)), tokenizer, out_dir)


VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% else %}<|vision_start|><|image_pad|><|vision_end|>{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_qwen2_vl(
    out_dir: Path,
    head: str = "value_head",
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    vision_depth: int = 1,
    max_pixels: int = 112 * 112,
) -> Path:
    """A tiny Qwen2VLForConditionalGeneration with its PIL image processor and a reward
    head stored beside it: ``v_head.summary.*`` (value head), ``score.0/2.*`` (MLP), or
    none (yes / no readout from the LM head)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = build_tokenizer("qwen")
    tokenizer.add_special_tokens(
        {"additional_special_tokens": ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]}
    )
    tokenizer.chat_template = VL_TEMPLATE
    token = tokenizer.convert_tokens_to_ids
    heads = max(1, hidden // 16)
    config = Qwen2VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=hidden,
            intermediate_size=hidden * 2,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            max_position_embeddings=4096,
            initializer_range=0.2,
            rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ),
        vision_config=dict(
            depth=vision_depth,
            embed_dim=32,
            hidden_size=hidden,
            num_heads=2,
            mlp_ratio=2,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
        ),
        image_token_id=token("<|image_pad|>"),
        video_token_id=token("<|video_pad|>"),
        vision_start_token_id=token("<|vision_start|>"),
        vision_end_token_id=token("<|vision_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config)
    save_model(model, tokenizer, out_dir)
    Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=max_pixels).save_pretrained(out_dir)
    weights = load_file(out_dir / "model.safetensors")
    if head == "value_head":
        weights["v_head.summary.weight"] = torch.randn(1, hidden) * 0.3
        weights["v_head.summary.bias"] = torch.randn(1)
    elif head == "mlp":
        weights["score.0.weight"] = torch.randn(hidden, hidden) * 0.2
        weights["score.0.bias"] = torch.randn(hidden) * 0.2
        weights["score.2.weight"] = torch.randn(1, hidden) * 0.3
        weights["score.2.bias"] = torch.randn(1)
    save_file(weights, out_dir / "model.safetensors", metadata={"format": "pt"})
    return out_dir


def build_clip(out_dir: Path, seed: int = 0, image_size: int = 32) -> Path:
    """A tiny CLIPModel with a BPE tokenizer (BOS / EOS added, EOS pooled) and the PIL
    CLIP image processor."""
    import torch
    from tokenizers import processors
    from transformers import CLIPConfig, CLIPModel
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tokenizer = build_tokenizer("llama")
    bos, eos = "<|begin_of_text|>", "<|end_of_text|>"
    backend = tokenizer.backend_tokenizer
    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} $B {eos}",
        special_tokens=[(bos, backend.token_to_id(bos)), (eos, backend.token_to_id(eos))],
    )
    tokenizer.eos_token = eos
    config = CLIPConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=77,
            eos_token_id=tokenizer.convert_tokens_to_ids(eos),
            bos_token_id=tokenizer.convert_tokens_to_ids(bos),
            pad_token_id=tokenizer.pad_token_id,
        ),
        vision_config=dict(
            image_size=image_size,
            patch_size=8,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
        ),
        projection_dim=16,
    )
    torch.manual_seed(seed)
    model = CLIPModel(config)
    save_model(model, tokenizer, out_dir)
    CLIPImageProcessorPil(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    ).save_pretrained(out_dir)
    return out_dir
