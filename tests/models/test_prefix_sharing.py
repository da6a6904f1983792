"""How a batch's units reach a backend: packed, on a prefix's KV cache, or (engines that
cache prefixes themselves) as whole sequences in one read. Same numbers every way."""

from __future__ import annotations

import random

import numpy as np

from rewardserve.models.backends import TokenSequence, make_backend
from rewardserve.models.plan import Job, Unit
from rewardserve.models.prefix_sharing import SharedUnit, read_units
from rewardserve.models.spec import ModelSpec


def batch_of_units(seed: int) -> list[Unit]:
    """Two units sharing a prefix each and two plain sequences, interleaved."""
    rng = random.Random(seed)
    ids = lambda n: [rng.randrange(10, 500) for _ in range(n)]  # noqa: E731
    works = []
    for _ in range(2):
        prefix = ids(40)
        suffixes = [TokenSequence(s, (len(s) - 1,)) for s in (ids(rng.randint(2, 20)) for _ in range(3))]
        works.append(Unit(length=0, payload=SharedUnit(prefix, [], suffixes), members=3))
        plain = ids(rng.randint(5, 30))
        works.append(Unit(length=len(plain), payload=Job(len(plain), TokenSequence(plain, (len(plain) - 1,)))))
    return works


def test_engines_caching_prefixes_get_every_unit_in_one_read(qwen3_rm):
    backend = make_backend(ModelSpec(name="m", source=str(qwen3_rm), options={"packing": False}), "classify")
    batch = batch_of_units(3)
    seq_of = lambda job: job.payload  # noqa: E731
    want = read_units(backend, batch, seq_of)  # plain ones padded, each prefix on its KV cache

    reads = []
    plain_read = backend.read

    def recording_read(seqs, token_ids=None):
        reads.append(len(seqs))
        return plain_read(seqs, token_ids)

    backend.read, backend.caches_prefixes = recording_read, True
    got = read_units(backend, batch, seq_of)
    assert reads == [3 + 1 + 3 + 1]  # all eight sequences at once, nothing waited on
    for w, a, b in zip(batch, got, want):
        if isinstance(w.payload, SharedUnit):
            assert len(a) == len(b) == 3
            for x, y in zip(a, b):
                np.testing.assert_allclose(x, y, atol=1e-4, rtol=1e-4)
        else:
            assert len(a) == len(b) == 1
            np.testing.assert_allclose(a[0], b[0], atol=1e-4, rtol=1e-4)
