"""Reward health, per model, on /metrics: how a run's reward is behaving.

- ``rewardserve_reward_score``: a histogram of the scores given.
- ``rewardserve_reward_zero_variance_groups_ratio``: of the last GROUP_WINDOW GRPO
  groups (items sharing a group_id in one request, two or more valid), the share scored
  all alike: such a group has no advantage to learn from.
- ``rewardserve_reward_length_correlation``: Pearson's correlation of score with
  response length (characters; tokens for ``input_ids``) over the last ITEM_WINDOW
  items. A correlation that keeps rising is a classic sign of the policy hacking the
  reward by writing longer.
- ``rewardserve_running_{count,mean,std}``: the running statistics ``normalize:
  running`` reads (models/plans/running.py).

Every update is O(items of the request): the windows keep running sums.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Sequence

from prometheus_client import Gauge, Histogram

from rewardserve.client.protocol import Item, ItemResult
from rewardserve.service.metrics import Metrics

ITEM_WINDOW = 2000
GROUP_WINDOW = 500
_SCORE_BUCKETS = (-10, -5, -2, -1, -0.5, 0, 0.1, 0.25, 0.5, 0.75, 0.9, 1, 2, 5, 10)


def response_length(item: Item) -> int:
    if item.input_ids is not None:
        return len(item.input_ids)
    if item.text is not None:
        return len(item.text)
    return len(item.response_text())


class _Window:
    """Score and length of the last ``size`` items, with the sums Pearson's r needs."""

    def __init__(self, size: int) -> None:
        self.pairs: deque[tuple[float, float]] = deque()
        self.size = size
        self.sums = [0.0] * 5  # x, y, xx, yy, xy

    def add(self, x: float, y: float) -> None:
        if len(self.pairs) == self.size:
            self._count(*self.pairs.popleft(), sign=-1.0)
        self.pairs.append((x, y))
        self._count(x, y, sign=1.0)

    def _count(self, x: float, y: float, sign: float) -> None:
        for i, value in enumerate((x, y, x * x, y * y, x * y)):
            self.sums[i] += sign * value

    def correlation(self) -> float | None:
        n = len(self.pairs)
        if n < 3:
            return None
        sx, sy, sxx, syy, sxy = self.sums
        vx, vy = n * sxx - sx * sx, n * syy - sy * sy
        if vx <= 1e-12 * max(1.0, n * sxx) or vy <= 1e-12 * max(1.0, n * syy):
            return None  # one length or one score: no correlation to speak of
        return max(-1.0, min(1.0, (n * sxy - sx * sy) / math.sqrt(vx * vy)))


class RewardHealth:
    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self.scores = Histogram(
            "rewardserve_reward_score", "Scores given", ["model"], buckets=_SCORE_BUCKETS, registry=r
        )
        self.zero_variance = Gauge(
            "rewardserve_reward_zero_variance_groups_ratio",
            f"Share of the last {GROUP_WINDOW} groups scored all alike",
            ["model"],
            registry=r,
        )
        self.length_correlation = Gauge(
            "rewardserve_reward_length_correlation",
            f"Correlation of score with response length, last {ITEM_WINDOW} items",
            ["model"],
            registry=r,
        )
        self.running = {
            stat: Gauge(
                f"rewardserve_running_{stat}",
                f"Running {stat} of the model's scores (normalize: running), kept per tenant",
                ["model", "tenant"],
                registry=r,
            )
            for stat in ("count", "mean", "std")
        }
        self._lock = threading.Lock()
        self._items: dict[str, _Window] = {}
        self._groups: dict[str, deque[bool]] = {}

    def observe(self, model: str, items: Sequence[Item], results: Sequence[ItemResult]) -> None:
        members: dict[str, list[float]] = {}
        with self._lock:
            window = self._items.setdefault(model, _Window(ITEM_WINDOW))
            for item, result in zip(items, results):
                if not result.valid or result.score is None:
                    continue
                self.scores.labels(model).observe(result.score)
                window.add(float(response_length(item)), result.score)
                if item.group_id is not None:
                    members.setdefault(item.group_id, []).append(result.score)
            groups = self._groups.setdefault(model, deque(maxlen=GROUP_WINDOW))
            groups.extend(max(s) - min(s) <= 1e-9 for s in members.values() if len(s) > 1)
            if groups:
                self.zero_variance.labels(model).set(sum(groups) / len(groups))
            correlation = window.correlation()
        if correlation is not None:
            self.length_correlation.labels(model).set(correlation)

    def running_stats(self, model: str, tenant: str, count: int, mean: float, std: float) -> None:
        for stat, value in (("count", count), ("mean", mean), ("std", std)):
            self.running[stat].labels(model, tenant).set(value)
