"""The batcher's own rules, with a predictor that records the batches it is given."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rewardserve.engine.batcher import Batcher
from rewardserve.engine.errors import QueueFull, QueueTooSmall
from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.errors import DeadlineExceeded, ItemError
from rewardserve.models.plan import Unit
from rewardserve.protocol import ItemResult
from rewardserve.service.observability.metrics import Metrics


class Recorder:
    def __init__(self, fail_on: int | None = None):
        self.batches: list[list[int]] = []
        self.fail_on = fail_on
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, works: list[Unit]) -> list:
        self.gate.wait(10)
        lengths = [w.length for w in works]
        self.batches.append(lengths)
        if self.fail_on is not None and self.fail_on in [w.payload for w in works]:
            raise RuntimeError("boom")
        return [[ItemResult(score=float(w.payload))] for w in works]


def works(lengths):
    return [Unit(length=n, payload=i) for i, n in enumerate(lengths)]


async def run(batcher, items):
    outcomes = await asyncio.gather(*batcher.submit(items))
    return [o.result[0] for o in outcomes]


async def test_batches_fit_the_padded_token_budget_and_are_length_sorted():
    rec = Recorder()
    policy = BatchPolicy(max_batch_tokens=400, max_wait_ms=20)
    batcher = Batcher("t", rec, policy, Metrics())
    batcher.start()
    lengths = [10, 200, 12, 190, 11, 100, 13, 9, 50, 210]
    results = await run(batcher, works(lengths))
    await batcher.stop()
    assert [r.score for r in results] == list(range(len(lengths)))  # back in request order
    assert sorted(n for b in rec.batches for n in b) == sorted(lengths)
    for batch in rec.batches:
        assert max(batch) * len(batch) <= 400 or len(batch) == 1
        assert batch == sorted(batch)
    # Sorting kept the short items together instead of padding them to 210.
    # Oldest first (10, then 200, then 100), each with its nearest lengths.
    assert rec.batches == [[9, 10, 11, 12, 13, 50], [190, 200], [100], [210]]


async def test_concurrent_submissions_share_a_batch_within_max_wait():
    rec = Recorder()
    batcher = Batcher("t", rec, BatchPolicy(max_batch_tokens=10_000, max_wait_ms=100), Metrics())
    batcher.start()
    a = asyncio.ensure_future(run(batcher, works([5, 6])))
    await asyncio.sleep(0.02)
    b = asyncio.ensure_future(run(batcher, works([7])))
    await asyncio.gather(a, b)
    await batcher.stop()
    assert rec.batches == [[5, 6, 7]]


async def test_cancelled_work_is_dropped_before_compute():
    rec = Recorder()
    rec.gate.clear()  # hold the first batch in "compute"
    metrics = Metrics()
    batcher = Batcher("t", rec, BatchPolicy(max_wait_ms=0), metrics)
    batcher.start()
    first = asyncio.ensure_future(run(batcher, works([3])))
    await asyncio.sleep(0.05)
    futures = batcher.submit(works([4, 5]))
    for f in futures:
        f.cancel()  # the client hung up while its work was queued
    rec.gate.set()
    await first
    await asyncio.sleep(0.05)
    await batcher.stop()
    assert rec.batches == [[3]]
    assert metrics.dropped.labels("t", "disconnected")._value.get() == 2


async def test_work_that_leaves_while_the_model_is_busy_frees_its_queue_room_at_once():
    """A client that hangs up, or whose deadline passes, while a long batch runs gives its
    queue room back then, not when the model next chooses a batch: a 429 for everyone
    else would otherwise outlive the work that caused it."""
    rec = Recorder()
    rec.gate.clear()  # the model stays busy with the first batch throughout
    metrics = Metrics()
    batcher = Batcher("t", rec, BatchPolicy(max_wait_ms=0, max_queue_tokens=100), metrics)
    batcher.start()
    running = asyncio.ensure_future(run(batcher, works([5])))
    await asyncio.sleep(0.05)
    gone = batcher.submit(works([60]))
    expiring = batcher.submit(works([40]), deadline=time.monotonic() + 0.05)
    with pytest.raises(QueueFull):
        batcher.submit(works([30]))
    for future in gone:
        future.cancel()
    await asyncio.sleep(0.2)
    assert batcher.pending_items == 0 and rec.batches == []
    with pytest.raises(DeadlineExceeded):
        await expiring[0]
    assert metrics.dropped.labels("t", "disconnected")._value.get() == 1
    assert metrics.dropped.labels("t", "deadline")._value.get() == 1
    fits_now = batcher.submit(works([100]))
    rec.gate.set()
    await running
    await asyncio.gather(*fits_now)
    await batcher.stop()
    assert rec.batches == [[5], [100]]


async def test_queue_bound_refuses_with_retry_after():
    rec = Recorder()
    rec.gate.clear()
    batcher = Batcher("t", rec, BatchPolicy(max_wait_ms=0, max_queue_tokens=100), Metrics())
    batcher.start()
    running = asyncio.ensure_future(run(batcher, works([50])))
    await asyncio.sleep(0.05)  # now computing, out of the queue
    queued = batcher.submit(works([60]))
    with pytest.raises(QueueFull) as full:
        batcher.submit(works([50]))
    assert full.value.retry_after_s >= 1
    with pytest.raises(QueueTooSmall):
        batcher.submit(works([101]))
    rec.gate.set()
    await running
    await asyncio.gather(*queued)
    await batcher.stop()


async def test_a_failing_batch_is_split_to_isolate_the_bad_item():
    rec = Recorder(fail_on=2)
    batcher = Batcher("t", rec, BatchPolicy(max_wait_ms=10), Metrics())
    batcher.start()
    results = await run(batcher, works([5, 5, 5, 5]))
    await batcher.stop()
    assert isinstance(results[2], ItemError) and "boom" in str(results[2])
    assert [r.score for i, r in enumerate(results) if i != 2] == [0.0, 1.0, 3.0]


async def test_stop_fails_queued_work_instead_of_hanging():
    rec = Recorder()
    rec.gate.clear()
    batcher = Batcher("t", rec, BatchPolicy(max_wait_ms=0), Metrics())
    batcher.start()
    running = batcher.submit(works([1]))
    await asyncio.sleep(0.05)
    queued = batcher.submit(works([2]))
    stopping = asyncio.ensure_future(batcher.stop())
    await asyncio.sleep(0.05)
    rec.gate.set()
    await stopping
    assert (await running[0]).result[0].score == 0.0
    with pytest.raises(Exception, match="shutting down"):
        await queued[0]


async def test_a_failure_while_choosing_a_batch_answers_the_queue_and_the_batcher_goes_on(monkeypatch):
    """A bug in picking a batch must not leave every queued caller waiting forever: the
    queued work gets an error, and work sent after is served."""
    rec = Recorder()
    batcher = Batcher("t", rec, BatchPolicy(max_wait_ms=0), Metrics())
    take = batcher._take_batch
    calls = iter([RuntimeError("a bug"), None])

    def failing_once():
        failure = next(calls, None)
        if failure is not None:
            raise failure
        return take()

    monkeypatch.setattr(batcher, "_take_batch", failing_once)
    batcher.start()
    with pytest.raises(RuntimeError, match="batcher failed"):
        await asyncio.wait_for(run(batcher, works([3, 4])), 5)
    assert batcher.pending_items == 0
    results = await asyncio.wait_for(run(batcher, works([5])), 5)
    assert [r.score for r in results] == [0.0]
    await batcher.stop()


async def test_padding_cap_closes_batches_early():
    rec = Recorder()
    policy = BatchPolicy(max_batch_tokens=10_000, max_wait_ms=20, max_padding_ratio=0.1)
    batcher = Batcher("t", rec, policy, Metrics())
    batcher.start()
    await run(batcher, works([100, 98, 50, 49, 51, 10]))
    await batcher.stop()
    assert rec.batches == [[98, 100], [49, 50, 51], [10]]  # oldest (100) first
