"""Reward-model architectures transformers does not ship, written natively so their
checkpoints load by weight name without ``trust_remote_code``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import Qwen2Config, Qwen2Model, Qwen2PreTrainedModel


class Qwen2ForProcessRewardModel(Qwen2PreTrainedModel):  # type: ignore[misc]  # transformers is untyped
    """Qwen2.5-Math-PRM: a Qwen2 backbone and a two-layer head over every position,
    ``score.0`` Linear(h, h) -> ReLU -> ``score.2`` Linear(h, 2)."""

    config_class = Qwen2Config
    base_model_prefix = "model"

    def __init__(self, config: Qwen2Config):
        super().__init__(config)
        self.num_labels = 2
        self.model = Qwen2Model(config)
        self.score = nn.Sequential(
            nn.Linear(config.hidden_size, config.hidden_size),
            nn.ReLU(),
            nn.Linear(config.hidden_size, 2),
        )
        self.post_init()

    def forward(
        self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None, **kwargs: Any
    ) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        return self.score(hidden.last_hidden_state)


def checkpoint_tensors(source: str, prefix: str) -> dict[str, torch.Tensor]:
    """Tensors whose name starts with ``prefix`` from a local safetensors checkpoint
    (one file or sharded with an index), read without loading the rest."""
    from safetensors import safe_open

    root = Path(source)
    if not root.is_dir():
        from huggingface_hub import snapshot_download

        root = Path(snapshot_download(source, allow_patterns=["*.safetensors", "*.json"]))
    index = root / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted({f for name, f in weight_map.items() if name.startswith(prefix)})
    else:
        files = ["model.safetensors"]
    out: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(root / file), framework="pt") as f:
            for name in f.keys():
                if name.startswith(prefix):
                    out[name[len(prefix) :]] = f.get_tensor(name)
    return out


def load_value_head(source: str, hidden_size: int, dtype: torch.dtype) -> nn.Linear:
    """Skywork-o1-Open-PRM's value head: ``v_head.summary`` Linear(h, 1) stored beside
    the causal LM's weights. (Its dropout is off at inference.)"""
    tensors = checkpoint_tensors(source, "v_head.summary.")
    if "weight" not in tensors:
        raise ValueError(f"{source}: no v_head.summary.weight in the checkpoint")
    head = nn.Linear(hidden_size, 1, bias="bias" in tensors)
    with torch.no_grad():
        head.weight.copy_(tensors["weight"])
        if "bias" in tensors:
            head.bias.copy_(tensors["bias"])
    return head.to(dtype)
