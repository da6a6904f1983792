"""Versions: a new version loaded beside the serving one (and the old one drained and
retired once the new one's probe passed), a canary taking a share of the requests,
promoted to all of them."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

from rewardserve.engine.registry import Served
from rewardserve.models import presets
from rewardserve.models.cache import LRUCache
from rewardserve.models.errors import InvalidRequest, one_line
from rewardserve.models.reward_model import RewardModel
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import AdminModelState
from rewardserve.service.ops.lifecycle_base import LifecycleBase, load_and_probe
from rewardserve.service.ops.model_memory import drop
from rewardserve.service.ops.weights_update import (
    LoadFailed,
    folder_fingerprint,
    in_thread,
)

log = logging.getLogger(__name__)


def _checkpoint_config(source: str) -> dict[str, Any] | None:
    """config.json of a local checkpoint or of a hub id in the local cache; None if
    neither can be read here."""
    path = Path(source).expanduser() / "config.json"
    if not path.is_file():
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(source, "config.json")
        except ValueError:  # not a hub id's shape
            return None
        if not isinstance(cached, str):
            return None
        path = Path(cached)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def _label_count(config: dict[str, Any]) -> int:
    labels = config.get("id2label")
    if isinstance(labels, dict):
        return len(labels)
    count = config.get("num_labels")
    return count if isinstance(count, int) else 2  # transformers leaves out its default, 2


def checkpoint_differs(serving: RewardModel, source: str) -> str | None:
    """How the checkpoint at ``source`` differs from the serving model's in what makes
    its scores another model's: architecture, label count, or the kind its preset gives;
    None when it does not (or when either config cannot be read here)."""
    old, new = _checkpoint_config(serving.spec.source), _checkpoint_config(source)
    differences = []
    if old is not None and new is not None:
        if old.get("architectures") != new.get("architectures"):
            differences.append(f"architecture {new.get('architectures')} (serving: {old.get('architectures')})")
        if _label_count(old) != _label_count(new):
            differences.append(f"{_label_count(new)} label(s) (serving: {_label_count(old)})")
    kind = (presets.resolve(source, None) or {}).get("kind")
    if kind is not None and kind != serving.kind:
        differences.append(f"kind {kind} by its preset (serving: {serving.kind})")
    return "; ".join(differences) or None


class Versions(LifecycleBase):
    async def promote(self, name: str) -> AdminModelState:
        """The model's shadow candidate serves under its name (the candidate's own spec and
        version, loaded the way a load is); the shadowing ends with it."""
        shadow = self.registry.current(name).model.spec.shadow
        if shadow is None:
            raise InvalidRequest(f"model {name!r} has no shadow candidate to promote", param="name")
        candidate = self.registry.current(shadow.model)
        spec = candidate.model.spec.model_copy(update={"name": name, "shadow": None, "version": candidate.version})
        return await self.load(name, spec.source, candidate.version, spec=spec)

    async def canary(self, name: str, source: str, version: str, percent: float) -> AdminModelState:
        """``percent`` of the model's requests go to ``version``, loaded beside the serving
        one (which takes the rest); 0 ends the canary, its version drained and closed."""
        async with self._operation(name, "canary"), self._lock(name):
            ending = self.registry.canaries.pop(name, None)
            self.canaries.end(name)
            if ending is not None:
                await self._retire(ending[0])
            if percent > 0:
                if not source:
                    raise InvalidRequest("a canary needs the source of its version", param="source")
                old = self.registry.current(name)
                new = await self._loaded_beside(name, old, source, version, None)
                self.canaries.start(name, version, old.version)
                self.registry.canaries[name] = (new, percent / 100)
        return self.state(name)

    async def _loaded_beside(self, name: str, old: Served, source: str, version: str, spec: ModelSpec | None) -> Served:
        """A new version built, loaded and probed off the compute thread, batching; the
        old one untouched. LoadFailed (the old one serving on) when it cannot."""
        if old.model.kind == "rule" or not old.model.runs_torch:
            raise InvalidRequest(f"model {name!r} is of kind {old.model.kind}: it has no weights to load")
        if spec is None:
            spec = old.model.spec.model_copy(update={"source": source, "revision": None, "version": version})
        try:
            model = self.registry.build(spec)
        except (ValueError, OSError, RuntimeError) as exc:
            raise LoadFailed(f"version {version!r} of model {name!r}: {exc}", param="source") from None
        self._loading[name] = version
        fingerprint = folder_fingerprint(spec.source)
        try:
            await in_thread(load_and_probe, model, self.settings.fault_load_delay_s, True)
        except asyncio.CancelledError:  # a shutdown: the load has ended; what it loaded is let go
            await asyncio.to_thread(drop, model)
            raise
        except Exception as exc:  # noqa: BLE001 - any failure keeps the old version serving
            await asyncio.to_thread(drop, model)
            raise LoadFailed(
                f"version {version!r} of model {name!r} did not load, version {old.version!r} serves on: "
                + one_line(exc)[:800],
                param="source",
            ) from None
        finally:
            self._loading.pop(name, None)
        new = Served(
            model, score_cache=LRUCache(model.options.score_cache_size), version=version, fingerprint=fingerprint
        )
        new.ready = True
        new.idle.set()
        self.registry.start_batching(new)
        return new

    async def load(
        self, name: str, source: str, version: str, remember: bool = True, spec: ModelSpec | None = None
    ) -> AdminModelState:
        async with self._operation(name, "load"), self._lock(name):
            return await self._load_locked(name, source, version, remember, spec)

    async def load_checked(self, name: str, source: str, version: str, force: bool = False) -> AdminModelState:
        """An admin's load: refused (422) for a version string this model has served, and
        unless ``force``, for a checkpoint of another architecture, label count or kind
        than the serving model's, which would serve other scores under the same name."""
        async with self._operation(name, "load"), self._lock(name):
            old = self.registry.current(name)
            used = self._versions_used(name, old)
            if version in used:
                raise InvalidRequest(
                    f"model {name!r} has already served version {version!r} (versions: {', '.join(sorted(used))}): "
                    "give the new checkpoint a version of its own",
                    param="version",
                )
            differs = None if force else checkpoint_differs(old.model, source)
            if differs is not None:
                raise InvalidRequest(
                    f"{source} is not a next version of model {name!r}: {differs}; "
                    "send force: true to serve it under this name all the same",
                    param="source",
                )
            return await self._load_locked(name, source, version, True, None)

    async def _load_locked(
        self, name: str, source: str, version: str, remember: bool, spec: ModelSpec | None
    ) -> AdminModelState:
        old = self.registry.current(name)
        start = time.perf_counter()
        new = await self._loaded_beside(name, old, source, version, spec)
        self.registry.replace(name, new)  # from here new requests get the new version
        self._versions_used(name, new)
        if remember:
            self._remember(name, old, "load")
        self.metrics.model_version.labels(name, old.version).set(0)
        self.metrics.model_version.labels(name, version).set(1)
        new.last_operation_s = time.perf_counter() - start
        log.info(
            "model %s: version %s serves (was %s), loaded in %.2fs",
            name,
            version,
            old.version,
            new.last_operation_s,
        )
        await self._retire(old)
        return self.state(name)
