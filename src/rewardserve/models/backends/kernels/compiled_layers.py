"""Decoder layers of a packed forward compiled whole by torch.compile (inductor) on CPU.

Eager, a layer is one kernel per op: the linears (oneDNN, cpu_linear.py) and attention
are most of the time, but rotary embeddings, the MLP's SiLU times up-projection, residual
adds and RMSNorms are a dozen more passes over the activations. vLLM compiles its CPU
models with inductor, which fuses them into a few loops; so do we, layer by layer, for
the packed forward only (padded batches, KV-cache passes and generation run eager).

Two parts of a layer are not inductor's to trace, so they enter the graph as opaque ops:
- the prepacked oneDNN linear (inductor lowers that op only for weights it froze itself);
- segmented attention (packing.py), its layout a tensor of segments rather than Python
  objects, so one graph serves every batch's layout and row count.
Every layer of a model shares one graph (the layers are the same code; their weights are
inputs), compiled once at load: ~5 s for bench/compare.py's model.

It pays in both dtypes (figures: bench/results/design-measurements.md). fp32 scores agree with the eager ones to ~1e-6;
bf16 ones stay within bf16's rounding of them (fused ops round intermediates in other
places: both are ~2% of the score spread from fp32 on average).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from rewardserve.models.backends.packing import Layout, attend_segments


@functools.cache
def register_ops() -> None:
    """Define the ``rewardserve::`` ops compiled layers call (once per process)."""

    # torch is untyped: mypy sees its decorators as making the functions they wrap Any.
    @torch.library.custom_op("rewardserve::packed_linear", mutates_args=())  # type: ignore[untyped-decorator]
    def packed_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")

    @packed_linear.register_fake  # type: ignore[untyped-decorator]  # torch is untyped
    def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return x.new_empty(x.shape[0], weight.shape[0])

    # Every layer of a forward hands in the same table: its layout (masks made once) is
    # kept for the next. Keyed by content, so another forward, model or thread never
    # meets a layout that is not its own.
    last: dict[tuple[tuple[int, ...], torch.device, torch.dtype], Layout] = {}

    @torch.library.custom_op("rewardserve::segments", mutates_args=())  # type: ignore[untyped-decorator]  # see above
    def segments(
        query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, table: torch.Tensor, scale: float, window: int
    ) -> torch.Tensor:
        key_of = (tuple(table.tolist()), query.device, query.dtype)
        layout = last.get(key_of)
        if layout is None:
            last.clear()
            last[key_of] = layout = Layout.from_table(list(key_of[0]), query.device)
        return attend_segments(query, key, value, layout, scale, window or None)

    @segments.register_fake  # type: ignore[untyped-decorator]  # torch is untyped
    def _(
        query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, table: torch.Tensor, scale: float, window: int
    ) -> torch.Tensor:
        return query.new_empty(1, query.shape[2], query.shape[1], query.shape[3])


class CompiledLayer(nn.Module):  # type: ignore[misc]  # torch is untyped: nn.Module is Any
    """A decoder layer that runs compiled when the forward is packed (one row carrying a
    ``packed_layout``), as itself otherwise."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer
        # Not a child module: the same layer, compiled.
        self.__dict__["compiled"] = torch.compile(layer, dynamic=True)

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        layout = kwargs.get("packed_layout")
        if layout is None or args or hidden_states.shape[0] != 1:
            return self.layer(hidden_states, *args, **kwargs)
        # Segments replace the mask: the row mask transformers built is not read.
        kwargs.update(packed_layout=None, packed_segments=layout.table, attention_mask=None)
        return self.compiled(hidden_states, **kwargs)


def compile_layers(decoder: nn.Module) -> int:
    """Wrap every layer of ``decoder.layers`` but a last one cut to the read rows
    (readouts.py); returns how many."""
    from rewardserve.models.backends.readouts import LastLayerAtReads

    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        return 0
    register_ops()
    count = 0
    for i, layer in enumerate(layers):
        if not isinstance(layer, (LastLayerAtReads, CompiledLayer)):
            layers[i] = CompiledLayer(layer)
            count += 1
    return count


@contextlib.contextmanager
def compiler_settings() -> Iterator[None]:
    """Settings while a model's parts compile (at load): no pool of compile worker
    processes (the service runs models in threads of one process; a few small graphs);
    room in dynamo's per-function cache (8 entries by default) for the graphs of every
    model in the process, since the layers of one architecture share their code."""
    import torch._dynamo.config as dynamo
    import torch._inductor.config as inductor

    with inductor.patch(compile_threads=1), dynamo.patch(recompile_limit=64):
        yield


def uncompile_layers(decoder: nn.Module) -> None:
    layers = getattr(decoder, "layers", None)
    if isinstance(layers, nn.ModuleList):
        for i, layer in enumerate(layers):
            if isinstance(layer, CompiledLayer):
                layers[i] = layer.layer
