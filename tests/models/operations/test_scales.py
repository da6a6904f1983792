"""Each normalisation mode against a hand computation; running statistics under
concurrent requests."""

from __future__ import annotations

import math
import statistics
import threading

import pytest

from rewardserve.models.operations.scales import RUNNING_WARMUP, RunningScore, normalize_scores


def test_none_and_sigmoid_by_hand():
    raw = [2.0, None, -1.0]
    assert normalize_scores("none", raw, [0, 1, 2]) == (raw, None)
    scaled, _ = normalize_scores("sigmoid", raw, [0, 1, 2])
    assert scaled[0] == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert scaled[1] is None
    assert scaled[2] == pytest.approx(1 / (1 + math.exp(1.0)))


def test_group_z_scores_within_each_group_by_hand():
    raw = [1.0, 2.0, 3.0, None, 10.0, 5.0]
    groups = ["a", "a", "a", "a", "b", "c"]
    scaled, _ = normalize_scores("group", raw, groups)
    std = statistics.stdev([1.0, 2.0, 3.0])  # sample standard deviation, as GRPO
    assert scaled[:3] == pytest.approx([(1 - 2) / (std + 1e-6), 0.0, (3 - 2) / (std + 1e-6)])
    assert scaled[3] is None  # invalid stays invalid, and is not counted in its group
    assert scaled[4] == 0.0 and scaled[5] == 0.0  # a group of one


def test_running_reads_every_score_against_the_statistics_after_the_request():
    running = RunningScore()
    first, stats = normalize_scores("running", [1.0, 2.0, 3.0], [0, 1, 2], running)
    assert stats.count == 3 and stats.mean == pytest.approx(2.0)
    assert first == pytest.approx([(x - 2.0) / (1.0 + 1e-6) for x in (1.0, 2.0, 3.0)])
    second, stats = normalize_scores("running", [4.0, None], [0, 1], running)
    mean, std = statistics.mean([1, 2, 3, 4]), statistics.stdev([1, 2, 3, 4])
    assert (stats.count, stats.mean, stats.std) == (4, pytest.approx(mean), pytest.approx(std))
    assert second[0] == pytest.approx((4.0 - mean) / (std + 1e-6)) and second[1] is None
    assert not stats.warm and RUNNING_WARMUP == 100


def test_one_score_is_zero_not_a_division_by_zero():
    scaled, stats = normalize_scores("running", [5.0], [0], RunningScore())
    assert scaled == [0.0] and stats.count == 1 and stats.std == 0.0


def test_concurrent_requests_lose_no_update():
    running = RunningScore()
    values = [[float((t * 1000 + i) % 97) for i in range(500)] for t in range(8)]
    threads = [threading.Thread(target=lambda v=v: [running.add([x]) for x in v]) for v in values]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [x for v in values for x in v]
    stats = running.snapshot()
    assert stats.count == len(everything)
    assert stats.mean == pytest.approx(statistics.mean(everything))
    assert stats.std == pytest.approx(statistics.stdev(everything))
