"""The rule pool: time and memory limits per call, chunks retried call by call, fair
turns between requests, and cancelled requests' work dropped or killed."""

from __future__ import annotations

import time

import pytest

from rewardserve.engine.errors import PoolBusy
from rewardserve.engine.pools.pool import RulePool
from rewardserve.engine.scope import RequestScope
from rewardserve.models.rules.worker import CallFailure, RenderCall, RuleCall

# The pool's workers run niced: a test process beside them would eat their time limits.
pytestmark = pytest.mark.alone

SLOW = RuleCall("regex", "a" * 30 + "!", None, {"pattern": "^(a+)+$"})  # minutes of backtracking


def fast(i: int) -> RuleCall:
    return RuleCall("exact_match", str(i), str(i), {"extract": "none"})


@pytest.fixture(scope="module")
def pool():
    pool = RulePool(workers=3, timeout_s=1.0, memory_mb=256, max_queued=1000)
    pool.run([fast(0)]).result(timeout=60)  # workers up
    yield pool
    pool.close()


def test_results_come_back_in_order_with_failures_in_place(pool):
    calls = [fast(1), RuleCall("exact_match", "x", None, {}), fast(2), RenderCall("{{ item.a }}", {"item": {"a": 5}})]
    out = pool.run(calls).result(timeout=30)
    assert out[0] == 1.0 and out[2] == 1.0 and out[3] == "5"
    assert isinstance(out[1], CallFailure) and out[1].kind == "rule" and "reference" in out[1].message


def test_a_slow_call_in_a_chunk_times_out_alone(pool):
    calls = [fast(i) for i in range(5)] + [SLOW] + [fast(i) for i in range(5, 10)]
    start = time.monotonic()
    out = pool.run(calls).result(timeout=60)
    assert [v for i, v in enumerate(out) if i != 5] == [1.0] * 10
    assert isinstance(out[5], CallFailure) and out[5].kind == "timeout"
    assert time.monotonic() - start < 10


def test_memory_is_limited_per_call():
    # A pool of its own with time to spare: what is limited here is memory, and filling
    # 256 MB can take over a second on a busy machine.
    pool = RulePool(workers=1, timeout_s=15.0, memory_mb=256, max_queued=10)
    try:
        memory_is_limited(pool)
    finally:
        pool.close()


def memory_is_limited(pool):
    (out,) = pool.run(
        [
            RenderCall(
                "{% set ns = namespace(a='xx') %}{% for i in range(40) %}"
                "{% set ns.a = ns.a ~ ns.a %}{% endfor %}{{ ns.a | length }}",
                {},
            )
        ]
    ).result(timeout=60)
    assert isinstance(out, CallFailure) and out.kind == "template" and "MemoryError" in out.message
    assert pool.run([fast(3)]).result(timeout=30) == [1.0]  # the worker is fine after


def test_one_tenant_holds_at_most_all_workers_but_one(pool):
    """Another tenant's call, sent while one tenant's slow calls run, finds the worker
    the flood may not take, at once."""
    hog = RequestScope(tenant="a")
    slow = pool.run([SLOW] * 6, hog)  # one chunk, then (after its timeout) six singles
    # The chunk timed out at 1 s and its worker is replaced (held by the hog until the new
    # one answers, which takes most of a second on two busy cores): then the singles hold
    # two of three workers.
    time.sleep(2.2)
    start = time.monotonic()
    assert pool.run([fast(7)], RequestScope(tenant="b")).result(timeout=30) == [1.0]
    assert time.monotonic() - start < 0.8
    hog.cancel("disconnected")
    out = slow.result(timeout=30)
    assert all(isinstance(v, CallFailure) and v.kind in ("timeout", "cancelled") for v in out)


def test_a_cancelled_request_s_calls_are_dropped_and_killed(pool):
    gone = RequestScope()
    future = pool.run([SLOW] * 40, gone)
    time.sleep(0.3)
    start = time.monotonic()
    gone.cancel("disconnected")
    out = future.result(timeout=10)
    assert time.monotonic() - start < 2
    assert all(isinstance(v, CallFailure) and v.kind == "cancelled" for v in out)
    assert pool.queued_calls == 0
    late = RequestScope()
    late.cancel("deadline")
    assert all(v.kind == "cancelled" for v in pool.run([fast(1)] * 3, late).result(timeout=10))


def test_the_queue_is_bounded(pool):
    with pytest.raises(PoolBusy):
        pool.run([fast(1)] * 1001)
