"""A served model's lifecycle while the service runs: sleep, wake, and a new version
loaded beside the serving one (the admin API, service/api/admin/routes.py).

Every request that runs a model's plan holds it (engine/registry.py ``hold``) from the
moment it starts; a sleep, and the retirement of a replaced version, wait until nobody
holds it, so a sleep never cuts off a batch in flight, and a request never meets a model
closed under it. Lifecycle calls on one model are serialised (a lock per name), and each returns when
its work is done.

    sleep 1    stop serving: requests get a typed 503 (``model_asleep``, retry-after),
               or wake it when the model says ``wake_on_request``. What the model holds
               on a device is freed and its weights kept in host memory (moved there from
               a GPU; vLLM's own sleep mode where its platform has one); on a CPU nothing
               moves. The state's ``sleep_mode`` says which.
    sleep 2    also free the weights: the model is closed and dropped, its memory handed
               back (gc, malloc_trim); waking loads and probes it again from its source.
    load       a new version built and loaded beside the serving one, off the compute
               thread so the serving one keeps its speed; when its probe passes, new
               requests get it (atomically: one dict entry), and the old one drains and
               is closed. A load that fails keeps the old one serving and frees what it
               loaded (Triton's model control).
    weights    a checkpoint the trainer wrote written into the serving model's own tensors
               where the backend can (new requests wait, those in flight finish on the
               old weights), else loaded beside as a load is.
    canary     a version beside the serving one takes a share of its requests; one that
               turns out unhealthy on real traffic (service/ops/canary_watch.py) gets 0% at
               once and is drained and closed.

By job: sleep.py (sleep, wake, the engine's waker), versions.py (load beside, canary,
promote), weights.py (weights in place, else loaded beside), lifecycle_base.py (what
they share: locks, history, state, retiring); rollback, which replays either, is here.

A call made with ``?async=true`` runs as a task (service/api/admin/operations.py): the
answer is 202 with the model's state, whose ``operation`` says how the call is going
(running, succeeded, failed; cancelled by a shutdown), polled by its id.
"""

from __future__ import annotations

import logging

from rewardserve.engine.registry import ModelRegistry
from rewardserve.models.checkpoints import is_local
from rewardserve.models.errors import InvalidRequest
from rewardserve.protocol import AdminModelState
from rewardserve.service.observability.metrics import Metrics
from rewardserve.service.ops.sleep import Sleeping
from rewardserve.service.ops.weights import Weights
from rewardserve.service.ops.weights_update import (
    LoadFailed,
    folder_fingerprint,
)
from rewardserve.service.settings import Settings

log = logging.getLogger(__name__)


class Lifecycle(Sleeping, Weights):
    """Every lifecycle call on the served models, by job: sleep.py, versions.py,
    weights.py; rollback here, since it replays either a load or a weights call."""

    def __init__(self, registry: ModelRegistry, settings: Settings, metrics: Metrics):
        super().__init__(registry, settings, metrics)
        registry.waker = self._wake  # a model asleep that may wake on a request

    async def rollback(self, name: str) -> AdminModelState:
        """The version the last load or weights call replaced, served again the same way:
        loaded beside (the current one serves until it is ready), or its weights written
        again from the folder they were read from (a hub id is loaded). A folder saved
        over since is refused: it holds other weights than that version's."""
        async with self._operation(name, "rollback"), self._lock(name):
            history = self._history.get(name)
            if not history:
                raise InvalidRequest(f"model {name!r} has no earlier version to roll back to", param="name")
            source, version, how, fingerprint = history[-1]
            if fingerprint is not None and folder_fingerprint(source) != fingerprint:
                raise LoadFailed(
                    f"model {name!r}: {source} has changed since version {version!r} was read from it (saved "
                    f"over, or removed); load or write that version's own checkpoint; version "
                    f"{self.registry.current(name).version!r} serves on",
                    param="name",
                )
            if how == "weights" and is_local(source):
                state = await self._weights_locked(name, source, version, False)
            else:
                state = await self._load_locked(name, source, version, False, None)
            history.pop()
            return state
