"""Per-model dynamic batching across concurrent requests.

Requests put their work in one queue per model (engine/work_queue.py). The loop below
waits for a free slot, lets work gather for at most ``max_wait_ms`` after the oldest
arrival (less when a full batch is already waiting), then takes the oldest item and the
queued items nearest it in length, as many as fit the padded token budget. Oldest-first
keeps it fair; choosing length neighbours from the whole queue keeps padding low. Each
batch runs on the model's worker thread (on a CPU, the one thread all torch models share:
engine/registry.py); results go back to each item's future.

The queue is bounded in tokens: work that does not fit is refused at once (429), so a
burst never turns into unbounded memory or latency. Work whose request has gone away
(client disconnected, deadline passed) leaves the queue as its future settles.

With tenants (engine/tenants.py), the oldest item is taken from the tenant furthest
behind its weighted share (its ``forward`` turns in the service's one
``FairScheduler``, engine/scheduler.py); room left in the batch goes to others'
work, and a tenant over its queued-token limit gets 429 while the others are still taken.
While several tenants use a model whose policy allows it (``short_when_shared``: a CPU),
a batch holds one tenant's work and about ``Tenants.batch_ms`` of compute, and where the
forward can pause between layers (``preemptible``), a tenant further behind than the
batch in flight has its batch run inside that one, at the next layer: a light tenant
waits for a layer of a flood's batch. On a GPU batches keep their size.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from rewardserve.engine.errors import QueueFull, QueueTooSmall
from rewardserve.engine.metrics import EngineMetrics
from rewardserve.engine.tenants import Tenants, TenantShares, label
from rewardserve.engine.work_queue import Pending as _Pending
from rewardserve.engine.work_queue import WorkQueue
from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.errors import DeadlineExceeded, ItemError, NotReady
from rewardserve.models.plan import Unit, UnitOutput

log = logging.getLogger(__name__)

Run = Callable[[list[Unit[Any]]], list[UnitOutput]]
BetweenLayers = Callable[[Callable[[], None] | None], AbstractContextManager[None]]


def _no_layers(_callback: Callable[[], None] | None) -> AbstractContextManager[None]:
    return nullcontext()


@dataclass
class BatchAnswer:
    """What a unit's future resolves to: what the model's run gave for it."""

    result: UnitOutput
    queue_s: float
    inference_s: float


class Batcher:
    def __init__(
        self,
        name: str,
        run: Run,
        policy: BatchPolicy,
        metrics: EngineMetrics,
        after_batch: Callable[[], None] | None = None,
        executor: Executor | None = None,
        tenants: Tenants | None = None,
        between_layers: BetweenLayers | None = None,
    ):
        """``executor``: where batches run (shared with other models, not shut down
        here); by default a pool of ``policy.concurrency`` threads of this batcher's own."""
        self.name = name
        self._tenants = tenants if tenants is not None and tenants.enabled else None
        self._shares = TenantShares(self._tenants, name)
        self._after_batch = after_batch  # runs on the worker thread (memory trimming)
        self.policy = policy
        self._run = run
        # The model's way to run posted work inside a batch in flight (RewardModel.between_layers).
        self._between_layers: BetweenLayers = between_layers or _no_layers
        self._metrics = metrics
        self._queue = WorkQueue()  # keyed by tenant where there are tenants
        self._wakeup = asyncio.Event()
        self._slots = asyncio.Semaphore(policy.concurrency)
        self._running: set[asyncio.Task[None]] = set()
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(policy.concurrency, thread_name_prefix=f"rs-{name}")
        self._loop_task: asyncio.Task[None] | None = None
        self._tokens_per_s = 0.0  # recent throughput, for retry-after
        self._posted: deque[list[_Pending]] = deque()  # to run inside the batch in flight
        self._in_flight: tuple[str | None, int] | None = None  # the batch in flight's tenant and tokens
        self._inside_s = 0.0  # of the batch in flight, seconds spent on posted work
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_task = asyncio.create_task(self._run_forever(), name=f"batcher-{self.name}")

    def submit(self, units: list[Unit[Any]], deadline: float | None = None) -> list[asyncio.Future[BatchAnswer]]:
        """Queue units and return one future per unit, or refuse all of them. Units still
        queued at ``deadline`` (a ``time.monotonic()`` value) are dropped, not computed."""
        tokens = sum(u.length for u in units)
        if tokens > self.policy.max_queue_tokens:
            raise QueueTooSmall(
                f"the request needs {tokens} tokens of queue, more than this model's "
                f"whole queue ({self.policy.max_queue_tokens}); split it"
            )
        tenant = _tenant(units[0]) if units else None
        if not self._shares.has_room(tenant, tokens, self.policy.max_queue_tokens):
            self._metrics.rejected.labels(self.name, "queue_full").inc()
            wait = self._retry_after(tokens)
            raise QueueFull(f"model {self.name!r} is at capacity; retry after {wait}s", retry_after_s=wait)
        self._shares.admit(tenant, tokens, self._retry_after)
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        futures, pendings = [], []
        for unit in units:
            pending = _Pending(unit, loop.create_future(), now, deadline)
            self._queue.add(self._key(unit), pending)
            pending.future.add_done_callback(functools.partial(self._settled_early, pending))
            futures.append(pending.future)
            pendings.append(pending)
        if deadline is not None:
            loop.call_later(max(0.0, deadline - now), self._deadline_passed, pendings)
        self._shares.add(tenant, tokens)
        self._update_gauges()
        self._wakeup.set()
        self._post_inside()
        return futures

    @property
    def pending_items(self) -> int:
        return len(self._queue)

    def _key(self, unit: Unit[Any]) -> str | None:
        return _tenant(unit) if self._tenants is not None else None

    def _settled_early(self, pending: _Pending, _future: asyncio.Future[Any]) -> None:
        """A unit's future settled: where it was still queued (its client went away, its
        deadline passed), it leaves the queue and its counts now."""
        if self._queue.remove(self._key(pending.unit), pending):
            self._shares.add(_tenant(pending.unit), -pending.unit.length)
            self._update_gauges()
            self._count_dropped([pending])

    async def stop(self) -> None:
        """Stop taking batches, let running ones finish, fail what is still queued."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        self._fail_queued(NotReady("the service is shutting down"))
        if self._own_executor:
            self._executor.shutdown(wait=True)

    async def _run_forever(self) -> None:
        while True:
            await self._slots.acquire()
            try:
                batch = self._posted.popleft() if self._posted else await self._next_batch()
            except Exception:  # a bug here would leave every queued caller waiting forever
                self._slots.release()
                log.exception("model %s: choosing a batch failed; its queued work gets an error", self.name)
                self._fail_queued(RuntimeError("the batcher failed; retry"))
                continue
            except BaseException:
                self._slots.release()
                raise
            task = asyncio.create_task(self._run_batch(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _next_batch(self) -> list[_Pending]:
        while True:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._gather_more()
            if self._queue:
                return self._take_batch()

    async def _gather_more(self) -> None:
        """Wait for company, at most max_wait after the oldest item arrived."""
        deadline = self._queue.oldest().enqueued + self.policy.max_wait_ms / 1000.0
        while self._queue.tokens < self.policy.max_batch_tokens and self._queue:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def _take_batch(self) -> list[_Pending]:
        """The oldest item (of the tenant furthest behind) plus the queued items nearest
        it in length, as many as the budget, the item cap and the padding cap allow.
        Oldest-first keeps it fair; picking length neighbours keeps padding low."""
        if self._tenants is None:
            return self._taken(self._queue.nearest(None, self.policy, []))
        keys = self._queue.keys()
        tenant = self._shares.turns.furthest_behind(keys)
        shared = self._shared_policy()
        batch = self._queue.nearest(tenant, shared or self.policy, [])
        # Room left goes to others' work (nearest in length), unless the batch is kept
        # short for them.
        for other in keys if shared is None else ():
            if other != tenant:
                batch += self._queue.nearest(other, self.policy, batch)
        served: dict[str | None, float] = {}
        for pending in batch:
            served[_tenant(pending.unit)] = served.get(_tenant(pending.unit), 0) + pending.unit.length
        self._shares.turns.charge(tenant, served)
        return self._taken(sorted(batch, key=lambda p: p.unit.length))

    def _shared_policy(self) -> BatchPolicy | None:
        """While another tenant has work queued or queued some within the last few seconds
        (so will likely again): the policy for a batch of one tenant's work, its token
        budget cut to ``batch_ms`` of compute, or whole where the others' batches run
        between its layers (``_post_inside``). None while one tenant uses the model."""
        assert self._tenants is not None
        if not self._shared():
            return None
        if self._tokens_per_s <= 0 or self.policy.preemptible:
            return self.policy
        budget = int(self._tokens_per_s / self.policy.concurrency * self._tenants.batch_ms / 1000.0)
        return dataclasses.replace(self.policy, max_batch_tokens=min(budget, self.policy.max_batch_tokens))

    def _shared(self) -> bool:  # by more than one tenant, where batches are then cut short
        return self.policy.short_when_shared and self._shares.active() >= 2

    def _taken(self, batch: list[_Pending]) -> list[_Pending]:
        """``batch`` out of the queue and its counts."""
        for pending in batch:
            self._queue.remove(self._key(pending.unit), pending)
        self._forget(batch)
        return batch

    def _fail_queued(self, exc: Exception) -> None:
        queued = self._queue.drain()
        self._forget(queued)
        while self._posted:  # taken already, waiting for a layer boundary or the next slot
            queued += self._posted.popleft()
        for pending in queued:
            if not pending.future.done():
                pending.future.set_exception(exc)

    def _forget(self, pendings: list[_Pending]) -> None:
        for pending in pendings:
            self._shares.add(_tenant(pending.unit), -pending.unit.length)
        self._update_gauges()

    def _deadline_passed(self, pendings: list[_Pending]) -> None:
        for pending in pendings:
            if pending.queued and not pending.future.done():  # it then leaves the queue
                pending.future.set_exception(DeadlineExceeded("the request's deadline passed before compute"))

    def _expire(self, pendings: list[_Pending]) -> None:
        now = time.monotonic()
        for pending in pendings:
            if pending.deadline is not None and pending.deadline <= now and not pending.future.done():
                pending.future.set_exception(DeadlineExceeded("the request's deadline passed before compute"))

    def _count_dropped(self, gone: list[_Pending]) -> None:
        deadline = sum(
            1 for p in gone if not p.future.cancelled() and isinstance(p.future.exception(), DeadlineExceeded)
        )
        if deadline:
            self._metrics.dropped.labels(self.name, "deadline").inc(deadline)
        if len(gone) - deadline:
            self._metrics.dropped.labels(self.name, "disconnected").inc(len(gone) - deadline)

    async def _run_batch(self, batch: list[_Pending]) -> None:
        try:
            self._expire(batch)  # last look before compute
            live = [p for p in batch if not p.future.done()]
            self._count_dropped([p for p in batch if p.future.done()])
            batch = live
            if not batch:
                return
            self._in_flight, self._inside_s = (_tenant(batch[0].unit), sum(p.unit.length for p in batch)), 0.0
            start = time.monotonic()
            loop = asyncio.get_running_loop()
            results = await loop.run_in_executor(self._executor, self._run_then_tidy, [p.unit for p in batch])
            self._answer(batch, results, start, time.monotonic() - start - self._inside_s)
        except BaseException as exc:  # never leave a caller waiting forever
            self._answer(batch, exc, 0.0, 0.0)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._in_flight = None
            self._slots.release()

    def _answer(
        self, batch: list[_Pending], results: list[UnitOutput] | BaseException, start: float, elapsed: float
    ) -> None:
        if isinstance(results, BaseException):
            error = results if isinstance(results, Exception) else RuntimeError("batch cancelled")
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(error)
            return
        self._record(batch, results, sum(p.unit.length for p in batch), elapsed)
        for pending, result in zip(batch, results):
            if not pending.future.done():
                pending.future.set_result(BatchAnswer(result, start - pending.enqueued, elapsed))

    def _run_then_tidy(self, units: list[Unit[Any]]) -> list[UnitOutput]:
        with self._between_layers(self._run_posted if self.policy.preemptible and self._tenants else None):
            results = self._run_isolating(units)
        if self._after_batch is not None:
            self._after_batch()
        return results

    def _post_inside(self) -> None:
        """While a batch is in flight on a shared model, a batch of the tenant furthest
        behind, if that is another tenant, for the worker to run between two of the
        in-flight batch's layers (the model's ``between_layers``): a light tenant
        waits for a layer of a flood's batch, not for all of it."""
        if (
            self._in_flight is None
            or self._posted
            or not self.policy.preemptible
            or self._tenants is None
            or not self._shared()
        ):
            return
        if self._another_tenant_behind():
            self._posted.append(self._take_batch())

    def _another_tenant_behind(self) -> bool:
        """Whether the tenant furthest behind (from the tenants' token counts: no queue
        scan) is behind the batch in flight's tenant and has less work queued than that
        batch: a light tenant's work passes a flood's long batch, never a flood's batch a
        light tenant's short one."""
        queued = self._shares.queued_tenants()
        if not queued or self._in_flight is None:
            return False
        running, tokens = self._in_flight
        behind = self._shares.turns.furthest_behind(queued)
        return self._shares.turns.before(behind, running) and self._shares.queued(behind) < tokens

    def _run_posted(self) -> None:
        """On the worker thread, at a layer boundary of the batch in flight: the posted
        batch, if any; its answers go to the event loop."""
        try:
            batch = self._posted.popleft()
        except IndexError:
            return
        assert self._loop is not None
        # Light work that came while this batch waited its turn goes at the next boundary.
        self._loop.call_soon_threadsafe(self._post_inside)
        start = time.monotonic()
        try:
            results: list[UnitOutput] | BaseException = self._run_isolating([p.unit for p in batch])
        except Exception as exc:  # noqa: BLE001 - its callers get it; the batch in flight goes on
            results = exc
        elapsed = time.monotonic() - start
        self._inside_s += elapsed
        self._loop.call_soon_threadsafe(self._answer, batch, results, start, elapsed)

    def _run_isolating(self, units: list[Unit[Any]]) -> list[UnitOutput]:
        """Run a batch; if it fails as a whole, split it to find the unit at fault so
        its neighbours still get their scores."""
        try:
            results = self._run(units)
            if len(results) != len(units) or not all(u.answered_by(r) for r, u in zip(results, units)):
                raise RuntimeError(
                    f"run gave {len(results)} outputs for {len(units)} units, or a unit too few or too many"
                )
            return results
        except Exception as exc:
            if len(units) == 1:
                log.warning("model %s failed on one unit: %s", self.name, exc)
                return [units[0].failed(ItemError(f"inference failed: {type(exc).__name__}: {exc}"))]
            half = len(units) // 2
            return self._run_isolating(units[:half]) + self._run_isolating(units[half:])

    def _record(self, batch: list[_Pending], results: list[UnitOutput], tokens: int, elapsed: float) -> None:
        m, name = self._metrics, self.name
        lengths = [p.unit.length for p in batch]
        padded = self.policy.cost(lengths)
        m.batches.labels(name).inc()
        m.batch_size.labels(name).observe(len(batch))
        m.batch_tokens.labels(name).observe(padded)
        m.padding_ratio.labels(name).observe(1.0 - tokens / padded if padded else 0.0)
        m.forward_seconds.labels(name).observe(elapsed)
        now = time.monotonic()
        for pending in batch:
            m.queue_seconds.labels(name).observe(now - elapsed - pending.enqueued)
            if self._tenants is not None:
                tenant = label(_tenant(pending.unit))
                self._tenants.queue_seconds.labels(tenant).observe(now - elapsed - pending.enqueued)
                share = pending.unit.length / tokens if tokens else 1 / len(batch)  # of the forward's time
                self._tenants.model_seconds.labels(tenant).inc(elapsed * share)
        outputs = [output for produced in results for output in produced]
        invalid = sum(isinstance(r, ItemError) for r in outputs)
        m.items.labels(name, "true").inc(len(outputs) - invalid)
        if invalid:
            m.items.labels(name, "false").inc(invalid)
        if elapsed > 0:
            rate = tokens / elapsed * self.policy.concurrency
            self._tokens_per_s = rate if not self._tokens_per_s else 0.8 * self._tokens_per_s + 0.2 * rate

    def _retry_after(self, tokens: int) -> int:
        """Seconds until the queue has likely drained enough to take ``tokens``."""
        if self._tokens_per_s <= 0:
            return 1
        backlog = self._queue.tokens + tokens - self.policy.max_queue_tokens
        return max(1, min(60, math.ceil(backlog / self._tokens_per_s)))

    def _update_gauges(self) -> None:
        self._metrics.queue_items.labels(self.name).set(self.pending_items)
        self._metrics.queue_tokens.labels(self.name).set(self._queue.tokens)


def _tenant(unit: Unit[Any]) -> str | None:
    return unit.scope.tenant if unit.scope is not None else None
