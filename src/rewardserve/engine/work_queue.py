"""One model's queued work (batcher.py), kept per tenant twice over: by arrival, so the
oldest item is found at once, and sorted by length, so the items nearest it in length
are found by bisection. Taking a batch then costs about the batch's size, not the
queue's: a flood's backlog of thousands of items leaves every batch (and so every
tenant's latency and the model's busy time) as quick to choose as with an empty queue.

Items leave as a batch takes them or when their future settles first (client gone,
deadline passed): ``remove``. The arrival order forgets them lazily, as they reach
its head.
"""

from __future__ import annotations

import asyncio
import itertools
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.plan import Unit


@dataclass(eq=False)
class Pending:
    unit: Unit[Any]
    future: asyncio.Future[Any]  # a BatchAnswer (batcher.py, which imports this module)
    enqueued: float
    deadline: float | None = None  # time.monotonic() past which the work is not computed
    seq: int = 0  # arrival number, unique per queue
    queued: bool = field(default=False, repr=False)


class _TenantWork:
    def __init__(self) -> None:
        self.by_age: deque[Pending] = deque()
        self.by_length: list[tuple[int, int, Pending]] = []  # (length, seq, item), sorted

    def oldest(self) -> Pending:
        while not self.by_age[0].queued:
            self.by_age.popleft()
        return self.by_age[0]

    def index(self, pending: Pending) -> int:
        return bisect_left(self.by_length, (pending.unit.length, pending.seq))


class WorkQueue:
    def __init__(self) -> None:
        self._work: dict[str | None, _TenantWork] = {}
        self._arrivals = itertools.count()
        self.items = 0
        self.tokens = 0

    def __len__(self) -> int:
        return self.items

    def add(self, key: str | None, pending: Pending) -> None:
        work = self._work.get(key)
        if work is None:
            work = self._work[key] = _TenantWork()
        pending.seq, pending.queued = next(self._arrivals), True
        work.by_age.append(pending)
        insort(work.by_length, (pending.unit.length, pending.seq, pending))
        self.items += 1
        self.tokens += pending.unit.length

    def remove(self, key: str | None, pending: Pending) -> bool:
        """Take ``pending`` out; False where it had left already."""
        if not pending.queued:
            return False
        work = self._work[key]
        del work.by_length[work.index(pending)]
        pending.queued = False
        self.items -= 1
        self.tokens -= pending.unit.length
        if not work.by_length:
            del self._work[key]
        elif len(work.by_age) > 2 * len(work.by_length) + 1024:  # items taken from its middle
            work.by_age = deque(p for p in work.by_age if p.queued)
        return True

    def keys(self) -> list[str | None]:
        """The tenants with work queued."""
        return list(self._work)

    def oldest(self) -> Pending:
        return min((work.oldest() for work in self._work.values()), key=lambda p: p.seq)

    def nearest(self, key: str | None, policy: BatchPolicy, batch: list[Pending]) -> list[Pending]:
        """Items of ``key``'s work to add to ``batch``, nearest in length, one by one on the
        side that pads least, while the batch fits ``policy``; with an empty ``batch``, the
        tenant's oldest item and those nearest it. Nothing leaves the queue here."""
        ordered = self._work[key].by_length
        if batch:
            lengths = [p.unit.length for p in batch]
            count, total, longest = len(lengths), sum(lengths), max(lengths)
            lo = hi = bisect_left(ordered, (longest,))
        else:
            first = self._work[key].oldest()
            count, total, longest = 1, first.unit.length, first.unit.length
            lo = self._work[key].index(first)
            hi = lo + 1
        while True:
            best: tuple[int, int] | None = None  # (padding, index)
            for index in (lo - 1, hi):
                if 0 <= index < len(ordered):
                    length = ordered[index][0]
                    if policy.fits_sized(count + 1, total + length, max(longest, length)):
                        waste = policy.cost_sized(count + 1, total + length, max(longest, length)) - total - length
                        if best is None or waste < best[0]:
                            best = (waste, index)
            if best is None:
                return [item for _, _, item in ordered[lo:hi]]
            index = best[1]
            lo, hi = (index, hi) if index < lo else (lo, hi + 1)
            count, total, longest = count + 1, total + ordered[index][0], max(longest, ordered[index][0])

    def drain(self) -> list[Pending]:
        """Everything queued, taken out."""
        items = [item for work in self._work.values() for _, _, item in work.by_length]
        for item in items:
            item.queued = False
        self._work.clear()
        self.items = self.tokens = 0
        return items
