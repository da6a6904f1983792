"""Packed rows (many sequences, shared prefixes, no padding) read the same numbers as
each sequence on its own."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from rewardserve.models.backends import TokenSequence, make_backend
from rewardserve.models.backends.backend import after_prefix
from rewardserve.models.backends.packing import dense_mask, pack, reads_mask, segmented_attention
from rewardserve.models.spec import ModelSpec


def random_ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(10, 500) for _ in range(n)]


@pytest.mark.parametrize(
    "fixture,task,token_ids",
    [("qwen3_rm", "classify", None), ("llama_rm", "classify", None), ("judge_lm", "lm", [11, 42, 99])],
)
def test_packed_rows_equal_separate_forwards(request, fixture, task, token_ids):
    backend = make_backend(ModelSpec(name="m", source=str(request.getfixturevalue(fixture))), task)
    assert backend.packs
    rng = random.Random(0)
    units = []
    for _ in range(3):  # groups sharing a prefix
        prefix = random_ids(rng, rng.randint(20, 60))
        conts = [random_ids(rng, rng.randint(1, 30)) for _ in range(rng.randint(2, 5))]
        units.append((prefix, [TokenSequence(c, tuple(sorted({len(c) - 1, rng.randrange(len(c))}))) for c in conts]))
    for _ in range(4):  # plain sequences
        ids = random_ids(rng, rng.randint(5, 70))
        units.append(([], [TokenSequence(ids, (len(ids) - 1,))]))
    rng.shuffle(units)
    packed = backend.read_packed(units, token_ids)
    for (prefix, conts), rows in zip(units, packed):
        for alone, got in zip(after_prefix(prefix, conts), rows):
            (expected,) = backend.read([alone], token_ids)
            np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_layout_keeps_continuations_apart():
    units = [([1, 2], [TokenSequence([3, 4], (1,)), TokenSequence([5], (0,))]), ([], [TokenSequence([6, 7], (1,))])]
    packed = pack(units, device=torch.device("cpu"))
    mask = dense_mask(packed.layout).int().tolist()
    # tokens: 1 2 | 3 4 | 5 || 6 7
    assert mask[4] == [1, 1, 0, 0, 1, 0, 0]  # "5" sees the prefix and itself, not "3 4"
    assert mask[3] == [1, 1, 1, 1, 0, 0, 0]
    assert mask[1] == [1, 1, 0, 0, 0, 0, 0]
    assert mask[6] == [0, 0, 0, 0, 0, 1, 1]  # the second unit sees nothing of the first
    assert packed.position_ids[0].tolist() == [0, 1, 2, 3, 2, 0, 1]
    assert packed.readouts == [[[3], [4]], [[6]]]


def test_reads_mask_is_the_row_mask_at_the_reads():
    rng = random.Random(5)
    units = [
        (random_ids(rng, 9), [TokenSequence(random_ids(rng, n), tuple(range(n))) for n in (4, 1, 6)]),
        ([], [TokenSequence(random_ids(rng, 7), (0, 3, 6))]),
        (random_ids(rng, 3), [TokenSequence([11, 12], (1,))]),
    ]
    packed = pack(units, torch.device("cpu"), multiple=16)
    packed.layout.reads = torch.tensor([r for rows in packed.readouts for seq in rows for r in seq])
    assert torch.equal(reads_mask(packed.layout), dense_mask(packed.layout)[packed.layout.reads])


def test_row_is_filled_to_a_multiple_by_a_segment_nobody_reads():
    units = [([1, 2], [TokenSequence([3, 4], (1,))]), ([], [TokenSequence([6, 7, 8], (2,))])]
    packed = pack(units, torch.device("cpu"), multiple=16, filler=9)
    assert packed.layout.length == 16 and packed.ids.shape == (1, 16)
    assert packed.ids[0, 7:].tolist() == [9] * 9
    filler = packed.layout.segments[-1]
    assert (filler.start, filler.length, filler.prefix) == (7, 9, None)
    assert packed.position_ids[0, 7:].tolist() == list(range(9))
    assert packed.readouts == [[[3]], [[6]]]
    assert pack(units, torch.device("cpu"), multiple=7).layout.length == 7  # already a multiple


@pytest.mark.parametrize("kv_heads,window", [(4, None), (2, None), (2, 6)])
def test_segmented_attention_equals_sdpa_with_the_row_mask(kv_heads, window):
    """Per-segment SDPA = one SDPA over the whole row with the mask the layout stands
    for (grouped-query heads too)."""
    rng = random.Random(1)
    units = []
    for _ in range(6):
        prefix = random_ids(rng, rng.choice([0, 0, 5, 17]))
        units.append(
            (prefix, [TokenSequence(random_ids(rng, rng.randint(1, 9)), (0,)) for _ in range(rng.randint(1, 4))])
        )
    layout = pack(units, torch.device("cpu")).layout
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, layout.length, 8, generator=gen)
    k, v = (torch.randn(1, kv_heads, layout.length, 8, generator=gen) for _ in range(2))
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 4 // kv_heads, True
    got, _ = segmented_attention(module, q, k, v, None, scaling=0.3, packed_layout=layout, sliding_window=window)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=dense_mask(layout, window), scale=0.3, enable_gqa=True
    ).transpose(1, 2)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_packing_is_off_when_the_layout_does_not_reach_attention(qwen3_rm, monkeypatch):
    """A model whose layers drop the layout would attend across the whole row: the load
    probe catches it, and the model keeps plain SDPA with padded batches."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from rewardserve.models.backends import packing

    def layout_lost(module, q, k, v, mask, packed_layout=None, **kwargs):
        return sdpa_attention_forward(module, q, k, v, mask, **kwargs)

    monkeypatch.setattr(packing, "segmented_attention", layout_lost)
    backend = make_backend(ModelSpec(name="m", source=str(qwen3_rm)), "classify")
    assert not backend.packs
    assert backend.base.config._attn_implementation == "sdpa"
    assert backend.batch_preferences.get("pads", True) is True


def test_kv_cache_path_when_packing_is_off(qwen3_rm):
    """`packing: false` (and models packing cannot serve) share a prefix through its KV
    cache instead: the same numbers as separate forwards."""
    backend = make_backend(ModelSpec(name="m", source=str(qwen3_rm), options={"packing": False}), "classify")
    assert not backend.packs
    rng = random.Random(2)
    prefix = random_ids(rng, 40)
    conts = [TokenSequence(ids, (len(ids) - 1,)) for ids in (random_ids(rng, n) for n in (3, 17, 9))]
    shared = backend.read_shared(prefix, conts)
    for alone, got in zip(after_prefix(prefix, conts), shared):
        (expected,) = backend.read([alone])
        np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_sliding_window_models_pack_with_their_window(tmp_path):
    """A Qwen3 whose layers attend 8 positions back: packed rows (with prefixes and
    sequences longer than the window) read what transformers' own masks give."""
    from tests.builders import build_sequence_classifier

    source = build_sequence_classifier(tmp_path / "windowed", "qwen3", sliding_window=8, seed=4)
    backend = make_backend(ModelSpec(name="m", source=str(source)), "classify")
    assert backend.packs
    assert not backend.base.layers[-1].queries_at_reads  # that path knows no windows
    rng = random.Random(3)
    prefix = random_ids(rng, 12)
    conts = [TokenSequence(c, (0, len(c) - 1)) for c in (random_ids(rng, 3), random_ids(rng, 15))]
    lone = random_ids(rng, 30)
    units = [(prefix, conts), ([], [TokenSequence(lone, (5, 29))])]
    packed = backend.read_packed(units)
    for (prefix, seqs), rows in zip(units, packed):
        for alone, got in zip(after_prefix(prefix, seqs), rows):
            (expected,) = backend.read([alone])
            np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
    # the window matters here: the same model without it reads other numbers
    unwindowed = make_backend(
        ModelSpec(name="m", source=str(build_sequence_classifier(tmp_path / "full", "qwen3", seed=4))), "classify"
    )
    (full,) = unwindowed.read([TokenSequence(lone, (29,))])
    assert not np.allclose(full, packed[1][0][1:], atol=1e-3)
