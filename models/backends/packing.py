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
per segment. Every prefix and every lone sequence attends causally to itself, the
continuations of one unit go as one batch over the prefix's keys and their own.
Measured on CPU (Qwen3 1024x8, fp32): five unrelated sequences of 120-270 tokens in one
row ran in 619 ms against 754 ms padded and 819 ms with a whole-row mask; a GRPO group
(a 320-token prompt, 8 completions) in 531 ms against 564 ms with the row mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from rewardserve.models.backends.base import Sequence

Unit = tuple[list[int], list[Sequence]]  # (prefix, continuations)
# The name models are given in transformers' AttentionInterface when they pack.
ATTENTION_NAME = "rewardserve_segments"


@dataclass
class Part:
    """Query segments attended in one SDPA call. ``rows[i, j]``: the row position of
    segment i's j-th query (short segments padded by repeating their first row, where
    ``valid`` is False). Every segment also sees the keys of ``prefix`` (start, length)
    when it is set. ``span``: the part is one unpadded segment (start, length), plainly
    causal, and ``mask`` is None."""

    rows: torch.Tensor  # [segments, longest]
    valid: torch.Tensor  # [segments, longest] bool
    flat: torch.Tensor  # rows[valid]: where the outputs go
    prefix: tuple[int, int] | None
    mask: torch.Tensor | None  # [segments, 1, longest, prefix + longest] bool
    span: tuple[int, int] | None


@dataclass
class Layout:
    parts: list[Part]
    length: int  # tokens in the row


@dataclass
class Packed:
    ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T]
    layout: Layout
    readouts: list[list[list[int]]]  # per unit, per continuation: row indices to read


def pack(units: list[Unit], device: torch.device) -> Packed:
    ids: list[int] = []
    positions: list[int] = []
    alone: list[tuple[int, int]] = []  # causal segments: prefixes and lone sequences
    branches: list[tuple[tuple[int, int], list[tuple[int, int]]]] = []  # (prefix, continuations)
    readouts: list[list[list[int]]] = []
    for prefix, continuations in units:
        if prefix:
            alone.append((len(ids), len(prefix)))
        start = len(ids)
        ids += prefix
        positions += range(len(prefix))
        spans, rows = [], []
        for seq in continuations:
            spans.append((len(ids), len(seq.ids)))
            rows.append([len(ids) + p for p in seq.positions])
            ids += seq.ids
            positions += range(len(prefix), len(prefix) + len(seq.ids))
        if prefix:
            branches.append(((start, len(prefix)), spans))
        else:
            alone += spans
        readouts.append(rows)
    parts = [_part(alone, None, device)] if alone else []
    parts += [_part(spans, prefix, device) for prefix, spans in branches]
    return Packed(
        ids=torch.tensor([ids], dtype=torch.long, device=device),
        position_ids=torch.tensor([positions], dtype=torch.long, device=device),
        layout=Layout(parts, len(ids)),
        readouts=readouts,
    )


def _part(spans: list[tuple[int, int]], prefix: tuple[int, int] | None, device: torch.device) -> Part:
    if prefix is None and len(spans) == 1:
        start, n = spans[0]
        rows = torch.arange(start, start + n, device=device)[None]
        return Part(rows, torch.ones_like(rows, dtype=torch.bool), rows[0], None, None, spans[0])
    longest = max(n for _, n in spans)
    offsets = torch.arange(longest, device=device)
    starts = torch.tensor([a for a, _ in spans], device=device)[:, None]
    valid = offsets[None, :] < torch.tensor([n for _, n in spans], device=device)[:, None]
    rows = torch.where(valid, starts + offsets[None, :], starts)
    # Causal within the segment, never onto its padding; padding queries still see the
    # segment's first key (an all-masked row would be NaN), and are dropped after.
    mask = (offsets[None, :] <= offsets[:, None])[None] & valid[:, None, :]
    if prefix is not None:
        sees_prefix = torch.ones(len(spans), longest, prefix[1], dtype=torch.bool, device=device)
        mask = torch.cat([sees_prefix, mask], dim=2)
    return Part(rows, valid, rows[valid], prefix, mask[:, None], None)


def segmented_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                        scaling: float | None = None, packed_layout: Layout | None = None, **kwargs):
    """A transformers attention function (registered as ``ATTENTION_NAME``): SDPA per
    segment when the forward carries ``packed_layout``, transformers' own SDPA otherwise
    (padded batches, KV-cache passes, generation)."""
    if packed_layout is None or query.shape[0] != 1 or query.shape[2] != packed_layout.length:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    q, k, v = query[0], key[0], value[0]  # [heads, T, head_dim]
    gqa = q.shape[0] != k.shape[0]
    out = query.new_empty(q.shape[1], q.shape[0], q.shape[2])  # [T, heads, head_dim]
    for part in packed_layout.parts:
        if part.span is not None:
            a, n = part.span
            o = _sdpa(q[None, :, a:a + n], k[None, :, a:a + n], v[None, :, a:a + n], None, scaling, gqa)
            out[a:a + n] = o[0].transpose(0, 1)
            continue
        qs, ks, vs = (x[:, part.rows].transpose(0, 1) for x in (q, k, v))  # [segments, heads, L, d]
        if part.prefix is not None:
            a, n = part.prefix
            count = qs.shape[0]
            ks = torch.cat([k[None, :, a:a + n].expand(count, -1, -1, -1), ks], dim=2)
            vs = torch.cat([v[None, :, a:a + n].expand(count, -1, -1, -1), vs], dim=2)
        o = _sdpa(qs, ks, vs, part.mask, scaling, gqa)
        out[part.flat] = o.transpose(1, 2)[part.valid]
    return out[None], None


def _sdpa(q, k, v, mask, scale, gqa: bool) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=gqa)


def dense_mask(layout: Layout) -> torch.Tensor:
    """The whole-row ``[T, T]`` mask the layout stands for (True: may attend); tests
    check segmented attention against SDPA with it."""
    mask = torch.zeros(layout.length, layout.length, dtype=torch.bool)
    for part in layout.parts:
        for rows, valid in zip(part.rows.cpu(), part.valid.cpu()):
            rows = rows[valid]
            mask[rows[:, None], rows[None, :]] = torch.ones(len(rows), len(rows), dtype=torch.bool).tril()
            if part.prefix is not None:
                a, n = part.prefix
                mask[rows, a:a + n] = True
    return mask
