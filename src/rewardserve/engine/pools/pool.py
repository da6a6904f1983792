"""The rule pool: isolated worker processes (worker.py) shared fairly between tenants,
then between each tenant's requests.

- calls go to the workers in chunks (one pickling, one round trip); a chunk that runs
  past its time limit is killed with its worker (pebble starts a fresh one) and its
  calls are retried one by one, so only the slow call is reported as timed out;
- the pool's own queue, not pebble's, decides what runs next, and on which worker: each
  worker is a pebble pool of one, so a chunk goes to a worker that is idle now, never
  into a queue behind a killed worker's restart. Tenants take turns by weighted fair
  queueing on the worker time their calls took (a tenant whose calls burn their whole
  time limit falls behind one whose calls take a millisecond); within a tenant, its
  requests take turns. One tenant, and one request, holds at most ``workers - 1``
  workers, a worker being replaced after its call was killed counting as held by the
  tenant whose call it was (until the new worker answers), so another tenant's work
  arriving while one tenant's slow calls run always finds a worker up (a request of the
  same tenant waits for the tenant's turn);
- the queue holds ``max_queued`` calls; past that a tenant may still queue up to its
  weighted share of it among the tenants with work here (the queue then holds up to
  twice its limit, never more), so one tenant's flood is refused (``PoolBusy``, a 429)
  without shutting the others out;
- work of a request that is cancelled (client gone, deadline passed) is dropped from
  the queue, and its running calls are killed.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pebble import ProcessExpired, ProcessPool

from rewardserve.engine.errors import PoolBusy
from rewardserve.engine.scheduler import FairScheduler
from rewardserve.engine.scope import RequestScope
from rewardserve.models.plan import Scope
from rewardserve.models.rules.worker import (
    DEFAULT_PRIORITY,
    CallFailure,
    WorkerPriority,
    init_worker,
    ready,
    run_timed,
    worker_context,
)

CHUNK_CALLS = 16
Tenant = str | None


@dataclass
class _Run:
    """One ``run`` call: where its calls' results go."""

    results: list[Any]
    left: int
    future: Future[list[Any]]
    timeout_s: float


@dataclass
class _Chunk:
    run: _Run
    scope: Scope
    calls: list[Any]
    positions: list[int]


@dataclass
class _TenantQueue:
    """One tenant's queued chunks, by request in round-robin order."""

    requests: OrderedDict[int, deque[_Chunk]] = field(default_factory=OrderedDict)
    queued: int = 0  # calls
    running: int = 0  # chunks

    @property
    def active(self) -> bool:
        return self.queued > 0 or self.running > 0


class RulePool:
    """A tenant-fair, cancellable process pool for rule calls. ``run`` is thread-safe.

    ``scheduler``: the service's fair scheduler, whose weights are the tenants' shares
    (1 each by default) and whose ``rules`` books, this pool's ``name`` part of them,
    are charged the worker time each chunk took."""

    def __init__(
        self,
        workers: int,
        timeout_s: float,
        memory_mb: int = 1024,
        *,
        max_queued: int = 200_000,
        max_busy: int | None = None,
        warm: tuple[str, ...] = (),
        max_tasks: int = 2000,
        scheduler: FairScheduler | None = None,
        name: str = "rules",
        priority: WorkerPriority = DEFAULT_PRIORITY,
    ):
        self.workers = workers
        self.timeout_s = timeout_s
        self.max_queued = max_queued
        # Workers running calls at once (a CPU share: idle workers beyond it wait).
        self.max_busy = workers if max_busy is None else max(1, min(workers, max_busy))
        scheduler = scheduler or FairScheduler()
        self._weight = scheduler.weight
        context = worker_context()
        self._workers = [
            ProcessPool(
                max_workers=1,
                max_tasks=max_tasks,
                initializer=init_worker,
                initargs=(memory_mb, warm, priority),
                context=context,
            )
            for _ in range(workers)
        ]
        self._idle: list[int] = []  # workers up and free; each joins once it has answered
        # Reentrant: a cancelled pebble future runs its callbacks in the cancelling thread.
        self._lock = threading.RLock()
        self._tenants: dict[Tenant, _TenantQueue] = {}
        self._turns = scheduler.turns("rules", name)  # worker seconds served / weight
        self._running: dict[int, set[Any]] = {}  # scope id -> pebble futures
        self._scopes: dict[int, Any] = {}  # scope id -> unregister its cancel callback
        self._queued_calls = 0
        self._closed = False
        self._started = False

    @property
    def queued_calls(self) -> int:
        return self._queued_calls

    @property
    def share(self) -> int:
        """Workers one tenant (or request) may hold at once: all but one of those that
        may run."""
        return max(1, self.max_busy - 1)

    def run(self, calls: list[Any], scope: Scope | None = None, timeout_s: float | None = None) -> Future[list[Any]]:
        """Queue ``calls`` for ``scope``'s request; the future resolves to their results
        in order (a value or a CallFailure each). ``timeout_s`` per chunk of calls
        (default: the pool's). Raises PoolBusy when the tenant has no room."""
        scope = scope or RequestScope()
        future: Future[list[Any]] = Future()
        if not calls:
            future.set_result([])
            return future
        run = _Run([None] * len(calls), len(calls), future, timeout_s or self.timeout_s)
        chunks = [
            _Chunk(run, scope, calls[at : at + CHUNK_CALLS], list(range(at, min(at + CHUNK_CALLS, len(calls)))))
            for at in range(0, len(calls), CHUNK_CALLS)
        ]
        tenant = scope.tenant
        with self._lock:
            if self._closed:
                raise PoolBusy("the rule pool is shut down")
            if not self._started:  # every worker at the first call: each joins once it answers
                self._started = True
                for worker, pool in enumerate(self._workers):
                    pool.schedule(ready).add_done_callback(lambda _t, w=worker: self._up(w))
            self._check_room(tenant, len(calls))
            queue = self._tenants.setdefault(tenant, _TenantQueue())
            if not queue.active:  # back from idle: no credit for the time away
                self._turns.rejoin(tenant)
            queue.requests.setdefault(scope.id, deque()).extend(chunks)
            queue.queued += len(calls)
            self._queued_calls += len(calls)
            if scope.id not in self._scopes:
                self._scopes[scope.id] = None
                unregister = scope.on_cancel(partial(self._cancel, scope))
                if scope.id in self._scopes:  # (a scope cancelled already was dropped just now)
                    self._scopes[scope.id] = unregister
        self._dispatch()
        return future

    def check_room(self, tenant: Tenant, calls: int) -> None:
        """PoolBusy when ``calls`` more would not fit ``tenant``'s share now: asked before
        a request is planned, so that a refusal costs little (``run`` asks again)."""
        with self._lock:
            self._check_room(tenant, calls)

    def _check_room(self, tenant: Tenant, calls: int) -> None:
        total = self._queued_calls + calls
        if total <= self.max_queued:
            return
        queue = self._tenants.get(tenant)
        queued = queue.queued if queue is not None else 0
        active = {t for t, q in self._tenants.items() if q.active} | {tenant}
        share = self.max_queued * self._weight(tenant) / sum(self._weight(t) for t in active)
        if total > 2 * self.max_queued or queued + calls > share:
            who = f"tenant {tenant!r}" if tenant is not None else "this service"
            raise PoolBusy(
                f"{who} has {queued} rule calls queued and the pool {self._queued_calls}; "
                f"{calls} more would pass its share of {int(share)}",
                tenant,
            )

    def _dispatch(self) -> None:
        with self._lock:
            while self._idle and not self._closed and self._busy() < self.max_busy:
                chunk = self._next_chunk()
                if chunk is None:
                    return
                worker = self._idle.pop()
                self._queued_calls -= len(chunk.calls)
                task = self._workers[worker].schedule(
                    run_timed, args=(chunk.calls, chunk.run.timeout_s), timeout=chunk.run.timeout_s
                )
                self._running.setdefault(chunk.scope.id, set()).add(task)
                started = time.monotonic()
                task.add_done_callback(lambda t, c=chunk, w=worker, s=started: self._done(c, w, t, s))

    def _busy(self) -> int:
        """Workers running a call, or being replaced after one was killed."""
        return sum(queue.running for queue in self._tenants.values())

    def _next_chunk(self) -> _Chunk | None:
        """The tenant furthest behind among those with work queued and under their share
        of the workers; its first request in turn under its share; that request moves to
        the back of the tenant's turns."""
        ready = [t for t, q in self._tenants.items() if q.queued and q.running < self.share]
        for tenant in self._turns.in_turn(ready):
            queue = self._tenants[tenant]
            for scope_id, chunks in queue.requests.items():
                if chunks and len(self._running.get(scope_id, ())) < self.share:
                    chunk = chunks.popleft()
                    queue.requests.move_to_end(scope_id)
                    queue.queued -= len(chunk.calls)
                    queue.running += 1
                    self._turns.charge(tenant, {})  # its turn; the work is known when done
                    return chunk
        return None

    def _done(self, chunk: _Chunk, worker: int, task: Any, started: float) -> None:
        replaced = True  # the worker was killed (or may have been) and is being replaced
        try:
            outcome: Any = task.result()
            replaced = False
        except FutureTimeout:
            outcome = "timeout"
        except ProcessExpired as exc:
            outcome = CallFailure("crashed", f"the worker died (exit code {exc.exitcode})")
        except CancelledError:
            outcome = CallFailure("cancelled", "the request was cancelled")
        except Exception as exc:  # pickling problems, a broken pool
            outcome = CallFailure("error", f"{type(exc).__name__}: {exc}")
        tenant = chunk.scope.tenant
        with self._lock:
            if replaced and not self._closed:  # still the tenant's until the new worker answers
                self._workers[worker].schedule(ready).add_done_callback(
                    lambda _t, w=worker, s=started: self._back(tenant, w, s)
                )
            else:
                self._release(tenant, worker, started)
            queue = self._tenants[tenant]
            running = self._running.get(chunk.scope.id)
            if running is not None:
                running.discard(task)
            retry = outcome == "timeout" and len(chunk.calls) > 1 and not chunk.scope.cancelled
            if retry:  # find the slow call: each alone, ahead of the request's other work
                singles = [_Chunk(chunk.run, chunk.scope, [c], [p]) for c, p in zip(chunk.calls, chunk.positions)]
                queue.requests.setdefault(chunk.scope.id, deque()).extendleft(reversed(singles))
                queue.requests.move_to_end(chunk.scope.id, last=False)
                queue.queued += len(singles)
                self._queued_calls += len(singles)
        if not retry:
            if outcome == "timeout":
                outcome = CallFailure("timeout", f"timed out after {chunk.run.timeout_s:g}s")
            values = outcome if isinstance(outcome, list) else [outcome] * len(chunk.calls)
            self._finish(chunk, values)
        self._dispatch()

    def _release(self, tenant: Tenant, worker: int, started: float) -> None:
        """The worker is free again: the time since ``started`` is charged to ``tenant``."""
        seconds = time.monotonic() - started
        self._tenants[tenant].running -= 1
        self._turns.account(tenant, seconds)
        self._idle.append(worker)

    def _up(self, worker: int) -> None:
        with self._lock:
            self._idle.append(worker)
        self._dispatch()

    def _back(self, tenant: Tenant, worker: int, started: float) -> None:
        with self._lock:
            self._release(tenant, worker, started)
        self._dispatch()

    def _finish(self, chunk: _Chunk, values: list[Any]) -> None:
        run = chunk.run
        for position, value in zip(chunk.positions, values):
            run.results[position] = value
        with self._lock:
            run.left -= len(chunk.positions)
            done = run.left == 0
            if done:
                self._forget_if_idle(chunk.scope)
        if done and not run.future.done():
            run.future.set_result(run.results)

    def _forget_if_idle(self, scope: Scope) -> None:
        """Drop a request's bookkeeping once nothing of it is queued or running."""
        queue = self._tenants.get(scope.tenant)
        if queue is not None and not queue.requests.get(scope.id) and not self._running.get(scope.id):
            queue.requests.pop(scope.id, None)
            self._running.pop(scope.id, None)
            unregister = self._scopes.pop(scope.id, None)
            if unregister is not None:
                unregister()

    def _cancel(self, scope: Scope, reason: str) -> None:
        """The request is gone: fail its queued calls, kill its running ones."""
        with self._lock:
            queue = self._tenants.get(scope.tenant)
            queued = list(queue.requests.get(scope.id, ())) if queue is not None else []
            if queue is not None and scope.id in queue.requests:
                queue.requests[scope.id].clear()
            dropped = sum(len(c.calls) for c in queued)
            self._queued_calls -= dropped
            if queue is not None:
                queue.queued -= dropped
            running = list(self._running.get(scope.id, ()))
        failure = CallFailure("cancelled", f"the request was cancelled ({reason})")
        for chunk in queued:
            self._finish(chunk, [failure] * len(chunk.calls))
        for task in running:
            task.cancel()  # pebble stops the worker and starts a new one

    def close(self) -> None:
        with self._lock:
            self._closed = True
            queued = [c for q in self._tenants.values() for chunks in q.requests.values() for c in chunks]
            for q in self._tenants.values():
                for chunks in q.requests.values():
                    chunks.clear()
                q.queued = 0
        failure = CallFailure("cancelled", "the service is shutting down")
        for chunk in queued:
            self._finish(chunk, [failure] * len(chunk.calls))
        for pool in self._workers:
            pool.stop()
        for pool in self._workers:
            pool.join(timeout=5)
