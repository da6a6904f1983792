"""What every lifecycle operation of a served model shares (service/ops/lifecycle.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from rewardserve.engine.registry import ModelRegistry, Served
from rewardserve.models.reward_model import RewardModel
from rewardserve.protocol import AdminModelState
from rewardserve.service.api.admin.operations import AdminOperations
from rewardserve.service.observability.metrics import Metrics
from rewardserve.service.ops.canary_watch import Canaries
from rewardserve.service.ops.model_memory import drop, held_bytes
from rewardserve.service.ops.weights_update import (
    folder_fingerprint,
)
from rewardserve.service.settings import Settings

log = logging.getLogger(__name__)


# How long a sleep or a retirement waits for the requests using the model.
DRAIN_TIMEOUT_S = 300.0


class LifecycleBase:
    """What every lifecycle operation shares: the registry, a lock per model name, the
    versions each model served and what each load or weights call replaced, the
    canaries' watch, the ?async=true operations, and the state each call answers."""

    def __init__(self, registry: ModelRegistry, settings: Settings, metrics: Metrics):
        self.registry = registry
        self.settings = settings
        self.metrics = metrics
        self._locks: dict[str, asyncio.Lock] = {}
        self._loading: dict[str, str] = {}  # name -> the version loading beside it
        # name -> the (source, version, how, fingerprint) each load or weights call
        # replaced, the latest last: what rollback serves again, the way it came (loaded
        # beside, or weights), if its folder still holds what it held
        self._history: dict[str, list[tuple[str, str, str, str | None]]] = {}
        self._served_versions: dict[str, set[str]] = {}  # every version each model has served
        self.canaries = Canaries(registry, metrics, self._retire_stopped)  # their health on real traffic
        self.operations = AdminOperations()  # ?async=true calls, and every task started here
        self._updates: dict[str, str] = {}  # name -> how its last weights call was applied

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def state(self, name: str) -> AdminModelState:
        served = self.registry.current(name)
        canary = self.registry.canaries.get(name)
        state = "loading" if name in self._loading and served.state == "awake" else served.state
        return AdminModelState(
            name=name,
            state=state,  # type: ignore[arg-type]  # one of ModelState's
            version=served.version,
            source=served.model.spec.source,
            sleep_level=served.sleep_level if served.state == "sleeping" else None,
            sleep_mode=served.sleep_mode if served.state == "sleeping" else None,
            loading_version=self._loading.get(name),
            in_flight=served.in_flight,
            memory_bytes=held_bytes(served.model),
            last_operation_s=served.last_operation_s,
            canary_version=canary[0].version if canary else None,
            canary_percent=canary[1] * 100 if canary else None,
            canary_stopped=self.canaries.stopped(name),
            weights_update=self._updates.get(name),
            operation=self.operations.latest(name),
        )

    def start(self, name: str, operation: str, call: Coroutine[Any, Any, AdminModelState]) -> AdminModelState:
        """``call`` run as a task (``?async=true``): the state now, its ``operation``
        running; polling the operation (or the model's state) shows how it ends."""
        try:
            self.registry.current(name)  # an unknown model is a 404 now, not a failed task
        except Exception:
            call.close()
            raise
        self.operations.start(name, operation, call)
        return self.state(name)

    async def close(self) -> None:
        """At shutdown: async calls still running are cancelled, and awaited."""
        await self.operations.close()

    def _retire_stopped(self, name: str, served: Served) -> None:
        """A canary found unhealthy (service/ops/canary_watch.py): drained and closed."""

        async def retire() -> None:
            async with self._lock(name):
                await self._retire(served)

        self.operations.spawn(retire())

    @asynccontextmanager
    async def _operation(self, name: str, operation: str) -> AsyncIterator[None]:
        """The call timed in the metrics, by outcome; the model's gauges after it."""
        start, outcome = time.perf_counter(), "failed"
        try:
            yield
            outcome = "ok"
        finally:
            self.metrics.lifecycle_seconds.labels(name, operation, outcome).observe(time.perf_counter() - start)
            served = self.registry.current(name)
            self.metrics.model_asleep.labels(name).set(served.sleep_level or 0 if served.state == "sleeping" else 0)
            self.metrics.model_memory.labels(name).set(held_bytes(served.model))

    def _remember(self, name: str, served: Served, how: str) -> None:
        """What ``served`` is, for rollback, as a newer version replaces it."""
        source = served.model.spec.source
        fingerprint = served.fingerprint or folder_fingerprint(source)
        self._history.setdefault(name, []).append((source, served.version, how, fingerprint))

    async def _retire(self, served: Served) -> None:
        served.state = "draining"
        await drained(served)
        served.retired = True  # before any await: nobody holds it from here
        await self._close(served)

    def _versions_used(self, name: str, served: Served) -> set[str]:
        used = self._served_versions.setdefault(name, set())
        used.add(served.version)
        used.update(version for _, version, _, _ in self._history.get(name, []))
        return used

    def _set_version(self, name: str, served: Served, version: str) -> None:
        self.metrics.model_version.labels(name, served.version).set(0)
        self.metrics.model_version.labels(name, version).set(1)
        served.version = version

    async def _close(self, served: Served) -> None:
        """Stop its batcher, close its model, and hand the memory back."""
        if served.batcher is not None:
            await served.batcher.stop()
            served.batcher = None
        model = served.model
        await asyncio.to_thread(drop, model)


async def drained(served: Served) -> None:
    try:
        await asyncio.wait_for(served.idle.wait(), DRAIN_TIMEOUT_S)
    except TimeoutError:
        log.warning(
            "model %s: %d requests still use it after %.0fs", served.model.name, served.in_flight, DRAIN_TIMEOUT_S
        )


def load_and_probe(model: RewardModel, delay_s: float, pin: bool) -> None:
    """``pin``: a new source, pinned as at start; a model woken again was pinned then."""
    if delay_s:
        time.sleep(delay_s)
    if pin:
        model.pin_revision()
    model.load()
    model.probe()
