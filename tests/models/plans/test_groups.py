"""GRPO normalisation within groups: outcome advantages and step shaping."""

from __future__ import annotations

import pytest

from rewardserve.client.protocol import Item, ItemResult
from rewardserve.models.plans.groups import delta_rewards, group_advantages, group_process_advantages


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
