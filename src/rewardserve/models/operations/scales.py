"""Putting a model's scores on a common scale before they are mixed with others.

none     the score as the model gives it
sigmoid  1 / (1 + e^-score): a logit-scale reward model's score in (0, 1)
group    z-score among the valid scores of the item's ``group_id`` in this request
         (sample standard deviation + 1e-6, as GRPO advantages; a group of one is 0)
running  z-score against the model's running mean and standard deviation on this
         replica: the request's scores are added first, then every score of the
         request is read against the statistics they leave. Kept in memory only: a
         restarted replica starts from zero, and replicas keep their own.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from rewardserve.models.operations.groups import GROUP_EPS, normalized
from rewardserve.models.reward_model import sigmoid
from rewardserve.protocol import Scale

# Below this many scores a model's running statistics are still settling; results
# normalised against them say so (``running_count``).
RUNNING_WARMUP = 100


@dataclass(frozen=True)
class RunningSnapshot:
    count: int
    mean: float
    std: float  # sample standard deviation; 0 below two scores

    def z(self, value: float) -> float:
        return (value - self.mean) / (self.std + GROUP_EPS) if self.count > 1 else 0.0

    @property
    def warm(self) -> bool:
        return self.count >= RUNNING_WARMUP


class RunningScore:
    """One served model's running mean and variance (Welford's update), shared by every
    request that normalises its scores with ``running``. Thread-safe: plans finish on
    worker threads, and no update may be lost between two of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._mean = 0.0
        self._m2 = 0.0

    def add(self, values: Sequence[float]) -> RunningSnapshot:
        """Count ``values`` in; the statistics they leave."""
        with self._lock:
            for value in values:
                self._count += 1
                delta = value - self._mean
                self._mean += delta / self._count
                self._m2 += delta * (value - self._mean)
            return self._snapshot()

    def snapshot(self) -> RunningSnapshot:
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> RunningSnapshot:
        std = math.sqrt(self._m2 / (self._count - 1)) if self._count > 1 else 0.0
        return RunningSnapshot(self._count, self._mean, std)


def normalize_scores(
    mode: Scale, raw: Sequence[float | None], groups: Sequence[Hashable], running: RunningScore | None = None
) -> tuple[list[float | None], RunningSnapshot | None]:
    """Each raw score (None: invalid, kept None) on ``mode``'s scale, and the running
    statistics used (``running`` only)."""
    if mode == "none":
        return list(raw), None
    if mode == "sigmoid":
        return [None if r is None else sigmoid(r) for r in raw], None
    if mode == "group":
        out: list[float | None] = [None] * len(raw)
        members: dict[Hashable, list[int]] = {}
        for index, (value, group) in enumerate(zip(raw, groups)):
            if value is not None:
                members.setdefault(group, []).append(index)
        for indices in members.values():
            for index, z in zip(indices, normalized([raw[i] or 0.0 for i in indices])):
                out[index] = z
        return out, None
    assert running is not None, "running normalisation needs the model's statistics"
    stats = running.add([r for r in raw if r is not None])
    return [None if r is None else stats.z(r) for r in raw], stats
