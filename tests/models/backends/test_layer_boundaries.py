"""A forward run whole between two layers of another (what the batcher does for a light
tenant while a flood's batch is in flight) leaves both forwards' numbers as they are."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rewardserve.models.backends import TokenSequence, make_backend
from rewardserve.models.backends.layer_boundaries import layer_boundary, run_between_layers
from rewardserve.models.spec import ModelSpec


def random_units(rng: random.Random, groups: int, lone: int):
    units = []
    for _ in range(groups):
        prefix = [rng.randrange(10, 500) for _ in range(rng.randint(20, 40))]
        conts = [[rng.randrange(10, 500) for _ in range(rng.randint(3, 20))] for _ in range(3)]
        units.append((prefix, [TokenSequence(c, (len(c) - 1,)) for c in conts]))
    for _ in range(lone):
        ids = [rng.randrange(10, 500) for _ in range(rng.randint(5, 50))]
        units.append(([], [TokenSequence(ids, (len(ids) - 1,))]))
    return units


@pytest.mark.parametrize("fixture,task,token_ids", [("qwen3_rm", "classify", None), ("judge_lm", "lm", [11, 42])])
def test_a_forward_between_the_layers_of_another_changes_neither(request, fixture, task, token_ids):
    backend = make_backend(ModelSpec(name="m", source=str(request.getfixturevalue(fixture))), task)
    assert backend.batch_preferences["preemptible"] and backend.preemptible
    rng = random.Random(3)
    outer, inner = random_units(rng, 2, 3), random_units(rng, 1, 1)
    inner_plain = [TokenSequence(ids, (len(ids) - 1,)) for ids in ([5, 6, 7, 8], [9, 10])]
    want_outer, want_inner = backend.read_packed(outer, token_ids), backend.read_packed(inner, token_ids)
    want_plain = backend.read(inner_plain, token_ids)
    boundaries: list[tuple] = []

    def between() -> None:  # at the first boundary a packed forward, at the second a padded one
        if len(boundaries) == 0:
            boundaries.append(("packed", backend.read_packed(inner, token_ids)))
        elif len(boundaries) == 1:
            boundaries.append(("padded", backend.read(inner_plain, token_ids)))
        else:
            boundaries.append(("none", None))

    with backend.between_layers(between):  # the capability the backend declares
        got_outer = backend.read_packed(outer, token_ids)
        layer_boundary()  # outside a forward too: the callback runs, once per call
    layers = backend.base.config.num_hidden_layers
    assert len(boundaries) == layers + 1  # one a layer (nested forwards add none), one outside
    for got, want in zip(got_outer + boundaries[0][1], want_outer + want_inner):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    for a, b in zip(boundaries[1][1], want_plain):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_the_option_off_leaves_the_layers_unmarked(qwen3_rm):
    spec = ModelSpec(name="m", source=str(qwen3_rm), options={"layer_boundaries": False, "compile_layers": False})
    backend = make_backend(spec, "classify")
    assert "preemptible" not in backend.batch_preferences
    calls: list[int] = []
    with run_between_layers(lambda: calls.append(1)):
        backend.read([TokenSequence([5, 6, 7], (2,))])
    assert calls == []
    assert not backend.preemptible
    with backend.between_layers(lambda: calls.append(1)):  # not declared: nothing runs there
        layer_boundary()
    assert calls == []
