"""What a piece of work knows about the request it came from: who it is (for fair
sharing of the rule pool), until when its answer is wanted, and whether it is still
wanted at all.

The service makes one scope per HTTP request on arrival and cancels it when the client
hangs up, the request's deadline passes, or the replica gives up on it at shutdown.
Whoever holds work of that request (a batcher queue, the rule pool) registers a callback
and drops the work then, queued or running.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

_ids = itertools.count(1)


class RequestScope:
    """A cancellation token with an identity and an optional deadline (a
    ``time.monotonic()`` value). Thread-safe: cancelled from the event loop, watched from
    pool threads."""

    def __init__(self, deadline: float | None = None, name: str | None = None, tenant: str | None = None):
        self.id = next(_ids)
        self.name = name or f"r{self.id}"
        # Whose work it is (engine/tenants.py): batchers share a model fairly between
        # tenants. None: no tenants configured, or a key of none.
        self.tenant = tenant
        self.deadline = deadline
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[str], None]] = []

    @property
    def cancelled(self) -> bool:
        return self.reason is not None

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: no deadline)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def expired(self) -> bool:
        return self.deadline is not None and self.deadline <= time.monotonic()

    def cancel(self, reason: str) -> None:
        """Mark the request unwanted (``disconnected``, ``deadline``, ``shutdown``) and run
        the callbacks once; later calls do nothing."""
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(reason)

    def on_cancel(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(reason)`` when cancelled (at once if it already is). Returns
        a function that unregisters it."""
        with self._lock:
            if self.reason is None:
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback(self.reason)
        return lambda: None

    def _forget(self, callback: Callable[[str], None]) -> None:
        with self._lock:
            try:
                self._callbacks.remove(callback)
            except ValueError:
                pass
