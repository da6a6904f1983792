"""The rule pool between tenants: turns by worker time, a worker being replaced counted
as its tenant's, a full queue refusing only the tenant over its share, and each
tenant charged the worker time its calls took."""

from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict

import pytest

from rewardserve.engine.errors import PoolBusy
from rewardserve.engine.pools.pool import RulePool
from rewardserve.engine.scheduler import FairScheduler
from rewardserve.engine.scope import RequestScope
from rewardserve.models.rules.worker import RuleCall

# The pool's workers run niced: a test process beside them would eat their time limits.
pytestmark = pytest.mark.alone

BACKTRACKING = {"type": "string", "pattern": "^(a+)+$"}


def slow(k: int) -> RuleCall:
    return RuleCall("json_schema", '"' + "a" * 26 + "!" * (1 + k) + '"', None, {"schema": BACKTRACKING})


QUICK = RuleCall("json_schema", '"aaaa"', None, {"schema": BACKTRACKING})


def test_a_tenant_whose_calls_are_killed_leaves_a_worker_up_for_the_other():
    """Tenant a's calls all run into the time limit, so its workers are killed and
    replaced over and over; b's call still finds a worker that is up at once."""
    charged: dict[str | None, float] = defaultdict(float)
    pool = RulePool(
        workers=3,
        timeout_s=1.0,
        memory_mb=256,
        max_queued=1000,
        scheduler=FairScheduler(
            served=lambda _rules, tenant, seconds: charged.__setitem__(tenant, charged[tenant] + seconds)
        ),
    )
    try:
        pool.run([QUICK], RequestScope(tenant="b")).result(timeout=60)  # workers up
        until = time.monotonic() + 5
        scopes = []

        def flood() -> None:
            while time.monotonic() < until:
                scope = RequestScope(tenant="a")
                scopes.append(scope)
                try:
                    pool.run([slow(k) for k in range(6)], scope).result(timeout=max(0.1, until - time.monotonic()))
                except Exception:
                    scope.cancel("disconnected")

        callers = [threading.Thread(target=flood, daemon=True) for _ in range(4)]
        for caller in callers:
            caller.start()
        time.sleep(2)
        waits = []
        for _ in range(6):
            start = time.monotonic()
            assert pool.run([QUICK], RequestScope(tenant="b")).result(timeout=30) == [1.0]
            waits.append(time.monotonic() - start)
            time.sleep(0.4)
        for caller in callers:
            caller.join(timeout=30)
        for scope in scopes:
            scope.cancel("finished")
    finally:
        pool.close()
    assert max(waits) < 0.5, waits
    assert statistics.median(waits) < 0.2, waits
    assert charged["a"] > 5 * charged["b"], dict(charged)


def test_a_full_queue_refuses_only_the_tenant_over_its_share():
    pool = RulePool(workers=1, timeout_s=5.0, memory_mb=256, max_queued=100)
    hog = RequestScope(tenant="a")
    try:
        pool.run([slow(k % 7) for k in range(100)], hog)  # the whole queue (less a chunk the worker took)
        with pytest.raises(PoolBusy) as refused:
            pool.run([slow(1)] * 20, RequestScope(tenant="a"))
        assert refused.value.tenant == "a"
        other = RequestScope(tenant="b")
        pool.check_room("b", 40)  # asked before planning: the same answer as run's, nothing queued
        pool.run([QUICK] * 40, other)  # within b's half: taken though the queue is full
        with pytest.raises(PoolBusy):
            pool.check_room("b", 20)
        with pytest.raises(PoolBusy):
            pool.run([QUICK] * 20, RequestScope(tenant="b"))  # past b's half of it
        other.cancel("finished")
    finally:
        hog.cancel("finished")
        pool.close()


def test_a_cpu_share_caps_the_workers_running_at_once():
    """max_busy=1 of three workers: calls from two tenants run one at a time, each still
    answered, and the workers left idle take nothing."""
    pool = RulePool(workers=3, timeout_s=5.0, memory_mb=256, max_queued=1000, max_busy=1)
    assert pool.max_busy == 1 and pool.share == 1
    busiest = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal busiest
        while not stop.is_set():
            busiest = max(busiest, pool._busy())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        pool.run([QUICK], RequestScope(tenant="a")).result(timeout=60)  # workers up
        sampler.start()
        busy_call = RuleCall("json_schema", '"' + "a" * 21 + '!"', None, {"schema": BACKTRACKING})  # ~0.3 s
        futures = [pool.run([busy_call, QUICK], RequestScope(tenant=t)) for t in ("a", "b", "a", "b")]
        results = [f.result(timeout=120) for f in futures]
    finally:
        stop.set()
        sampler.join(timeout=5)
        pool.close()
    assert busiest == 1
    assert all(r[1] == 1.0 and r[0] == 0.0 for r in results), results
