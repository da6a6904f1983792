"""When a canary is judged unhealthy (service/ops/canary_watch.py): a canary as good as the
serving version is not stopped by the chance of its traffic, and one whose items are all
invalid is."""

from __future__ import annotations

import random

from rewardserve.service.ops.canary_watch import REQUESTS_KEPT, CanaryWatch


def traffic(rng: random.Random, watch: CanaryWatch, share: float, bad_canary: bool, requests: int) -> str | None:
    """Requests of 1-8 items; a quarter of them come whole invalid (the callers' own
    items, say over the length), the same for both sides; ``share`` of them to the canary."""
    for _ in range(requests):
        size = rng.randint(1, 8)
        on_canary = rng.random() < share
        callers_fault = rng.random() < 0.25
        valid = [not callers_fault and not (bad_canary and on_canary)] * size
        watch.observe(on_canary, valid)
        reason = watch.verdict()
        if reason is not None:
            return reason
    return None


def test_a_canary_as_good_as_the_serving_version_is_not_stopped_by_chance():
    stopped = 0
    for seed in range(1000):
        rng = random.Random(seed)
        share = rng.choice([0.05, 0.25, 0.5, 0.9, 1.0])
        stopped += traffic(rng, CanaryWatch("v2", "v1"), share, bad_canary=False, requests=400) is not None
    assert stopped == 0


def test_a_canary_whose_items_are_all_invalid_is_stopped_soon():
    for seed in range(50):
        rng = random.Random(seed)
        watch = CanaryWatch("v2", "v1")
        reason = traffic(rng, watch, 0.5, bad_canary=True, requests=400)
        assert reason is not None and "v2" in reason, seed
        assert len(watch.canary) <= REQUESTS_KEPT  # within its window


def test_failed_requests_stop_even_a_canary_that_takes_every_request():
    watch = CanaryWatch("v2", "v1")
    for _ in range(3):
        watch.observe_failure()
    assert "3 requests failed" in (watch.verdict() or "")
