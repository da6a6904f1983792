"""Reward models that share the policy's GPU (``colocate``): asleep while the policy
generates, woken to score, through the service's admin API (the run's ``admin_key``). The
models put to sleep are the served ones holding weights (a rule has none to free)."""

from __future__ import annotations

import logging
import time
from typing import Literal

from rewardserve.client.sync import RewardClient

log = logging.getLogger("rewardserve.grpo")


class Colocated:
    def __init__(self, service: str | list[str], admin_key: str | None, models: list[str], level: Literal[1, 2]):
        if not admin_key:
            raise ValueError("colocate needs admin_key: the service's admin API puts its models to sleep")
        self.client = RewardClient(service, api_key=admin_key)
        self.level = level
        self.models = [m for m in dict.fromkeys(models) if self.client.admin.state(m).memory_bytes > 0]
        log.info("colocated: %s sleep at level %d while the policy generates", ", ".join(self.models) or "none", level)

    def sleep(self) -> None:
        for model in self.models:
            self.client.admin.sleep(model, level=self.level)

    def wake(self) -> float:
        """Every model awake again; the seconds that took."""
        start = time.perf_counter()
        for model in self.models:
            self.client.admin.wake_up(model)
        elapsed = time.perf_counter() - start
        log.info("reward models woke in %.2fs", elapsed)
        return elapsed

    def close(self) -> None:
        self.client.close()
