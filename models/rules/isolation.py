"""Where every rule runs: worker processes with a time limit and a memory limit per call,
shared fairly between requests.

A rule is code run on text the client controls (sympy on a crafted formula, a
backtracking regex, a quadratic alignment); so is a request's template. None of it runs
in the serving process:

- each call runs in a pool worker (pebble, niced below the serving process) under
  ``RLIMIT_AS`` set to what the worker already maps plus ``memory_mb``; a call over it
  fails with MemoryError alone;
- workers are forked from a fork server that has the rules' libraries imported (not
  from the serving process, which holds torch threads and an event loop), so a worker
  killed for overrunning is back in a fraction of a second rather than the seconds a
  fresh interpreter importing sympy takes;
- calls go to the workers in chunks (one pickling, one round trip); a chunk that runs
  past ``timeout_s`` is killed with its worker (pebble starts a fresh one) and its calls
  are retried one by one, so only the slow call is reported as timed out;
- the pool's own queue, not pebble's, decides what runs next: requests take turns
  (round robin) and one request holds at most ``workers - 1`` workers, so a request
  arriving while another's slow calls run always finds a worker;
- work of a request that is cancelled (client gone, deadline passed) is dropped from
  the queue, and its running calls are killed.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from collections import OrderedDict, deque
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from pebble import ProcessExpired, ProcessPool

from rewardserve.models.request_scope import RequestScope

log = logging.getLogger(__name__)

CHUNK_CALLS = 16
WORKER_NICENESS = 19
# Imported once by the fork server, shared by every worker forked from it ("__main__":
# a script's main module is imported there once, not again in every worker).
PRELOAD = (
    "__main__", "rewardserve.models.rules.isolation", "rewardserve.models.rules.warmed", "sacrebleu",
    "rouge_score.rouge_scorer", "rapidfuzz.fuzz", "jsonschema",
)


def worker_context():
    """A fork server with PRELOAD imported where there is one (Linux), else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


@dataclass(frozen=True)
class RuleCall:
    """A rule on one response. With ``variables``, the string ``args`` are templates the
    worker renders first (models/text/templating.py, bounded)."""

    rule: str
    response: str
    reference: Any
    args: dict
    variables: dict | None = None


@dataclass(frozen=True)
class RenderCall:
    """A request's template rendered under the sandbox's limits."""

    source: str
    variables: dict


@dataclass(frozen=True)
class CallFailure:
    """Why a call has no result. ``kind``: ``rule`` (the rule cannot judge this input),
    ``item`` (a template field this item lacks), ``template`` (the template is over its
    limits) and ``limit`` (an input over the rule's caps, known once its args were
    rendered): the request's fault; ``timeout``, ``memory``, ``crashed``, ``cancelled``,
    ``error`` (the rule's own bug)."""

    kind: str
    message: str


class PoolBusy(Exception):
    """The pool's queue is full; retry later."""


# ------------------------------------------------------------------ worker side

_memory_bytes = 0


def _init_worker(memory_mb: int, warm: tuple[str, ...]) -> None:
    """Runs once per worker process, outside any call's time limit."""
    global _memory_bytes
    _memory_bytes = memory_mb * 1024 * 1024
    # Below the serving process: a call that burns its whole time limit takes the cores
    # the forward passes leave, not the other way round.
    os.nice(WORKER_NICENESS)
    import rewardserve.models.rules.warmed  # noqa: F401 (done in the fork server already, where there is one)
    from rewardserve.models.rules import get_rule

    for name in warm:
        get_rule(name).warm()


def _mapped_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


class _MemoryLimit:
    """``RLIMIT_AS`` at what is mapped now plus the budget, for one call."""

    def __enter__(self):
        import resource

        self.previous = resource.getrlimit(resource.RLIMIT_AS)
        if _memory_bytes > 0:
            limit = _mapped_bytes() + _memory_bytes
            hard = self.previous[1]
            resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
        return self

    def __exit__(self, *exc) -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, self.previous)


def _trim() -> None:
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def run_calls(calls: list) -> list:
    """Worker entry point: each call's result (a float, a rendered string) or its
    CallFailure, in order."""
    return [_run_one(call) for call in calls]


def _run_one(call) -> Any:
    from rewardserve.models.planning import ItemError
    from rewardserve.models.rules import RuleError, get_rule, with_named_reference
    from rewardserve.models.text.templating import TemplateLimitError, render_field_bounded

    try:
        with _MemoryLimit():
            if isinstance(call, RenderCall):
                return render_field_bounded(call.source, call.variables)
            rule = get_rule(call.rule)
            args, reference = call.args, call.reference
            if call.variables is not None:  # rendered only now: its caps checked only now
                reference, args = with_named_reference(reference, render_field_bounded(call.args, call.variables))
                problem = rule.check(call.response, reference, args)
                if problem is not None:
                    return CallFailure("limit", f"{problem[0]}: {problem[1]} ({call.rule})")
            return float(rule.fn(call.response, reference, **args))
    except MemoryError:
        _trim()
        return CallFailure("memory", f"over its memory limit ({_memory_bytes // 2**20} MB)")
    except TemplateLimitError as exc:
        return CallFailure("template", str(exc))
    except ItemError as exc:
        return CallFailure("item", str(exc))
    except RuleError as exc:
        return CallFailure("rule", str(exc))
    except Exception as exc:  # a rule's own bug stays with its call
        return CallFailure("error", f"{type(exc).__name__}: {exc}")


# ------------------------------------------------------------------ pool side


@dataclass
class _Run:
    """One ``run`` call: where its calls' results go."""

    results: list
    left: int
    future: Future
    timeout_s: float


@dataclass
class _Chunk:
    run: _Run
    scope: RequestScope
    calls: list
    positions: list[int]

    @property
    def scope_id(self) -> int:
        return self.scope.id


class RulePool:
    """A fair, cancellable process pool for rule calls. ``run`` is thread-safe."""

    def __init__(self, workers: int, timeout_s: float, memory_mb: int = 1024, *,
                 max_queued: int = 200_000, warm: tuple[str, ...] = (), max_tasks: int = 2000):
        self.workers = workers
        self.timeout_s = timeout_s
        self.max_queued = max_queued
        self._pool = ProcessPool(
            max_workers=workers, max_tasks=max_tasks, initializer=_init_worker,
            initargs=(memory_mb, warm), context=worker_context(),
        )
        # Reentrant: a cancelled pebble future runs its callbacks in the cancelling thread.
        self._lock = threading.RLock()
        self._queues: OrderedDict[int, deque[_Chunk]] = OrderedDict()  # round robin order
        self._running: dict[int, set] = {}  # scope id -> pebble futures
        self._scopes: dict[int, tuple[RequestScope, Any]] = {}  # id -> (scope, unregister)
        self._free = workers
        self._queued_calls = 0
        self._closed = False

    @property
    def queued_calls(self) -> int:
        return self._queued_calls

    def run(self, calls: list, scope: RequestScope | None = None, timeout_s: float | None = None) -> Future:
        """Queue ``calls`` for ``scope``'s request; the future resolves to their results
        in order (a value or a CallFailure each). ``timeout_s`` per chunk of calls
        (default: the pool's). Raises PoolBusy when the queue is full."""
        scope = scope or RequestScope()
        future: Future = Future()
        if not calls:
            future.set_result([])
            return future
        run = _Run([None] * len(calls), len(calls), future, timeout_s or self.timeout_s)
        chunks = [
            _Chunk(run, scope, calls[at : at + CHUNK_CALLS], list(range(at, min(at + CHUNK_CALLS, len(calls)))))
            for at in range(0, len(calls), CHUNK_CALLS)
        ]
        with self._lock:
            if self._closed:
                raise PoolBusy("the rule pool is shut down")
            if self._queued_calls + len(calls) > self.max_queued:
                raise PoolBusy(f"the rule pool has {self._queued_calls} calls queued")
            self._queues.setdefault(scope.id, deque()).extend(chunks)
            self._queued_calls += len(calls)
            if scope.id not in self._scopes:
                self._scopes[scope.id] = (scope, None)
                unregister = scope.on_cancel(lambda reason, sid=scope.id: self._cancel(sid, reason))
                if scope.id in self._scopes:  # (a scope cancelled already was dropped just now)
                    self._scopes[scope.id] = (scope, unregister)
        self._dispatch()
        return future

    def _dispatch(self) -> None:
        with self._lock:
            while self._free > 0 and not self._closed:
                chunk = self._next_chunk()
                if chunk is None:
                    return
                self._free -= 1
                self._queued_calls -= len(chunk.calls)
                task = self._pool.schedule(run_calls, args=(chunk.calls,), timeout=chunk.run.timeout_s)
                self._running.setdefault(chunk.scope_id, set()).add(task)
                task.add_done_callback(lambda t, c=chunk: self._done(c, t))

    def _next_chunk(self) -> _Chunk | None:
        """The first request in round-robin order that has work queued and is under its
        share; it moves to the back."""
        # Always one worker short of all: a request arriving while another's slow calls
        # run finds a worker free.
        share = max(1, self.workers - 1)
        for scope_id, queue in self._queues.items():
            if queue and len(self._running.get(scope_id, ())) < share:
                chunk = queue.popleft()
                self._queues.move_to_end(scope_id)
                return chunk
        return None

    def _done(self, chunk: _Chunk, task) -> None:
        try:
            outcome: Any = task.result()
        except FutureTimeout:
            outcome = "timeout"
        except ProcessExpired as exc:
            outcome = CallFailure("crashed", f"the worker died (exit code {exc.exitcode})")
        except CancelledError:
            outcome = CallFailure("cancelled", "the request was cancelled")
        except Exception as exc:  # pickling problems, a broken pool
            outcome = CallFailure("error", f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._free += 1
            running = self._running.get(chunk.scope_id)
            if running is not None:
                running.discard(task)
            retry = outcome == "timeout" and len(chunk.calls) > 1 and not chunk.scope.cancelled
            if retry:  # find the slow call: each alone, ahead of the request's other work
                singles = [_Chunk(chunk.run, chunk.scope, [c], [p]) for c, p in zip(chunk.calls, chunk.positions)]
                self._queues.setdefault(chunk.scope_id, deque()).extendleft(reversed(singles))
                self._queued_calls += len(singles)
        if not retry:
            if outcome == "timeout":
                outcome = CallFailure("timeout", f"timed out after {chunk.run.timeout_s:g}s")
            values = outcome if isinstance(outcome, list) else [outcome] * len(chunk.calls)
            self._finish(chunk, values)
        self._dispatch()

    def _finish(self, chunk: _Chunk, values: list) -> None:
        run = chunk.run
        for position, value in zip(chunk.positions, values):
            run.results[position] = value
        with self._lock:
            run.left -= len(chunk.positions)
            done = run.left == 0
            if done:
                self._forget_if_idle(chunk.scope_id)
        if done and not run.future.done():
            run.future.set_result(run.results)

    def _forget_if_idle(self, scope_id: int) -> None:
        """Drop a request's bookkeeping once nothing of it is queued or running."""
        if not self._queues.get(scope_id) and not self._running.get(scope_id):
            self._queues.pop(scope_id, None)
            self._running.pop(scope_id, None)
            _, unregister = self._scopes.pop(scope_id, (None, None))
            if unregister is not None:
                unregister()

    def _cancel(self, scope_id: int, reason: str) -> None:
        """The request is gone: fail its queued calls, kill its running ones."""
        with self._lock:
            queued = list(self._queues.get(scope_id, ()))
            if scope_id in self._queues:
                self._queues[scope_id].clear()
            self._queued_calls -= sum(len(c.calls) for c in queued)
            running = list(self._running.get(scope_id, ()))
        failure = CallFailure("cancelled", f"the request was cancelled ({reason})")
        for chunk in queued:
            self._finish(chunk, [failure] * len(chunk.calls))
        for task in running:
            task.cancel()  # pebble stops the worker and starts a new one

    def close(self) -> None:
        with self._lock:
            self._closed = True
            queued = [c for q in self._queues.values() for c in q]
            for q in self._queues.values():
                q.clear()
        failure = CallFailure("cancelled", "the service is shutting down")
        for chunk in queued:
            self._finish(chunk, [failure] * len(chunk.calls))
        self._pool.stop()
        self._pool.join(timeout=5)
