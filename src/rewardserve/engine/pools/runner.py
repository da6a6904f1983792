"""The service's rule pools, shared by every rule model and every rubric request.

Rules go to the pool their definition names: ``light`` (text, structure, math; warm
with the rule modules and math-verify imported) or ``embedding`` (the similarity rule:
workers that hold the MiniLM encoder, started on first use, one by default). Templates
that are not plain field lookups render in the light pool too.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from rewardserve.engine.pools.pool import RulePool
from rewardserve.engine.scheduler import FairScheduler
from rewardserve.models.plan import Scope
from rewardserve.models.rules import get_rule
from rewardserve.models.rules.worker import DEFAULT_PRIORITY, RenderCall, RuleCall, WorkerPriority


def default_workers() -> int:
    """Twice the cores (rule calls are short and a killed worker takes a moment to come
    back), at least 3 so that one request's share leaves two free, at most 8."""
    return max(3, min(8, 2 * (os.cpu_count() or 2)))


def code_workers() -> int:
    """The code pool's (models/rules/code/__init__.py): one per core, whose sandboxes keep it
    busy, and one more, since one request holds at most all but one worker."""
    return (os.cpu_count() or 1) + 1


@dataclass(frozen=True)
class RuleLimits:
    workers: int = 0  # 0: default_workers()
    timeout_s: float = 5.0
    memory_mb: int = 1024
    max_queued: int = 200_000
    embedding_workers: int = 1
    code_workers: int = 0  # 0: code_workers()
    cpu_share: float | None = None  # of the cores, kept busy at once per pool; None: no cap
    priority: WorkerPriority = DEFAULT_PRIORITY  # worker.py: how the workers stay below the service

    def busy_cap(self) -> int | None:
        if self.cpu_share is None:
            return None
        return max(1, round(self.cpu_share * (os.cpu_count() or 1)))


class RuleRunner:
    """``scheduler``: the service's one fair scheduler, whose weights share the pools'
    workers between tenants and whose books each pool charges (pool.py); a scheduler
    of its own (every tenant weight 1) by default."""

    def __init__(self, limits: RuleLimits | None = None, *, scheduler: FairScheduler | None = None):
        self.limits = limits or RuleLimits()
        self._scheduler = scheduler or FairScheduler()
        self._pools: dict[str, RulePool] = {}
        self._lock = threading.Lock()

    @property
    def timeout_s(self) -> float:
        return self.limits.timeout_s

    def start(self) -> None:
        """Start the light pool now (rules are the first thing ready)."""
        self._pool("light")

    def _pool(self, name: str) -> RulePool:
        with self._lock:
            if name not in self._pools:
                limits = self.limits
                warm: tuple[str, ...]
                if name == "embedding":
                    workers, warm = limits.embedding_workers, ("similarity",)
                elif name == "code":  # each call keeps a core busy in its sandbox
                    workers, warm = limits.code_workers or code_workers(), ()
                else:
                    workers, warm = limits.workers or default_workers(), ()
                self._pools[name] = RulePool(
                    workers,
                    limits.timeout_s,
                    limits.memory_mb,
                    max_queued=limits.max_queued,
                    max_busy=limits.busy_cap(),
                    warm=warm,
                    scheduler=self._scheduler,
                    name=name,
                    priority=limits.priority,
                )
            return self._pools[name]

    def queued_calls(self) -> int:
        return sum(pool.queued_calls for pool in list(self._pools.values()))

    def check_room(self, calls_by_rule: Mapping[str, int], scope: Scope | None = None) -> None:
        """PoolBusy when the pools these rules run in have no room for the calls now."""
        tenant = scope.tenant if scope is not None else None
        by_pool: dict[str, int] = {}
        for rule, calls in calls_by_rule.items():
            try:
                name = get_rule(rule).pool
            except KeyError:
                continue  # planning names it in its error
            by_pool[name] = by_pool.get(name, 0) + calls
        for name, calls in by_pool.items():
            self._pool(name).check_room(tenant, calls)

    def run(
        self, calls: list[RuleCall | RenderCall], scope: Scope | None = None, timeout_s: float | None = None
    ) -> Future[list[Any]]:
        """Every call's result in order (a value or a CallFailure). Raises PoolBusy
        when a pool has no room for them. ``timeout_s``: per chunk of calls, by default
        the longest the calls ask for, else the pools' own."""
        if timeout_s is None:
            timeout_s = max((c.timeout_s for c in calls if isinstance(c, RuleCall) and c.timeout_s), default=None)
        by_pool: dict[str, list[int]] = {}
        pool_of: dict[str, str] = {}
        for index, call in enumerate(calls):
            if isinstance(call, RuleCall):
                name = pool_of.get(call.rule) or pool_of.setdefault(call.rule, get_rule(call.rule).pool)
            else:
                name = "light"
            by_pool.setdefault(name, []).append(index)
        if len(by_pool) <= 1:
            name = next(iter(by_pool), "light")
            return self._pool(name).run(calls, scope, timeout_s)
        merged: Future[list[Any]] = Future()
        results: list[Any] = [None] * len(calls)
        parts = [
            (indices, self._pool(name).run([calls[i] for i in indices], scope, timeout_s))
            for name, indices in by_pool.items()
        ]
        left = [len(parts)]
        lock = threading.Lock()

        def collect(indices: list[int], part: Future[list[Any]]) -> None:
            for i, value in zip(indices, part.result()):
                results[i] = value
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                merged.set_result(results)

        for indices, part in parts:
            part.add_done_callback(functools.partial(collect, indices))  # this part's indices, bound now
        return merged

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
