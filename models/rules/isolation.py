"""A process pool that runs rules with a hard timeout.

pebble kills the worker running a call that overruns and starts a fresh one, so a
crafted input can cost one worker ``timeout`` seconds and nothing else.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Future
from typing import Any

from pebble import ProcessPool

from rewardserve.models.rules import call_rule, rule_names


def _warm() -> None:
    import time

    rule_names()
    # Hold the worker briefly so each warm-up call lands on a different worker.
    time.sleep(0.2)


class RulePool:
    def __init__(self, workers: int, timeout_s: float, max_tasks: int = 500):
        self.timeout_s = timeout_s
        # spawn, not fork: the server process holds torch threads and an event loop.
        self._pool = ProcessPool(
            max_workers=workers,
            max_tasks=max_tasks,
            context=multiprocessing.get_context("spawn"),
        )

    def warm_up(self, workers: int) -> None:
        """Start every worker and import the rules in it, so the first real call does
        not pay for an interpreter start and a sympy import."""
        futures = [self._pool.schedule(_warm, timeout=60) for _ in range(workers)]
        for future in futures:
            future.result()

    def submit(self, name: str, response: str, reference: Any, args: dict[str, Any]) -> Future:
        return self._pool.schedule(
            call_rule, args=(name, response, reference, args), timeout=self.timeout_s
        )

    def close(self) -> None:
        self._pool.stop()
        self._pool.join(timeout=5)
