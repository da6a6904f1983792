"""Decoder layers compiled whole for packed forwards read what the eager layers read, and
one graph serves every batch."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from rewardserve.models.backends import TokenSequence, make_backend
from rewardserve.models.backends.kernels.compiled_layers import CompiledLayer
from rewardserve.models.backends.packing import Layout, pack
from rewardserve.models.spec import ModelSpec


def random_units(rng: random.Random, lone: tuple[int, ...], groups: int = 0) -> list:
    ids = lambda n: [rng.randrange(10, 500) for _ in range(n)]  # noqa: E731
    units = [([], [TokenSequence(ids(n), (n - 1,))]) for n in lone]
    for _ in range(groups):
        conts = [ids(rng.randint(1, 20)) for _ in range(rng.randint(2, 4))]
        units.append((ids(rng.randint(10, 40)), [TokenSequence(c, (0, len(c) - 1)) for c in conts]))
    return units


def test_layout_survives_its_table():
    """Attention inside a compiled layer rebuilds the layout from its tensor form."""
    units = random_units(random.Random(0), (7, 30), groups=2)
    layout = pack(units, torch.device("cpu"), multiple=16).layout
    rebuilt = Layout.from_table(layout.table.tolist(), torch.device("cpu"))
    assert rebuilt.length == layout.length
    for a, b in zip(rebuilt.segments, layout.segments, strict=True):
        assert (a.start, a.length, a.prefix) == (b.start, b.length, b.prefix)
        assert (a.mask is None) == (b.mask is None)
        if a.mask is not None:
            assert torch.equal(a.mask, b.mask)


@pytest.mark.parametrize("fixture,task,token_ids", [("qwen3_rm", "classify", None), ("judge_lm", "lm", [11, 42, 99])])
def test_compiled_layers_read_the_eager_numbers(request, fixture, task, token_ids):
    source = str(request.getfixturevalue(fixture))
    compiled = make_backend(ModelSpec(name="m", source=source), task)
    eager = make_backend(ModelSpec(name="m", source=source, options={"compile_layers": False}), task)
    layers = compiled.base.layers
    assert compiled.compiled_layers == len(layers) - 1 and isinstance(layers[0], CompiledLayer)
    assert eager.compiled_layers == 0 and not any(isinstance(x, CompiledLayer) for x in eager.base.layers)
    units = random_units(random.Random(1), (5, 33, 60), groups=2)
    for got, want in zip(compiled.read_packed(units, token_ids), eager.read_packed(units, token_ids)):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def test_new_batches_reuse_the_compiled_graph(qwen3_rm):
    """Row counts, segment counts and prefixes differ from batch to batch (a row of one
    sequence of exactly 32 tokens has a single segment): none of them compiles again."""
    backend = make_backend(ModelSpec(name="m", source=str(qwen3_rm)), "classify")
    assert backend.compiled_layers
    rng = random.Random(2)
    graphs = counters["stats"]["unique_graphs"]
    for lone, groups in (((32,), 0), ((9, 100, 41), 0), ((3,), 3), ((200, 17), 1)):
        backend.read_packed(random_units(rng, lone, groups))
    assert counters["stats"]["unique_graphs"] == graphs


def test_bf16_compiled_layers_stay_within_rounding(qwen3_rm):
    """bf16 compiled layers against transformers' fp32 forward: as close as eager bf16 is."""
    from transformers import AutoModelForSequenceClassification

    sequences = [[5 + (i * 7 + j) % 400 for j in range(n)] for i, n in enumerate((9, 23, 40, 70))]
    units = [([], [TokenSequence(ids, (len(ids) - 1,))]) for ids in sequences]
    reference = AutoModelForSequenceClassification.from_pretrained(qwen3_rm, dtype=torch.float32).eval()
    with torch.inference_mode():
        want = np.array([reference(input_ids=torch.tensor([ids])).logits[0, 0].item() for ids in sequences])
    errors = {}
    for layers in (True, False):
        backend = make_backend(
            ModelSpec(name="m", source=str(qwen3_rm), dtype="bfloat16", options={"compile_layers": layers}), "classify"
        )
        assert bool(backend.compiled_layers) is layers
        got = np.array([rows[0][0, 0] for rows in backend.read_packed(units)])
        errors[layers] = np.abs(got - want).max()
    scale = max(1.0, float(np.abs(want).max()))
    assert errors[True] < 3e-2 * scale and errors[True] < 3 * errors[False] + 1e-2 * scale
