"""A packed row's attention in one call: FlexAttention with the layout as a block mask.

The per-segment path (packing.attend_segments) makes one SDPA call per segment and layer:
on a GPU, with a batch of hundreds of short segments, the launches and the small
kernels cost more than the arithmetic. Here the whole row attends at once and the layout
decides, block by block, which keys a query sees (its own segment causally, its prefix,
within a sliding window if the layer has one): blocks that are all masked are skipped,
so the cost follows the segments, not the row's length squared.

The mask's tensors are indexed per token: a token's segment, the start and length of its
segment's prefix, and its position in its own sequence. One block mask per layout and
sliding window serves every layer of a forward. ``flex_attention`` is compiled once with
dynamic shapes (a row of any length reuses it); eager FlexAttention is a slow reference.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # packing imports this module when a forward first needs it
    from rewardserve.models.backends.packing import Layout


@functools.cache
def _flex(device_type: str) -> Any:
    """Compiled on CUDA (Triton). On a CPU the eager reference: inductor's CPU template
    for FlexAttention (torch 2.13) fails to build for some of these masks (a sliding
    window after a first graph), and on a CPU the per-segment path is the default anyway."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=True) if device_type == "cuda" else flex_attention


def token_tables(layout: Layout, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(segment, prefix start, prefix length, position) of every token of the row."""
    segment = torch.empty(layout.length, dtype=torch.long)
    first = torch.zeros(layout.length, dtype=torch.long)
    count = torch.zeros(layout.length, dtype=torch.long)
    position = torch.empty(layout.length, dtype=torch.long)
    for index, seg in enumerate(layout.segments):
        rows = slice(seg.start, seg.start + seg.length)
        segment[rows] = index
        shift = 0
        if seg.prefix is not None:
            first[rows], count[rows] = seg.prefix
            shift = seg.prefix[1]
        position[rows] = torch.arange(shift, shift + seg.length)
    return tuple(t.to(device) for t in (segment, first, count, position))


def block_mask(layout: Layout, sliding_window: int | None, device: torch.device) -> Any:
    from torch.nn.attention.flex_attention import create_block_mask

    key = sliding_window or 0
    if key not in layout.block_masks:
        segment, first, count, position = token_tables(layout, device)

        def allowed(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
            own = (segment[q] == segment[kv]) & (kv <= q)
            prefix = (kv >= first[q]) & (kv < first[q] + count[q])
            seen = own | prefix
            if sliding_window:
                seen = seen & (position[q] - position[kv] < sliding_window)
            return seen

        layout.block_masks[key] = create_block_mask(allowed, None, None, layout.length, layout.length, device=device)
    return layout.block_masks[key]


def attend_flex(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layout: Layout,
    scaling: float | None,
    sliding_window: int | None,
) -> torch.Tensor:
    """``[1, T, heads, head_dim]`` from ``[1, heads, T, head_dim]`` queries, keys and
    values, as attend_segments gives it."""
    mask = block_mask(layout, sliding_window, query.device)
    gqa = query.shape[1] != key.shape[1]
    out = _flex(query.device.type)(query, key, value, block_mask=mask, scale=scaling, enable_gqa=gqa)
    return out.transpose(1, 2)
