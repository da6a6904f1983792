"""The last decoder layer of a packed forward at the rows that are read only.

A reward model reads a few rows of the last hidden state (the last token, the step tags,
the judge's answer position), yet a forward computes every layer at every token. In the
last layer only attention needs every token (the keys and values of all of them); the
residual, the MLP and the final norm are needed at the read rows alone. For a pre-norm
decoder layer (Llama, Qwen2/3, Mistral) that skips the MLP, the larger part of a layer,
for all other tokens: 1 / layers of the MLP work, ~8% of the forward on the 8-layer
benchmark model, ~2% on a 28-layer one. The numbers read are the same, row by row.

The rows travel in the packed layout (``Layout.reads``); forwards without one (padded
batches, KV-cache passes, generation) run the layer as it is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rewardserve.models.backends.packing import Layout, reads_mask

# The children of a pre-norm decoder layer whose forward is
#   h = x + attn(input_layernorm(x));  out = h + mlp(post_attention_layernorm(h))
# A layer with other parts (Gemma's extra norms, parallel blocks) is left alone; the
# backend's load probe checks the numbers of the ones wrapped.
PRE_NORM_CHILDREN = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}


# Attention modules whose forward is q/k/v projections, optional per-head q/k norms,
# rotary embeddings over the whole head, SDPA and o_proj (Llama, Qwen2/3, Mistral): their
# queries are computed at the read rows only too.
PLAIN_ATTENTION_CHILDREN = (
    {"q_proj", "k_proj", "v_proj", "o_proj"},
    {"q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"},
)


class LastLayerAtReads(nn.Module):  # type: ignore[misc]  # torch is untyped: nn.Module is Any
    """Wraps a decoder's last layer; returns ``[1, reads, hidden]`` when the forward
    carries a packed layout with ``reads`` (row indices), the layer's own output else.
    ``queries_at_reads``: attention too computes its queries (and output projection) at
    those rows only, the keys and values at every token."""

    def __init__(self, layer: nn.Module, queries_at_reads: bool = False):
        super().__init__()
        self.layer = layer
        self.queries_at_reads = queries_at_reads

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        layout = kwargs.get("packed_layout")
        reads = getattr(layout, "reads", None)
        if reads is None or args or hidden_states.shape[0] != 1:
            return self.layer(hidden_states, *args, **kwargs)
        assert layout is not None  # its reads are not None
        layer = self.layer
        normed = layer.input_layernorm(hidden_states)
        if self.queries_at_reads:
            attended = attend_at_reads(layer.self_attn, normed, layout, kwargs["position_embeddings"])
        else:
            attended = layer.self_attn(hidden_states=normed, **kwargs)[0][:, reads]
        # Every token's keys and values were needed above; from here rows are independent.
        picked = hidden_states[:, reads] + attended
        return picked + layer.mlp(layer.post_attention_layernorm(picked))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def attend_at_reads(
    attn: nn.Module, x: torch.Tensor, layout: Layout, position_embeddings: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """``[1, reads, hidden]``: the attention output at the read rows of a packed row, each
    read attending to what it attends in the full forward (its prefix, if any, and its
    own segment up to itself)."""
    reads = layout.reads
    assert reads is not None, "attend_at_reads needs a layout with reads"
    d = attn.head_dim
    cos, sin = (t[:, None] for t in position_embeddings)  # [1, 1, T, d]
    q = attn.q_proj(x[:, reads]).view(1, len(reads), -1, d)
    k = attn.k_proj(x).view(1, x.shape[1], -1, d)
    if hasattr(attn, "q_norm"):
        q, k = attn.q_norm(q), attn.k_norm(k)
    q = _rotate(q.transpose(1, 2), cos[:, :, reads], sin[:, :, reads])
    k = _rotate(k.transpose(1, 2), cos, sin)
    v = attn.v_proj(x).view(1, x.shape[1], -1, d).transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=reads_mask(layout).to(x.device), scale=attn.scaling, enable_gqa=True
    )
    return attn.o_proj(out.transpose(1, 2).reshape(1, len(reads), -1))


def queries_can_be_cut(attn: nn.Module, config: Any) -> bool:
    """Whether ``attend_at_reads`` computes this attention module's numbers: a plain
    module (see PLAIN_ATTENTION_CHILDREN) without a sliding window or partial rotary."""
    children = {name for name, _ in attn.named_children()}
    window = getattr(attn, "sliding_window", None) or getattr(config, "sliding_window", None)
    return (
        children in PLAIN_ATTENTION_CHILDREN
        and hasattr(attn, "head_dim")
        and hasattr(attn, "scaling")
        and not window
        and getattr(config, "partial_rotary_factor", 1.0) == 1.0
    )


def wrap_last_layer(decoder: nn.Module, queries_at_reads: bool = False) -> bool:
    """Wrap ``decoder.layers[-1]`` if it is a pre-norm layer (``queries_at_reads`` if its
    attention allows it too); True when wrapped."""
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        return False
    # Decoders run layers[:num_hidden_layers]; the wrapped one must be the last that runs.
    if getattr(getattr(decoder, "config", None), "num_hidden_layers", len(layers)) != len(layers):
        return False
    last = layers[-1].layer if isinstance(layers[-1], LastLayerAtReads) else layers[-1]
    if {name for name, _ in last.named_children()} != PRE_NORM_CHILDREN:
        return False
    cut = queries_at_reads and queries_can_be_cut(last.self_attn, getattr(decoder, "config", None))
    layers[-1] = LastLayerAtReads(last, cut)
    return True


def unwrap_last_layer(decoder: nn.Module) -> None:
    layers = getattr(decoder, "layers", None)
    if isinstance(layers, nn.ModuleList) and len(layers) and isinstance(layers[-1], LastLayerAtReads):
        layers[-1] = layers[-1].layer
