"""GRPO normalisation within groups: outcome advantages and step shaping."""

from __future__ import annotations

import pytest

from rewardserve.models.operations.groups import (
    delta_rewards,
    group_advantages,
    group_process_advantages,
    potential_rewards,
)
from rewardserve.protocol import Item, ItemResult


def test_delta_and_group_process_advantages():
    assert delta_rewards([0.5, 0.7, None, 0.2]) == pytest.approx([0.5, 0.2, None, -0.5])
    (group,) = group_process_advantages([[[1.0, 0.0], [0.5]]])
    flat = [1.0, 0.0, 0.5]
    mean, std = 0.5, 0.5
    normed = [(x - mean) / (std + 1e-6) for x in flat]
    assert group[0] == pytest.approx([normed[0] + normed[1], normed[1]])
    assert group[1] == pytest.approx([normed[2]])


def test_group_advantages_use_the_sample_std_and_skip_invalid_items():
    items = [Item(prompt="p", response=str(i), group_id="g") for i in range(3)] + [Item(prompt="p", response="x")]
    results = [
        ItemResult(score=1.0),
        ItemResult(score=3.0),
        ItemResult(score=None, valid=False, error="e"),
        ItemResult(score=7.0),
    ]
    out = group_advantages(items, results)
    assert [r.advantage for r in out[:2]] == pytest.approx([-1 / (2**0.5 + 1e-6), 1 / (2**0.5 + 1e-6)])
    assert out[2].advantage is None and out[3].advantage == 0.0


def test_potential_shaping_is_gamma_times_the_next_potential_less_this_one():
    assert potential_rewards([0.5, 0.7, 0.2], gamma=0.9) == pytest.approx([0.45, 0.63 - 0.5, 0.0 - 0.7])
    assert potential_rewards([0.5, None, 0.2, None]) == pytest.approx([0.5, None, -0.5, None])
    assert potential_rewards([]) == [] and potential_rewards([None]) == [None]


def _returns(scores_of, outcome, gamma, shape):
    """Each trajectory of a toy chain (three steps, two actions each): its discounted
    return, the outcome at the end plus the shaped step rewards of its prefixes' scores."""
    import itertools

    out = {}
    for path in itertools.product((0, 1), repeat=3):
        rewards = shape([scores_of(path[: t + 1]) for t in range(3)])
        rewards[-1] += outcome(path)
        out[path] = sum(gamma**t * r for t, r in enumerate(rewards))
    return out


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.5])
def test_potential_shaping_leaves_the_best_actions_of_a_toy_chain_unchanged(seed, gamma):
    import random

    rng = random.Random(seed)
    potential = {}
    outcome = {}

    def scores_of(prefix):  # a process reward model's score of a prefix: anything at all
        return potential.setdefault(prefix, rng.random())

    def outcome_of(path):
        return outcome.setdefault(path, float(rng.random() < 0.5))

    plain = _returns(scores_of, outcome_of, gamma, lambda scores: [0.0] * len(scores))
    shaped = _returns(scores_of, outcome_of, gamma, lambda scores: potential_rewards(scores, gamma))
    for path in plain:  # every return is as it was, so the best trajectories and actions are too
        assert shaped[path] == pytest.approx(plain[path], abs=1e-12)
    best = {path for path in plain if plain[path] >= max(plain.values()) - 1e-9}
    assert {path for path in shaped if shaped[path] >= max(shaped.values()) - 1e-9} == best


def test_delta_shaping_makes_the_last_step_score_part_of_the_objective():
    """Why ``delta`` is not policy-invariant: its rewards sum to the last step's score, so
    a trajectory the process model likes can beat the one the outcome rewards."""
    potential = {(0,): 0.1, (1,): 0.9}
    outcome = {(0,): 1.0, (1,): 0.5}

    def best(shape):
        returns = {path: sum(shape([potential[path]])) + outcome[path] for path in potential}
        return max(returns, key=returns.get)

    assert best(lambda s: potential_rewards(s)) == (0,)  # the outcome's choice
    assert best(delta_rewards) == (1,)
