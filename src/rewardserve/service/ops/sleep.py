"""Sleep and wake: a served model stops serving and frees memory (level 1: what its
backend holds beside the weights; level 2: the weights too), and comes back; a model
whose spec says ``wake_on_request`` is woken by a request (the engine's waker)."""

from __future__ import annotations

import asyncio
import logging
import time

from rewardserve.engine.registry import Served
from rewardserve.models.errors import one_line
from rewardserve.protocol import AdminModelState
from rewardserve.service.ops.lifecycle_base import LifecycleBase, drained, load_and_probe
from rewardserve.service.ops.model_memory import drop
from rewardserve.service.ops.weights_update import (
    LoadFailed,
    in_thread,
)

log = logging.getLogger(__name__)


class Sleeping(LifecycleBase):
    async def sleep(self, name: str, level: int) -> AdminModelState:
        async with self._operation(name, "sleep"), self._lock(name):
            served = self.registry.current(name)
            if served.state == "sleeping" and (served.sleep_level or 0) >= level:
                return self.state(name)  # idempotent
            start = time.perf_counter()
            fresh = None
            if level == 2 and served.model.runs_torch:
                try:  # built before anything changes: weights not loaded, read again on wake
                    fresh = self.registry.build(served.model.spec)
                except (ValueError, OSError, RuntimeError) as exc:
                    raise LoadFailed(
                        f"model {name!r} cannot sleep at level 2: waking would reload it from "
                        f"{served.model.spec.source}, which cannot be read ({exc}); level 1 keeps its weights",
                        param="level",
                    ) from None
            served.state, served.sleep_level = "sleeping", level
            await drained(served)
            if fresh is not None:
                await self._close(served)
                served.model = fresh
                served.sleep_mode = "weights freed: loaded again from its source on wake"
            elif served.sleep_mode is None:  # level 1 (or a model without weights)
                served.sleep_mode = await in_thread(served.model.to_host)
            served.last_operation_s = time.perf_counter() - start
            log.info("model %s: asleep at level %d in %.2fs", name, level, served.last_operation_s)
        return self.state(name)

    async def wake(self, name: str) -> AdminModelState:
        async with self._operation(name, "wake_up"):
            await self._wake(self.registry.current(name))
        return self.state(name)

    async def _wake(self, served: Served) -> None:
        async with self._lock(served.model.name):
            if served.state != "sleeping":
                return
            start = time.perf_counter()
            if served.batcher is None:  # level 2: load, probe, batch again
                model = served.model
                try:
                    await in_thread(load_and_probe, model, 0.0, False)
                except Exception as exc:  # noqa: BLE001 - its source gone or broken: it sleeps on
                    await asyncio.to_thread(drop, model)  # what it loaded; the next wake loads again
                    raise LoadFailed(
                        f"model {model.name!r} did not wake: {model.spec.source}: "
                        + one_line(exc)[:600]
                        + "; it sleeps on (POST .../weights or .../load gives it weights that read)",
                        param="name",
                    ) from None
                self.registry.start_batching(served)
            else:  # level 1: its weights back from host memory where to_host moved them
                try:
                    await in_thread(served.model.from_host)
                except Exception as exc:  # noqa: BLE001 - the device is full (the policy holds it): it sleeps on
                    raise LoadFailed(
                        f"model {served.model.name!r} did not wake: its weights did not go back to its device "
                        f"({one_line(exc)[:600]}); it sleeps on, its weights in host memory",
                        param="name",
                    ) from None
            served.state, served.sleep_level, served.sleep_mode = "awake", None, None
            served.last_operation_s = time.perf_counter() - start
            log.info("model %s: awake in %.2fs", served.model.name, served.last_operation_s)
