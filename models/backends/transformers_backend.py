"""Forward passes with transformers: the default backend, on CUDA when present, else CPU."""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import nn

from rewardserve.models.backends.base import Backend, Sequence
from rewardserve.models.spec import ModelSpec

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# A position limit above this is a "no limit" sentinel some configs carry.
_MAX_SANE_POSITIONS = 1 << 20
CPU_BATCH_PREFERENCES = {"max_batch_tokens": 2048, "max_padding_ratio": 0.05}


def pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        # bf16 is the checkpoints' own dtype on GPUs; on CPU fp32 keeps scores exact.
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[dtype]


class TransformersBackend(Backend):
    name = "transformers"

    def __init__(self, spec: ModelSpec, task: str):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if task != "classify":
            raise ValueError(f"transformers backend: unknown task {task!r}")
        self.device = pick_device(spec.device)
        self.dtype = pick_dtype(spec.dtype, self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(spec.source)
        model = AutoModelForSequenceClassification.from_pretrained(spec.source, dtype=self.dtype)
        self.model = model.to(self.device).eval()
        config = model.config.get_text_config()
        self.pad_token_id = config.pad_token_id
        self.max_tokens = spec.max_tokens or _position_limit(config, self.tokenizer)
        # Decoder reward models (Llama, Qwen, Gemma, ...) are a base model plus a linear
        # `score` over every position; running the base and applying the head only at
        # the readout rows reads the same number as the full forward, with less work.
        base = getattr(model, model.base_model_prefix, None)
        head = getattr(model, "score", None)
        self._split = (base, head) if isinstance(head, nn.Linear) and base is not None else None
        self._pad = self.pad_token_id if self.pad_token_id is not None else 0
        if self.device.type == "cpu":
            # Measured here (Qwen3 1024x8, 2 cores): a CPU's matmuls are saturated by one
            # item of a few hundred tokens, so batching buys nothing and padding is pure
            # loss; batches past ~2k padded tokens even run slower per token.
            self.batch_preferences = CPU_BATCH_PREFERENCES

    def _pad_batch(self, seqs: list[Sequence]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(s.ids) for s in seqs)
        ids = torch.full((len(seqs), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq.ids)] = torch.tensor(seq.ids, dtype=torch.long)
            mask[row, : len(seq.ids)] = 1
        return ids.to(self.device), mask.to(self.device)

    @torch.inference_mode()
    def classify(self, seqs: list[Sequence]) -> np.ndarray:
        ids, mask = self._pad_batch(seqs)
        if self._split is None:
            # Encoder classifiers pool on their own (CLS / pooler); padding is masked.
            logits = self.model(input_ids=ids, attention_mask=mask).logits
        else:
            base, head = self._split
            hidden = base(input_ids=ids, attention_mask=mask).last_hidden_state
            rows = torch.arange(len(seqs), device=hidden.device)
            readout = torch.tensor([s.readout for s in seqs], device=hidden.device)
            logits = head(hidden[rows, readout])
        return logits.float().cpu().numpy()


def _position_limit(config, tokenizer) -> int:
    limits = [getattr(config, "max_position_embeddings", None), tokenizer.model_max_length]
    sane = [int(x) for x in limits if isinstance(x, int) and 0 < x < _MAX_SANE_POSITIONS]
    return min(sane) if sane else 4096
