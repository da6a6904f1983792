"""Packed rows (many sequences, shared prefixes, no padding) read the same numbers as
each sequence on its own."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rewardserve.models.backends import Sequence, make_backend
from rewardserve.models.backends.base import after_prefix
from rewardserve.models.backends.packing import pack
from rewardserve.models.spec import ModelSpec


def random_ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(10, 500) for _ in range(n)]


@pytest.mark.parametrize("fixture,task,token_ids", [("qwen3_rm", "classify", None),
                                                    ("llama_rm", "classify", None),
                                                    ("judge_lm", "lm", [11, 42, 99])])
def test_packed_rows_equal_separate_forwards(request, fixture, task, token_ids):
    backend = make_backend(ModelSpec(name="m", source=str(request.getfixturevalue(fixture))), task)
    assert backend.packs
    rng = random.Random(0)
    units = []
    for _ in range(3):  # groups sharing a prefix
        prefix = random_ids(rng, rng.randint(20, 60))
        conts = [random_ids(rng, rng.randint(1, 30)) for _ in range(rng.randint(2, 5))]
        units.append((prefix, [Sequence(c, tuple(sorted({len(c) - 1, rng.randrange(len(c))}))) for c in conts]))
    for _ in range(4):  # plain sequences
        ids = random_ids(rng, rng.randint(5, 70))
        units.append(([], [Sequence(ids, (len(ids) - 1,))]))
    rng.shuffle(units)
    packed = backend.read_packed(units, token_ids)
    for (prefix, conts), rows in zip(units, packed):
        for alone, got in zip(after_prefix(prefix, conts), rows):
            (expected,) = backend.read([alone], token_ids)
            np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_mask_keeps_continuations_apart():
    units = [([1, 2], [Sequence([3, 4], (1,)), Sequence([5], (0,))]), ([], [Sequence([6, 7], (1,))])]
    packed = pack(units, device=__import__("torch").device("cpu"))
    mask = packed.mask[0, 0].int().tolist()
    # tokens: 1 2 | 3 4 | 5 || 6 7
    assert mask[4] == [1, 1, 0, 0, 1, 0, 0]  # "5" sees the prefix and itself, not "3 4"
    assert mask[3] == [1, 1, 1, 1, 0, 0, 0]
    assert mask[6] == [0, 0, 0, 0, 0, 1, 1]  # the second unit sees nothing of the first
    assert packed.position_ids[0].tolist() == [0, 1, 2, 3, 2, 0, 1]
    assert packed.readouts == [[[3], [4]], [[6]]]
