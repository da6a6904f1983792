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
  running`` reads (models/operations/scales.py).
- ``rewardserve_reward_alarm{model,tenant,alarm}``: 1 while a reward-hacking alarm is on
  (service/observability/hacking_alarms.py: length, variance, dominance, drift, truncation), each
  model and tenant against its own first window of groups; a warning line in the log
  when one starts and when it ends, and the start in the answer's ``warnings``.

Every update is O(items of the request): the windows keep running sums.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Sequence

from prometheus_client import Gauge, Histogram

from rewardserve.protocol import Item, ItemResult
from rewardserve.service.observability.hacking_alarms import ALARMS, Alarms, Group
from rewardserve.service.observability.metrics import Metrics

log = logging.getLogger(__name__)
ITEM_WINDOW = 2000
MAX_ALARM_SETS = 1024  # (model, tenant) pairs watched: bounded, the oldest let go
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
        self.alarm = Gauge(
            "rewardserve_reward_alarm",
            "1 while a reward-hacking alarm is on: " + ", ".join(ALARMS),
            ["model", "tenant", "alarm"],
            registry=r,
        )
        self._lock = threading.Lock()
        self._items: dict[str, _Window] = {}
        self._groups: dict[str, deque[bool]] = {}
        self._alarms: dict[tuple[str, str], Alarms] = {}

    def alarms(self, model: str, tenant: str, items: Sequence[Item], results: Sequence[ItemResult]) -> list[str]:
        """The request's groups to ``model``'s and ``tenant``'s alarms; a line for each
        alarm that started (and a log line for each that started or ended)."""
        groups = _groups(items, results)
        if not groups:
            return []
        with self._lock:
            key = (model, tenant)
            watched = self._alarms.pop(key, None) or Alarms()
            self._alarms[key] = watched  # the most recent last: the oldest goes first
            while len(self._alarms) > MAX_ALARM_SETS:
                self._alarms.pop(next(iter(self._alarms)))
            for group in groups:
                watched.observe_group(group)
            started, ended = watched.evaluate()
        return self._announce(model, tenant, started, ended)

    def reference(
        self,
        model: str,
        tenant: str,
        results: Sequence[ItemResult],
        reference: Sequence[ItemResult],
    ) -> None:
        """A frozen reference's scores of items ``model`` scored (its shadow candidate):
        the drift alarm's pairs. The answers went out already: a start is logged only."""
        pairs = [
            (float(a.score), float(b.score))
            for a, b in zip(results, reference)
            if a.valid and b.valid and a.score is not None and b.score is not None
        ]
        if not pairs:
            return
        with self._lock:
            watched = self._alarms.get((model, tenant))
            if watched is None:
                return  # no group of this model and tenant seen yet
            watched.observe_reference(pairs)
            started, ended = watched.evaluate()
        self._announce(model, tenant, started, ended)

    def _announce(self, model: str, tenant: str, started: set[str], ended: set[str]) -> list[str]:
        lines = []
        for name in sorted(started):
            self.alarm.labels(model, tenant, name).set(1)
            line = f"reward alarm {name!r} started for model {model!r} ({tenant or 'no tenant'}): {ALARM_MEANING[name]}"
            log.warning("%s", line)
            lines.append(line)
        for name in sorted(ended):
            self.alarm.labels(model, tenant, name).set(0)
            log.warning("reward alarm %r ended for model %r (%s)", name, model, tenant or "no tenant")
        return lines

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


ALARM_MEANING = {
    "length": "reward rises with response length within groups, past the run's first window",
    "variance": "groups score all alike (GRPO learns nothing from them), past the run's first window",
    "dominance": "one component carries nearly all of the reward's variance",
    "drift": "the rank agreement with the frozen reference fell, or the proxy-gold gap rose",
    "truncation": "more items are cut to fit the model's context than in the run's first window",
}


def _components(result: ItemResult) -> dict[str, float]:
    if result.components:
        return {name: v for name, v in result.components.items() if v is not None}
    criteria = getattr(result, "criteria", None) or []
    return {c.name: c.score * c.weight for c in criteria if c.valid and c.score is not None}


def _groups(items: Sequence[Item], results: Sequence[ItemResult]) -> list[Group]:
    """The request's GRPO groups (items sharing a group_id, scored), as the alarms read them."""
    by_id: dict[str, Group] = {}
    for item, result in zip(items, results):
        if item.group_id is None or not result.valid or result.score is None:
            continue
        group = by_id.setdefault(item.group_id, Group([], []))
        group.rewards.append(float(result.score))
        group.lengths.append(float(response_length(item)))
        group.truncated.append(bool(result.truncated))
        parts = _components(result)
        if parts:
            group.components.append(parts)
    return list(by_id.values())
