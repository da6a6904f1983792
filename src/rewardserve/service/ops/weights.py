"""Weights: a checkpoint the trainer wrote, written into the serving model's own
tensors where its backend can (new requests wait, those in flight finish on the old
weights), else loaded beside it as a new version is."""

from __future__ import annotations

import asyncio
import logging

from rewardserve.models.errors import InvalidRequest
from rewardserve.protocol import AdminModelState
from rewardserve.service.ops.lifecycle_base import drained
from rewardserve.service.ops.versions import Versions
from rewardserve.service.ops.weights_update import (
    LoadFailed,
    WeightsLost,
    checked,
    config_differs,
    folder_fingerprint,
    in_thread,
    refuse_unless_checkpoint,
    write_or_read_back,
)

log = logging.getLogger(__name__)


class Weights(Versions):
    async def weights(self, name: str, path: str, version: str) -> AdminModelState:
        """The weights at ``path`` (a checkpoint of this model the trainer wrote) serve as
        ``version``. Where the backend can, they are written into the serving model's own
        tensors (no second copy in device memory): new requests wait, the ones in flight
        finish on the old weights, then all read the new. Elsewhere (weights packed or
        compiled on a CPU) the checkpoint is loaded beside and swapped in as a load is,
        with the serving model's tokenizer. Names or shapes that are not this model's
        leave it serving as it was."""
        async with self._operation(name, "weights"), self._lock(name):
            return await self._weights_locked(name, path, version, True)

    async def _weights_locked(self, name: str, path: str, version: str, remember: bool) -> AdminModelState:
        served = self.registry.current(name)
        if served.model.kind == "rule" or not served.model.runs_torch:
            raise InvalidRequest(f"model {name!r} is of kind {served.model.kind}: it has no weights")
        refuse_unless_checkpoint(path, served.version)
        spec = served.model.spec
        moved = spec.model_copy(update={"source": path, "tokenizer": spec.tokenizer or spec.source, "revision": None})
        if served.state == "sleeping" and served.sleep_level == 2:
            # Nothing held to write into: the wake loads these weights.
            if remember:
                self._remember(name, served, "weights")
            served.model = self.registry.build(moved)
            served.fingerprint = folder_fingerprint(path)
            self._set_version(name, served, version)
            self._updates[name] = "on wake (asleep at level 2)"
            return self.state(name)
        differs = config_differs(spec.source, path)
        if differs is not None:
            raise LoadFailed(
                f"version {version!r} of model {name!r}: not this model's weights: {differs} "
                f"(POST .../load serves another model); version {served.version!r} serves on",
                param="path",
            )
        why = served.model.weights_in_place()
        if why is not None:
            state = await self._load_locked(name, path, version, remember, moved)
            self._updates[name] = f"loaded beside: {why}"
            return state.model_copy(update={"weights_update": self._updates[name]})
        self._loading[name] = version
        try:
            try:
                fingerprint = folder_fingerprint(path)
                weights = await asyncio.to_thread(checked, served.model, path)
            except ValueError as exc:
                raise LoadFailed(
                    f"version {version!r} of model {name!r}: {exc}; version {served.version!r} serves on",
                    param="path",
                ) from None
            served.resumed.clear()  # from here new requests wait for the new weights
            try:
                await drained(served)
                try:
                    torn = await in_thread(write_or_read_back, served.model, weights)
                except WeightsLost as lost:
                    await self._close(served)
                    served.model = self.registry.build(spec)
                    served.state, served.sleep_level = "sleeping", 2
                    raise LoadFailed(
                        f"version {version!r} of model {name!r}: {lost}; it sleeps (level 2) until "
                        "weights that read are given",
                        param="path",
                    ) from None
                if torn is not None:
                    raise LoadFailed(
                        f"version {version!r} of model {name!r}: {torn}; version {served.version!r} was "
                        f"read back from {spec.source} and serves on",
                        param="path",
                    )
                served.score_cache.clear()  # scores of the old weights
                if remember:
                    self._remember(name, served, "weights")
                served.model.spec = moved  # where the weights now come from: a level-2 sleep reloads from here
                served.fingerprint = fingerprint
                self._set_version(name, served, version)
            finally:
                served.resumed.set()
        finally:
            self._loading.pop(name, None)
        self._updates[name] = "in place"
        log.info("model %s: version %s written in place from %s", name, version, path)
        return self.state(name)
