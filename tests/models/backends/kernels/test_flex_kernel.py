"""FlexAttention over a packed row (the CUDA default, run here on the CPU): the same
numbers as one SDPA call per segment, and through a real model the same reads as each
sequence alone."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from rewardserve.models.backends import TokenSequence, make_backend
from rewardserve.models.backends.backend import after_prefix
from rewardserve.models.backends.kernels import flex_kernel
from rewardserve.models.backends.packing import attend_segments, pack
from rewardserve.models.spec import ModelSpec


def units_of(rng: random.Random) -> list:
    units = []
    for _ in range(2):  # GRPO-like groups: a prompt, completions after it
        prefix = [rng.randrange(10, 500) for _ in range(rng.randint(20, 60))]
        conts = [[rng.randrange(10, 500) for _ in range(rng.randint(1, 30))] for _ in range(rng.randint(2, 4))]
        units.append((prefix, [TokenSequence(c, (len(c) - 1,)) for c in conts]))
    for _ in range(3):
        ids = [rng.randrange(10, 500) for _ in range(rng.randint(5, 70))]
        units.append(([], [TokenSequence(ids, (len(ids) - 1,))]))
    rng.shuffle(units)
    return units


@pytest.mark.parametrize(("window", "kv_heads"), [(None, 4), (16, 2)], ids=["causal", "window-gqa"])
def test_flex_equals_an_sdpa_call_per_segment(window, kv_heads):
    rng = random.Random(window or 0)
    layout = pack(units_of(rng), torch.device("cpu"), multiple=16).layout
    torch.manual_seed(0)
    q = torch.randn(1, 4, layout.length, 16)
    k, v = torch.randn(1, kv_heads, layout.length, 16), torch.randn(1, kv_heads, layout.length, 16)
    want = attend_segments(q, k, v, layout, 0.25, window)
    got = flex_kernel.attend_flex(q, k, v, layout, 0.25, window)
    assert got.shape == want.shape == (1, layout.length, 4, 16)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_model_on_flex_attention_reads_what_each_sequence_alone_reads(qwen3_rm, monkeypatch):
    calls = []
    attend = flex_kernel.attend_flex
    monkeypatch.setattr(flex_kernel, "attend_flex", lambda *a: calls.append(1) or attend(*a))
    backend = make_backend(ModelSpec(name="m", source=str(qwen3_rm), options={"attention": "flex"}), "classify")
    assert backend.packs and backend.attention == "flex"
    units = units_of(random.Random(7))
    calls.clear()
    packed = backend.read_packed(units)
    assert calls  # the row attended through FlexAttention
    for (prefix, conts), rows in zip(units, packed):
        for alone, got in zip(after_prefix(prefix, conts), rows):
            (expected,) = backend.read([alone])
            np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
