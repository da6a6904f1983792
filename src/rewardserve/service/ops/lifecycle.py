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

A call made with ``?async=true`` runs as a task (service/api/admin/operations.py): the
answer is 202 with the model's state, whose ``operation`` says how the call is going
(running, succeeded, failed; cancelled by a shutdown), polled by its id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from rewardserve.engine.registry import ModelRegistry, Served
from rewardserve.models import presets
from rewardserve.models.cache import LRUCache
from rewardserve.models.checkpoints import is_local
from rewardserve.models.errors import InvalidRequest, one_line
from rewardserve.models.reward_model import RewardModel
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import AdminModelState
from rewardserve.service.api.admin.operations import AdminOperations
from rewardserve.service.observability.metrics import Metrics
from rewardserve.service.ops.canary_watch import Canaries
from rewardserve.service.ops.model_memory import drop, held_bytes
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
from rewardserve.service.settings import Settings

log = logging.getLogger(__name__)
# How long a sleep or a retirement waits for the requests using the model.
DRAIN_TIMEOUT_S = 300.0


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


class Lifecycle:
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
        registry.waker = self._wake  # a model asleep that may wake on a request
        self.operations = AdminOperations()  # ?async=true calls, and every task started here
        self._updates: dict[str, str] = {}  # name -> how its last weights call was applied

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    # ------------------------------------------------------------------ requests

    # ------------------------------------------------------------------ admin calls

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
            await _drained(served)
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
                    await in_thread(_load_and_probe, model, 0.0, False)
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

    def _remember(self, name: str, served: Served, how: str) -> None:
        """What ``served`` is, for rollback, as a newer version replaces it."""
        source = served.model.spec.source
        fingerprint = served.fingerprint or folder_fingerprint(source)
        self._history.setdefault(name, []).append((source, served.version, how, fingerprint))

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
            await in_thread(_load_and_probe, model, self.settings.fault_load_delay_s, True)
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

    async def _retire(self, served: Served) -> None:
        served.state = "draining"
        await _drained(served)
        served.retired = True  # before any await: nobody holds it from here
        await self._close(served)

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

    def _versions_used(self, name: str, served: Served) -> set[str]:
        used = self._served_versions.setdefault(name, set())
        used.add(served.version)
        used.update(version for _, version, _, _ in self._history.get(name, []))
        return used

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
                await _drained(served)
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


async def _drained(served: Served) -> None:
    try:
        await asyncio.wait_for(served.idle.wait(), DRAIN_TIMEOUT_S)
    except TimeoutError:
        log.warning(
            "model %s: %d requests still use it after %.0fs", served.model.name, served.in_flight, DRAIN_TIMEOUT_S
        )


def _load_and_probe(model: RewardModel, delay_s: float, pin: bool) -> None:
    """``pin``: a new source, pinned as at start; a model woken again was pinned then."""
    if delay_s:
        time.sleep(delay_s)
    if pin:
        model.pin_revision()
    model.load()
    model.probe()
