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

import torch
from torch import nn

# The children of a pre-norm decoder layer whose forward is
#   h = x + attn(input_layernorm(x));  out = h + mlp(post_attention_layernorm(h))
# A layer with other parts (Gemma's extra norms, parallel blocks) is left alone; the
# backend's load probe checks the numbers of the ones wrapped.
PRE_NORM_CHILDREN = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}


class LastLayerAtReads(nn.Module):
    """Wraps a decoder's last layer; returns ``[1, reads, hidden]`` when the forward
    carries a packed layout with ``reads`` (row indices), the layer's own output else."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        layout = kwargs.get("packed_layout")
        reads = getattr(layout, "reads", None)
        if reads is None or args or hidden_states.shape[0] != 1:
            return self.layer(hidden_states, *args, **kwargs)
        layer = self.layer
        attended, _ = layer.self_attn(hidden_states=layer.input_layernorm(hidden_states), **kwargs)
        # Every token's keys and values were needed above; from here rows are independent.
        picked = hidden_states[:, reads] + attended[:, reads]
        return picked + layer.mlp(layer.post_attention_layernorm(picked))


def wrap_last_layer(decoder: nn.Module) -> bool:
    """Wrap ``decoder.layers[-1]`` if it is a pre-norm layer; True when wrapped."""
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        return False
    # Decoders run layers[:num_hidden_layers]; the wrapped one must be the last that runs.
    if getattr(getattr(decoder, "config", None), "num_hidden_layers", len(layers)) != len(layers):
        return False
    last = layers[-1]
    if isinstance(last, LastLayerAtReads):
        return True
    if {name for name, _ in last.named_children()} != PRE_NORM_CHILDREN:
        return False
    layers[-1] = LastLayerAtReads(last)
    return True


def unwrap_last_layer(decoder: nn.Module) -> None:
    layers = getattr(decoder, "layers", None)
    if isinstance(layers, nn.ModuleList) and len(layers) and isinstance(layers[-1], LastLayerAtReads):
        layers[-1] = layers[-1].layer
