"""Many sequences in one row, without padding: the layout of a packed forward pass.

A unit is a shared prefix (maybe empty) and the continuations that follow it. Units are
laid end to end in one row; each token attends causally within its own unit, to the
prefix and to its own continuation only. Position ids restart with every unit (and every
continuation starts where its prefix ends), so each token sees exactly what it would see
in its own unpadded sequence: the same numbers as separate forwards, with no padding,
and each prefix computed once.

The linear layers run over the row's tokens as they are. Attention does not run over the
whole row with a mask (its cost would be the row's length squared, most of it masked
out): ``segmented_attention``, the attention function packing models load with, runs it
per segment. Every prefix and every lone sequence attends causally to itself, each
continuation to its prefix's keys and its own. A packed row runs faster than the same
sequences as a padded batch, and than one row under a whole-row mask (figures:
bench/results/design-measurements.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from rewardserve.models.backends.backend import TokenSequence

Unit = tuple[list[int], list[TokenSequence]]  # (prefix, continuations)
# The name models are given in transformers' AttentionInterface when they pack.
ATTENTION_NAME = "rewardserve_segments"


@dataclass
class Segment:
    """Tokens ``start .. start + length`` of the row, attending causally to themselves
    and, for a continuation, to all of its prefix (``prefix``: start, length; ``mask``:
    which keys of prefix + own each query sees)."""

    start: int
    length: int
    prefix: tuple[int, int] | None = None
    mask: torch.Tensor | None = None  # [length, prefix length + length] bool
    _additive: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def additive_mask(self, dtype: torch.dtype) -> torch.Tensor:
        """``mask`` as 0 / -inf in ``dtype``, made once for all layers of a forward: SDPA
        converts a bool mask at every call, and takes an additive one ~15% faster (bf16,
        70 queries over 370 keys: 195 vs 227 us)."""
        if self._additive is None or self._additive.dtype != dtype:
            assert self.mask is not None, "only a segment with a mask has an additive one"
            self._additive = torch.zeros(self.mask.shape, dtype=dtype, device=self.mask.device).masked_fill_(
                ~self.mask, float("-inf")
            )
        return self._additive


@dataclass
class Layout:
    segments: list[Segment]
    length: int  # tokens in the row
    # Row indices the caller reads; set, the last layer runs at these rows only (readouts.py).
    reads: torch.Tensor | None = None
    # How full rows attend: "segments" (an SDPA call per segment) or "flex" (one
    # FlexAttention call over the row with the layout as a block mask: flex_kernel.py).
    kernel: str = "segments"
    block_masks: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)  # per sliding window

    @functools.cached_property
    def table(self) -> torch.Tensor:
        """The segments as one int tensor (start, length, prefix start, prefix length;
        -1, 0 without a prefix), the form compiled layers hand to attention
        (compiled_layers.py): a tensor is an input of a compiled graph, a list of
        segments would be a constant it is compiled for."""
        rows = [(s.start, s.length, *(s.prefix or (-1, 0))) for s in self.segments]
        return torch.tensor(rows, dtype=torch.long).flatten()

    @classmethod
    def from_table(cls, table: list[int], device: torch.device) -> Layout:
        segments = []
        for start, length, prefix_start, prefix_length in zip(*[iter(table)] * 4):
            if prefix_start < 0:
                segments.append(Segment(start, length))
            else:
                mask = continuation_mask(length, prefix_length, device)
                segments.append(Segment(start, length, (prefix_start, prefix_length), mask))
        return cls(segments, max((s.start + s.length for s in segments), default=0))


def continuation_mask(length: int, prefix: int, device: torch.device) -> torch.Tensor:
    """``[length, prefix + length]``: every key of the prefix, then its own causally."""
    return torch.ones(length, prefix + length, dtype=torch.bool, device=device).tril(prefix)


@dataclass
class Packed:
    ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T]
    layout: Layout
    readouts: list[list[list[int]]]  # per unit, per continuation: row indices to read


def pack(units: list[Unit], device: torch.device, multiple: int = 1, filler: int = 0) -> Packed:
    """``multiple``: the row is filled up to a multiple of this many tokens with a lone
    segment of ``filler`` tokens that nothing reads, so that the linear layers meet a few
    row counts whose kernels are built at load (cpu_linear.py), not a new one per batch."""
    ids: list[int] = []
    positions: list[int] = []
    segments: list[Segment] = []
    readouts: list[list[list[int]]] = []
    for prefix, continuations in units:
        shared = (len(ids), len(prefix)) if prefix else None
        if shared:
            segments.append(Segment(*shared))
        ids += prefix
        positions += range(len(prefix))
        rows = []
        for seq in continuations:
            n = len(seq.ids)
            mask = None
            if shared:
                mask = continuation_mask(n, len(prefix), device)
            segments.append(Segment(len(ids), n, shared, mask))
            rows.append([len(ids) + p for p in seq.positions])
            ids += seq.ids
            positions += range(len(prefix), len(prefix) + n)
        readouts.append(rows)
    fill = -len(ids) % multiple
    if fill:
        segments.append(Segment(len(ids), fill))
        ids += [filler] * fill
        positions += range(fill)
    return Packed(
        ids=torch.tensor([ids], dtype=torch.long, device=device),
        position_ids=torch.tensor([positions], dtype=torch.long, device=device),
        layout=Layout(segments, len(ids)),
        readouts=readouts,
    )


def segmented_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    packed_layout: Layout | None = None,
    sliding_window: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A transformers attention function (registered as ``ATTENTION_NAME``): SDPA per
    segment when the forward carries ``packed_layout``, transformers' own SDPA otherwise
    (padded batches, KV-cache passes, generation). A layer's ``sliding_window`` (Mistral,
    Qwen with use_sliding_window, Gemma's local layers) limits each query to the keys less
    than that many positions back, as transformers' masks do."""
    packed_segments = kwargs.pop("packed_segments", None)
    if packed_segments is not None:  # inside a compiled layer: the same loop, as one opaque op
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return torch.ops.rewardserve.segments(query, key, value, packed_segments, scale, sliding_window or 0), None
    if packed_layout is None or query.shape[0] != 1 or query.shape[2] != packed_layout.length:
        out: tuple[torch.Tensor, torch.Tensor | None] = sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            sliding_window=sliding_window,
            **kwargs,
        )
        return out
    if packed_layout.kernel == "flex":
        from rewardserve.models.backends.kernels.flex_kernel import attend_flex

        return attend_flex(query, key, value, packed_layout, scaling, sliding_window), None
    return attend_segments(query, key, value, packed_layout, scaling, sliding_window), None


def attend_segments(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layout: Layout,
    scaling: float | None,
    sliding_window: int | None,
) -> torch.Tensor:
    """``[1, T, heads, head_dim]``: SDPA per segment of the layout over ``[1, heads, T,
    head_dim]`` queries, keys and values."""
    q, k, v = query[0], key[0], value[0]  # [heads, T, head_dim]
    gqa = q.shape[0] != k.shape[0]
    out = query.new_empty(q.shape[1], q.shape[0], q.shape[2])  # [T, heads, head_dim]
    # One SDPA call per segment on slices of the row: faster than gathering the segments
    # into padded batches, which pays for the gather and the padding.
    joined = _Joined(layout, k, v)
    for seg in layout.segments:
        a, b = seg.start, seg.start + seg.length
        keys, values = joined.keys(seg) if seg.prefix is not None else (k[:, a:b], v[:, a:b])
        mask = seg.additive_mask(q.dtype) if seg.mask is not None else None
        if sliding_window is not None and keys.shape[1] > sliding_window:
            mask = _windowed(seg, keys.shape[1], sliding_window, query.device)
        o = torch.nn.functional.scaled_dot_product_attention(
            q[None, :, a:b],
            keys[None],
            values[None],
            attn_mask=mask,
            is_causal=mask is None,
            scale=scaling,
            enable_gqa=gqa,
        )
        out[a:b] = o[0].transpose(0, 1)
    return out[None]


class _Joined:
    """A continuation's keys and values: its prefix's, then its own. The first
    continuation follows its prefix in the row (a slice); the others are copied behind
    one copy of the prefix per forward and layer, not one per continuation: a GRPO
    group's prompt would otherwise be copied once per completion."""

    def __init__(self, layout: Layout, k: torch.Tensor, v: torch.Tensor):
        self.k, self.v = k, v
        self.longest: dict[tuple[int, int], int] = {}
        for seg in layout.segments:
            if seg.prefix is not None:
                self.longest[seg.prefix] = max(self.longest.get(seg.prefix, 0), seg.length)
        self.buffers: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def keys(self, seg: Segment) -> tuple[torch.Tensor, torch.Tensor]:
        assert seg.prefix is not None, "only a continuation has a prefix to join"
        (pa, pn), (a, b) = seg.prefix, (seg.start, seg.start + seg.length)
        if a == pa + pn:
            return self.k[:, pa:b], self.v[:, pa:b]
        if seg.prefix not in self.buffers:
            shape = (self.k.shape[0], pn + self.longest[seg.prefix], self.k.shape[2])
            kb, vb = self.k.new_empty(shape), self.v.new_empty(shape)
            kb[:, :pn], vb[:, :pn] = self.k[:, pa : pa + pn], self.v[:, pa : pa + pn]
            self.buffers[seg.prefix] = kb, vb
        kb, vb = self.buffers[seg.prefix]
        # The previous continuation's SDPA has read the tail: ops on a device run in order.
        kb[:, pn : pn + seg.length], vb[:, pn : pn + seg.length] = self.k[:, a:b], self.v[:, a:b]
        return kb[:, : pn + seg.length], vb[:, : pn + seg.length]


def _windowed(seg: Segment, n_keys: int, window: int, device: torch.device) -> torch.Tensor:
    """``[length, n_keys]`` mask of a segment whose keys reach further back than the
    window: its own pattern (causal, or prefix + causal) and ``query - key < window``,
    positions counted from the start of the prefix (keys are prefix + own tokens)."""
    offset = n_keys - seg.length  # the prefix's length, 0 for a lone segment
    queries = torch.arange(offset, n_keys, device=device)[:, None]
    keys = torch.arange(n_keys, device=device)[None, :]
    allowed = seg.mask if seg.mask is not None else keys <= queries
    return allowed & (queries - keys < window)


def reads_mask(layout: Layout) -> torch.Tensor:
    """``dense_mask(layout)[layout.reads]`` without the ``[T, T]`` mask: what each read row
    attends to (its prefix, if any, and its own segment up to itself), built at once."""
    assert layout.reads is not None, "only a layout with reads has a reads mask"
    reads = layout.reads.cpu()
    starts = torch.tensor([seg.start for seg in layout.segments])
    prefixes = torch.tensor([seg.prefix or (0, 0) for seg in layout.segments]).reshape(-1, 2)
    which = torch.searchsorted(starts, reads, right=True) - 1  # each read's segment
    keys = torch.arange(layout.length)[None, :]
    own = (keys >= starts[which][:, None]) & (keys <= reads[:, None])
    first, count = prefixes[which].unbind(1)
    return own | ((keys >= first[:, None]) & (keys < (first + count)[:, None]))


def dense_mask(layout: Layout, sliding_window: int | None = None) -> torch.Tensor:
    """The whole-row ``[T, T]`` mask the layout stands for (True: may attend); tests check
    segmented attention and ``reads_mask`` against it."""
    mask = torch.zeros(layout.length, layout.length, dtype=torch.bool)
    for seg in layout.segments:
        a, b = seg.start, seg.start + seg.length
        mask[a:b, a:b] = torch.ones(seg.length, seg.length, dtype=torch.bool).tril()
        if seg.prefix is not None:
            mask[a:b, seg.prefix[0] : seg.prefix[0] + seg.prefix[1]] = True
    if sliding_window is not None:  # distances along each sequence's own positions
        positions = torch.zeros(layout.length, dtype=torch.long)
        for seg in layout.segments:
            first = seg.prefix[1] if seg.prefix is not None else 0
            positions[seg.start : seg.start + seg.length] = torch.arange(first, first + seg.length)
        mask &= (positions[:, None] - positions[None, :]) < sliding_window
    return mask
