import asyncio
import time

from rewardserve.engine.work_queue import Pending, WorkQueue
from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.plan import Unit


class CountingPolicy(BatchPolicy):
    """A BatchPolicy that counts the fits it was asked about."""

    def __init__(self, **fields):
        super().__init__(**fields)
        object.__setattr__(self, "checks", 0)

    def fits_sized(self, count, total, longest):
        object.__setattr__(self, "checks", self.checks + 1)
        return super().fits_sized(count, total, longest)


def queue_of(lengths, key=None, queue=None):
    queue = queue or WorkQueue()
    loop = asyncio.new_event_loop()
    items = [Pending(Unit(n, i), loop.create_future(), time.monotonic()) for i, n in enumerate(lengths)]
    for item in items:
        queue.add(key, item)
    loop.close()
    return queue, items


def test_a_batch_grows_from_the_oldest_item_to_its_nearest_lengths():
    queue, items = queue_of([100, 10, 96, 300, 104, 98])
    # 100 first, then whichever neighbour pads least while four items of <= 104 fit.
    padded = queue.nearest(None, BatchPolicy(max_batch_tokens=4 * 104, pads=True), [])
    assert set(padded) == {items[0], items[2], items[4], items[5]}
    packed = queue.nearest(None, BatchPolicy(max_batch_tokens=210, pads=False), [])
    assert set(packed) == {items[0], items[5]}  # 100 + 98; adding 96 or 104 passes 210


def test_the_oldest_item_is_taken_even_alone_and_over_budget():
    queue, items = queue_of([300, 10, 20])
    assert queue.nearest(None, BatchPolicy(max_batch_tokens=50), []) == [items[0]]
    queue, items = queue_of([5, 5, 5])
    assert queue.nearest(None, BatchPolicy(max_batch_items=1), []) == [items[0]]


def test_the_oldest_is_the_oldest_still_queued_and_counts_follow_removals():
    queue, items = queue_of([5, 6, 7, 8])
    assert (len(queue), queue.tokens) == (4, 26)
    assert queue.remove(None, items[0]) and not queue.remove(None, items[0])
    assert queue.remove(None, items[2])
    assert queue.oldest() is items[1] and (len(queue), queue.tokens) == (2, 14)
    assert queue.nearest(None, BatchPolicy(), []) == [items[1], items[3]]
    assert queue.remove(None, items[1]) and queue.remove(None, items[3])
    assert not queue and queue.keys() == [] and queue.tokens == 0


def test_a_tenant_s_batch_takes_another_s_items_nearest_its_lengths_for_the_room_left():
    queue, ours = queue_of([100, 100], key="a")
    _, theirs = queue_of([10, 99, 400, 101, 250], key="b", queue=queue)
    policy = BatchPolicy(max_batch_tokens=4 * 101, pads=True)
    batch = queue.nearest("a", policy, [])
    assert batch == ours
    assert set(queue.nearest("b", policy, batch)) == {theirs[1], theirs[3]}
    assert queue.oldest() is ours[0] and sorted(queue.keys()) == ["a", "b"]


def test_choosing_a_batch_costs_the_batch_not_the_backlog():
    """A flood's backlog of 20,000 items asks as few fits as a queue of 20 (the work of
    choosing was the whole queue's, on the event loop while the model waited)."""
    checks = []
    for backlog in (20, 20_000):
        queue, _ = queue_of([300 + (i * 7919) % 41 for i in range(backlog)])
        policy = CountingPolicy(max_batch_tokens=1300)
        assert len(queue.nearest(None, policy, [])) == 4
        checks.append(policy.checks)
    assert checks[1] <= checks[0] <= 12


def test_items_taken_from_the_middle_do_not_pile_up_in_the_arrival_order():
    queue, items = queue_of(list(range(1, 5001)))
    for item in items[1:]:
        queue.remove(None, item)
    assert queue.oldest() is items[0]
    assert len(queue._work[None].by_age) < 2 * 1024


def test_drain_empties_the_queue():
    queue, items = queue_of([3, 4], key="a")
    queue_of([5], key="b", queue=queue)
    assert sorted(p.unit.length for p in queue.drain()) == [3, 4, 5]
    assert not queue and queue.tokens == 0 and queue.keys() == [] and not items[0].queued
