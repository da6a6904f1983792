"""Live reward-hacking alarms over a sliding window of scored GRPO groups, each against
the run's own first window (its baseline), not a fixed threshold.

    length          the within-group correlation of reward with response length rose
                    (Fisher's z of the window against the baseline's): the policy is
                    paid for writing longer, not better
    variance        the groups' rewards collapsed: the share of groups scored all alike
                    rose, or the mean within-group spread fell to a fraction of the
                    baseline's (GRPO learns nothing from such groups)
    dominance       one component of a rubric or an ensemble carries nearly all of the
                    reward's variance, where at the baseline it did not
    drift           against a frozen reference scoring a sample of the same items in
                    shadow: the rank correlation fell, or the proxy-gold gap (the
                    model's standardised score minus the reference's) rose
    truncation      the share of items cut to fit the model's context rose

An alarm starts when its statistic passes its bound and ends when the statistic is back
below a lower one (so it does not flicker). A group is the items of one request sharing
a ``group_id``; ``observe_group`` takes one, ``evaluate`` the alarms now. The numbers are
pure arithmetic here; service/observability/reward_health.py keeps one ``Alarms`` per model and tenant,
sets the gauges and logs each start and end.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from rewardserve.service.observability.shadow import spearman

ALARMS = ("length", "variance", "dominance", "drift", "truncation")
WINDOW_GROUPS = 64  # groups in the window, and in the baseline (the run's first window)
# How far past the baseline a statistic must be to start an alarm, and below which it ends.
Z_START, Z_END = 4.5, 2.0
MIN_LENGTH_RISE = 0.15  # in correlation, beside the z bound
SPREAD_FALL = 0.25  # the window's mean within-group spread under this share of the baseline's
MIN_FLAT_RISE = 0.25
DOMINANT_SHARE, DOMINANT_RISE = 0.85, 0.2
MIN_DRIFT_PAIRS = 30
DRIFT_WINDOW = 256  # reference pairs in the drift window, and in its baseline
DRIFT_RHO_FALL, DRIFT_GAP_RISE = 0.3, 0.75
MIN_TRUNCATION_RISE = 0.1


@dataclass
class Group:
    """One scored group: each item's reward, response length, whether it was truncated,
    its components (a rubric's criteria, an ensemble's members: each weighted
    contribution), and the frozen reference's score where one was taken."""

    rewards: list[float]
    lengths: list[float]
    truncated: list[bool] = field(default_factory=list)
    components: list[dict[str, float]] = field(default_factory=list)
    reference: list[float | None] = field(default_factory=list)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# The sums a set of groups is read from: a group's are added when it arrives and taken
# away when it leaves the window, so reading the window costs nothing per item.
_FIELDS = ("pairs", "sxx", "syy", "sxy", "sized", "flat", "spread", "items", "truncated")


@dataclass
class _Sums:
    values: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_FIELDS, 0.0))
    components: dict[str, list[float]] = field(default_factory=dict)  # name -> [count, sum, sum of squares]
    drift: list[tuple[float, float]] = field(default_factory=list)  # (score, reference score)

    def add(self, other: _Sums, sign: float = 1.0) -> None:
        for key, value in other.values.items():
            self.values[key] += sign * value
        for name, parts in other.components.items():
            mine = self.components.setdefault(name, [0.0, 0.0, 0.0])
            for k in range(3):
                mine[k] += sign * parts[k]

    def correlation(self) -> float | None:
        v = self.values
        if v["pairs"] < 3 or v["sxx"] <= 1e-12 or v["syy"] <= 1e-12:
            return None
        return max(-1.0, min(1.0, v["sxy"] / math.sqrt(v["sxx"] * v["syy"])))

    def dominance(self) -> float | None:
        variances = [ss / n - (s / n) ** 2 for n, s, ss in self.components.values() if n >= 2]
        total = sum(variances)
        return max(variances) / total if len(variances) >= 2 and total > 1e-12 else None


def summarise(group: Group) -> _Sums:
    out = _Sums()
    v = out.values
    n = len(group.rewards)
    v["items"], v["truncated"] = n, float(sum(group.truncated))
    if n >= 2:
        mr, ml = _mean(group.rewards), _mean(group.lengths)
        for reward, length in zip(group.rewards, group.lengths):
            x, y = length - ml, reward - mr
            v["sxx"] += x * x
            v["syy"] += y * y
            v["sxy"] += x * y
        deviation = math.sqrt(sum((r - mr) ** 2 for r in group.rewards) / (n - 1))
        v["pairs"], v["sized"], v["spread"], v["flat"] = n, 1, deviation, float(deviation <= 1e-9)
    for parts in group.components:
        for name, value in parts.items():
            acc = out.components.setdefault(name, [0.0, 0.0, 0.0])
            acc[0] += 1
            acc[1] += value
            acc[2] += value * value
    out.drift = [(r, g) for r, g in zip(group.rewards, group.reference) if g is not None]
    return out


def _fisher(r: float) -> float:
    return math.atanh(max(-0.999999, min(0.999999, r)))


def _proportion_z(now: float, n_now: float, base: float, n_base: float) -> float:
    pooled = (now * n_now + base * n_base) / (n_now + n_base)
    se = math.sqrt(max(pooled * (1 - pooled), 1e-12) * (1 / n_now + 1 / n_base))
    return (now - base) / se


def _sd(values: Sequence[float]) -> float:
    m = _mean(values)
    return math.sqrt(max(0.0, _mean([v * v for v in values]) - m * m))


@dataclass(frozen=True)
class _Drift:
    """The reference pairs of a set of groups: the rank correlation, and each side's mean
    and standard deviation."""

    pairs: int
    rho: float | None
    proxy: tuple[float, float]
    gold: tuple[float, float]

    @classmethod
    def of(cls, pairs: list[tuple[float, float]]) -> _Drift:
        proxy, gold = [p for p, _ in pairs], [g for _, g in pairs]
        rho = spearman(proxy, gold) if len(pairs) >= MIN_DRIFT_PAIRS else None
        return cls(len(pairs), rho, (_mean(proxy), _sd(proxy)), (_mean(gold), _sd(gold)))


def _drift(now: _Drift, base: _Drift) -> float:
    if now.pairs < MIN_DRIFT_PAIRS or base.pairs < MIN_DRIFT_PAIRS:
        return 0.0
    fall = (base.rho - now.rho) / DRIFT_RHO_FALL if now.rho is not None and base.rho is not None else 0.0
    # The proxy-gold gap: how far the model's mean moved past the reference's, each in
    # its baseline's standard deviations.
    gap = 0.0
    if base.proxy[1] > 1e-12 and base.gold[1] > 1e-12:
        moved = (now.proxy[0] - base.proxy[0]) / base.proxy[1]
        moved_gold = (now.gold[0] - base.gold[0]) / base.gold[1]
        gap = (moved - moved_gold) / DRIFT_GAP_RISE
    return max(fall, gap)


def strengths(now: _Sums, base: _Sums, now_drift: _Drift, base_drift: _Drift) -> dict[str, float]:
    """Per alarm, how far the window is past the baseline, in units where 1.0 is the
    start bound (0 where the window cannot say)."""
    out = dict.fromkeys(ALARMS, 0.0)
    n, b = now.values, base.values
    r_now, r_base = now.correlation(), base.correlation()
    if r_now is not None and r_base is not None and n["pairs"] > 3 and b["pairs"] > 3:
        se = math.sqrt(1 / (n["pairs"] - 3) + 1 / (b["pairs"] - 3))
        z = (_fisher(r_now) - _fisher(r_base)) / se
        out["length"] = min(z / Z_START, (r_now - r_base) / MIN_LENGTH_RISE)
    if n["sized"] and b["sized"]:
        flat_now, flat_base = n["flat"] / n["sized"], b["flat"] / b["sized"]
        z = _proportion_z(flat_now, n["sized"], flat_base, b["sized"])
        flat = min(z / Z_START, (flat_now - flat_base) / MIN_FLAT_RISE)
        spread_now, spread_base = n["spread"] / n["sized"], b["spread"] / b["sized"]
        if spread_now > 1e-12:
            fell = SPREAD_FALL * spread_base / spread_now
        else:
            fell = 2.0 if spread_base > 1e-12 else 0.0
        out["variance"] = max(flat, fell)
    d_now, d_base = now.dominance(), base.dominance()
    if d_now is not None and d_base is not None:
        out["dominance"] = min(d_now / DOMINANT_SHARE, (d_now - d_base) / DOMINANT_RISE)
    out["drift"] = _drift(now_drift, base_drift)
    if n["items"] and b["items"]:
        t_now, t_base = n["truncated"] / n["items"], b["truncated"] / b["items"]
        z = _proportion_z(t_now, n["items"], t_base, b["items"])
        out["truncation"] = min(z / Z_START, (t_now - t_base) / MIN_TRUNCATION_RISE)
    return out


class Alarms:
    """One model's (and tenant's) alarms: the baseline is its first ``window`` groups,
    the window its last ones."""

    def __init__(self, window: int = WINDOW_GROUPS) -> None:
        self.window = window
        self.base = _Sums()
        self.base_groups = 0
        self.now = _Sums()
        self.recent: deque[_Sums] = deque()
        self.active: set[str] = set()
        self._base_drift: _Drift | None = None
        self._left = 0  # groups that left the window since its sums were last rebuilt
        # (score, reference score) pairs, apart from the groups: a reference scores a
        # sample of the items, later (shadow scoring), so its pairs have windows of their own.
        self.base_pairs: list[tuple[float, float]] = []
        self.recent_pairs: deque[tuple[float, float]] = deque(maxlen=DRIFT_WINDOW)

    def observe_reference(self, pairs: Sequence[tuple[float, float]]) -> None:
        for pair in pairs:
            if len(self.base_pairs) < DRIFT_WINDOW:
                self.base_pairs.append(pair)
            else:
                self.recent_pairs.append(pair)

    def observe_group(self, group: Group) -> None:
        summary = summarise(group)
        self.observe_reference(summary.drift)
        if self.base_groups < self.window:
            self.base.add(summary)
            self.base_groups += 1
            return
        self.recent.append(summary)
        self.now.add(summary)
        if len(self.recent) > self.window:
            self.now.add(self.recent.popleft(), sign=-1.0)
            self._left += 1
            if self._left >= self.window:  # what taking away leaves behind in the sums, cleared
                self.now, self._left = _Sums(), 0
                for kept in self.recent:
                    self.now.add(kept)

    def strengths(self) -> dict[str, float] | None:
        if len(self.recent) < self.window:
            return None
        if self._base_drift is None and len(self.base_pairs) == DRIFT_WINDOW:
            self._base_drift = _Drift.of(self.base_pairs)
        base_drift = self._base_drift or _Drift.of([])
        now_drift = _Drift.of(list(self.recent_pairs)) if len(self.recent_pairs) >= MIN_DRIFT_PAIRS else _Drift.of([])
        return strengths(self.now, self.base, now_drift, base_drift)

    def evaluate(self) -> tuple[set[str], set[str]]:
        """The alarms that started and those that ended since the last call."""
        values = self.strengths()
        if values is None:
            return set(), set()
        end_at = Z_END / Z_START
        started = {name for name, v in values.items() if v >= 1.0 and name not in self.active}
        ended = {name for name in self.active if values[name] < end_at}
        self.active = (self.active | started) - ended
        return started, ended
