"""Admin calls made with ``?async=true``: each a task with an id, polled by that id
(GET /v1/admin/operations/{id}) or on its model's state (the latest one there).

Every task the lifecycle starts is held here until it ends: the event loop keeps only
weak references, and a shutdown cancels what still runs and waits for it, so nothing
is left writing to a model being closed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Coroutine
from typing import Any

from rewardserve.models.errors import NotFound
from rewardserve.protocol import AdminModelState, AdminOperation

log = logging.getLogger(__name__)
# Operations remembered by id, the oldest forgotten first (a running one is never).
KEPT = 256
# How long a shutdown waits for the cancelled tasks to end.
CLOSE_TIMEOUT_S = 30.0


class AdminOperations:
    def __init__(self) -> None:
        self._by_id: OrderedDict[str, AdminOperation] = OrderedDict()
        self._latest: dict[str, AdminOperation] = {}  # model -> its latest async call
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, name: str, operation: str, call: Coroutine[Any, Any, AdminModelState]) -> AdminOperation:
        """``call`` run as a task; its record, running."""
        record = AdminOperation(
            id=uuid.uuid4().hex[:12], model=name, operation=operation, status="running", started=time.time()
        )

        async def run() -> None:
            try:
                await call
                record.status = "succeeded"
            except asyncio.CancelledError:
                record.status, record.error = "cancelled", "the service shut down before it ended"
                raise
            except Exception as exc:  # noqa: BLE001 - the caller reads it from the record
                record.status, record.error = "failed", " ".join(f"{exc}".split())[:800]
                log.warning("model %s: %s (async) failed: %s", name, operation, record.error)
            finally:
                record.seconds = time.time() - record.started

        self._by_id[record.id] = self._latest[name] = record
        self._forget_old()
        self.spawn(run())
        return record

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """``work`` as a task held until it ends (and cancelled at shutdown)."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def get(self, operation_id: str) -> AdminOperation:
        record = self._by_id.get(operation_id)
        if record is None:
            raise NotFound(
                f"no async admin call {operation_id!r} here (the last {KEPT} are kept, on this replica)",
                param="id",
            )
        return record

    def latest(self, name: str) -> AdminOperation | None:
        return self._latest.get(name)

    def _forget_old(self) -> None:
        for key in [k for k, r in self._by_id.items() if r.status != "running"][: max(0, len(self._by_id) - KEPT)]:
            del self._by_id[key]

    async def close(self) -> None:
        """Cancel what still runs and wait for it to end."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT_S)
            if pending:
                log.warning("%d admin tasks still running at shutdown", len(pending))
