"""Reward-health metrics: the score histogram, the share of zero-variance groups and the
score-length correlation over a sliding window, against hand computations."""

from __future__ import annotations

import statistics

import pytest

from rewardserve.protocol import Item, ItemResult
from rewardserve.service.observability.metrics import Metrics
from rewardserve.service.observability.reward_health import ITEM_WINDOW, RewardHealth, _Window
from tests.harness import metric


def scored(model_scores: list[tuple[str, float | None]], group: str | None = None):
    items = [Item(prompt="p", response=text, group_id=group) for text, _ in model_scores]
    results = [ItemResult(score=s) if s is not None else ItemResult(valid=False, error="x") for _, s in model_scores]
    return items, results


def test_length_correlation_is_pearson_s_r_over_the_window():
    health = RewardHealth(metrics := Metrics())
    pairs = [("a" * n, float(s)) for n, s in [(1, 0.1), (5, 0.4), (9, 0.8), (3, 0.5), (7, 0.2)]]
    health.observe("rm", *scored(pairs))
    expected = statistics.correlation([1, 5, 9, 3, 7], [0.1, 0.4, 0.8, 0.5, 0.2])
    text = metrics.render().decode()
    assert metric(text, "rewardserve_reward_length_correlation", model="rm") == pytest.approx(expected)
    assert metric(text, "rewardserve_reward_score_count", model="rm") == 5


def test_the_window_forgets_the_oldest():
    window = _Window(3)
    for x, y in [(100.0, -5.0), (1.0, 1.0), (2.0, 2.0), (3.0, 3.5)]:
        window.add(x, y)
    assert window.correlation() == pytest.approx(statistics.correlation([1, 2, 3], [1, 2, 3.5]))
    assert ITEM_WINDOW >= 1000


def test_zero_variance_groups_and_invalid_items():
    health = RewardHealth(metrics := Metrics())
    health.observe("rm", *scored([("a", 1.0), ("b", 1.0), ("c", None)], group="g1"))  # alike (invalid left out)
    health.observe("rm", *scored([("a", 1.0), ("b", 0.0)], group="g2"))
    health.observe("rm", *scored([("a", 0.5)], group="g3"))  # one member: no variance to speak of
    text = metrics.render().decode()
    assert metric(text, "rewardserve_reward_zero_variance_groups_ratio", model="rm") == 0.5
    assert metric(text, "rewardserve_reward_score_count", model="rm") == 5
